"""Fold snapshots, and event data stored as the exact JSON text that was accepted.

`fold_snapshots` caches a session's folded state at some seqs so a session loads from its
latest snapshot instead of its whole log. `events.data` becomes TEXT: JSONB reorders keys and
renormalises numbers (1e20 came back as an integer), so what was acknowledged could differ
from what is read. Existing PostgreSQL rows keep the text JSONB gives back for them (the
original text is gone); every new event is stored byte for byte.

Revision ID: 0003
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fold_snapshots",
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("fold_version", sa.Integer(), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name=op.f("fk_fold_snapshots_session_id_sessions")),
        sa.PrimaryKeyConstraint("session_id", "seq", name=op.f("pk_fold_snapshots")),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE events ALTER COLUMN data TYPE text USING data::text")
    else:
        with op.batch_alter_table("events") as batch:
            batch.alter_column("data", type_=sa.Text(), existing_nullable=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE events ALTER COLUMN data TYPE jsonb USING data::jsonb")
    else:
        with op.batch_alter_table("events") as batch:
            batch.alter_column("data", type_=sa.JSON(), existing_nullable=False)
    op.drop_table("fold_snapshots")
