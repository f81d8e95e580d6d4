"""Initial schema: sessions (with writer fencing state), events, blobs.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def json_payload() -> sa.types.TypeEngine[Any]:
    """JSONB on PostgreSQL, JSON text elsewhere (as models.JsonPayload)."""
    return sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_blobs")),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("namespace", sa.String(length=128), server_default="default", nullable=False),
        sa.Column("create_time", sa.BigInteger(), nullable=False),
        sa.Column("cwd", sa.Text(), nullable=True),
        sa.Column("metadata", json_payload(), nullable=False),
        sa.Column("parent_id", sa.String(length=128), nullable=True),
        sa.Column("fork_seq", sa.BigInteger(), nullable=True),
        sa.Column("next_seq", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("last_time", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("writer_id", sa.String(length=128), nullable=True),
        sa.Column("epoch", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("lease_expires_at", sa.BigInteger(), nullable=True),
        sa.Column("open_turn", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.ForeignKeyConstraint(["parent_id"], ["sessions.id"], name=op.f("fk_sessions_parent_id_sessions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
    )
    op.create_index("ix_sessions_namespace_create_time_id", "sessions", ["namespace", "create_time", "id"])
    op.create_index("ix_sessions_open_turn", "sessions", ["open_turn"])
    op.create_index("ix_sessions_parent_id", "sessions", ["parent_id"])
    op.create_table(
        "events",
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("time", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(length=128), nullable=False),
        sa.Column("data", json_payload(), nullable=False),
        sa.Column("event_id", sa.String(length=128), nullable=True),
        sa.Column("ignorable", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("surface_op", sa.String(length=8), nullable=True),
        sa.Column("replace_start_seq", sa.BigInteger(), nullable=True),
        sa.Column("replace_end_seq", sa.BigInteger(), nullable=True),
        sa.Column("source_event_seqs", json_payload(), nullable=True),
        sa.Column("blob_refs", json_payload(), nullable=True),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name=op.f("fk_events_session_id_sessions")),
        sa.PrimaryKeyConstraint("session_id", "seq", name=op.f("pk_events")),
        sa.UniqueConstraint("session_id", "event_id", name=op.f("uq_events_session_id_event_id")),
    )


def downgrade() -> None:
    op.drop_table("events")
    op.drop_index("ix_sessions_parent_id", table_name="sessions")
    op.drop_index("ix_sessions_open_turn", table_name="sessions")
    op.drop_index("ix_sessions_namespace_create_time_id", table_name="sessions")
    op.drop_table("sessions")
    op.drop_table("blobs")
