"""Session metadata stored as the exact JSON text that was accepted.

`sessions.metadata` becomes TEXT, as `events.data` did in 0003: JSONB renormalises numbers
(-0.0 came back as 0.0, 1e308 as a 309-digit integer) and reorders keys, so what CreateSession
acknowledged could differ from what GetSession and ListSessions returned, and from what the
same request gave on SQLite. Nothing queries metadata with JSONB operators, so no JSONB index
column is kept beside it. Existing PostgreSQL rows keep the text JSONB gives back for them
(the original text is gone); every new session is stored byte for byte. The downgrade restores
JSONB (PostgreSQL) and the JSON column type (SQLite) from the stored text.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE sessions ALTER COLUMN metadata TYPE text USING metadata::text")
    else:
        with op.batch_alter_table("sessions") as batch:
            batch.alter_column("metadata", type_=sa.Text(), existing_nullable=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE sessions ALTER COLUMN metadata TYPE jsonb USING metadata::jsonb")
    else:
        with op.batch_alter_table("sessions") as batch:
            batch.alter_column("metadata", type_=sa.JSON(), existing_nullable=False)
