"""Where a lease began: sessions.lease_since_seq, the session's next seq when its lease token
was issued.

A request header is logged with reason `resume` when it is the first of a new writer lease
(SPEC §6). A holder that takes its own lease again with its token (a reconnect, also after the
service restarted) is the same lease, so the boundary has to outlive the process: a header at
or past this seq was reported under the current lease. Leases granted before this migration
have none; their next grant sets it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("lease_since_seq", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("lease_since_seq")
