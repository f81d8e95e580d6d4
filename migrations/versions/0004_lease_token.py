"""Lease tokens: sessions.lease_token_hash, the hash of the secret a lease holder presents.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

A writer id is a label; holding a lease takes the token returned when it was granted
(SPEC §7). Only its sha256 is stored, so reading the database does not hand out leases.
Leases granted before this migration have no token: they cannot be presented and lapse
with their TTL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("lease_token_hash", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("lease_token_hash")
