"""SQLAlchemy 2 typed models: the tables every backend stores (SPEC §12).

`sessions` holds one row per session: its identity, its fork origin, and the fencing state of
its single writer (`writer_id`, `epoch`, `lease_expires_at`, `lease_token_hash`, `next_seq`), which every append
checks and advances inside its commit transaction (SPEC §7). `open_turn` is kept indexed so
start-up finds the sessions to repair without scanning events (SPEC §8). `events` is the log;
`blobs` holds large payload strings once, content-addressed. `fold_snapshots` caches a
session's folded state at some seqs (never the truth: it can be dropped at any time).

An event's `data` and a session's `metadata` are stored as the exact JSON text that was accepted
(SPEC §12): JSONB would reorder keys and renormalise numbers, so they are TEXT on every backend.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# JSON payloads are JSONB on PostgreSQL (queryable, validated) and JSON text on SQLite.
JsonPayload = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base with a naming convention, so migrations name constraints stably."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class SessionRow(Base):
    """One session: identity, fork origin, and its writer's fencing state."""

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(128), default="default", server_default="default")
    create_time: Mapped[int] = mapped_column(BigInteger)
    cwd: Mapped[str | None] = mapped_column(Text)
    session_metadata: Mapped[str] = mapped_column("metadata", Text)
    """The metadata object's JSON text, byte for byte as CreateSession accepted it."""
    parent_id: Mapped[str | None] = mapped_column(String(128), ForeignKey("sessions.id"))
    fork_seq: Mapped[int | None] = mapped_column(BigInteger)
    next_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    last_time: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    writer_id: Mapped[str | None] = mapped_column(String(128))
    epoch: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    lease_expires_at: Mapped[int | None] = mapped_column(BigInteger)
    lease_token_hash: Mapped[str | None] = mapped_column(String(64))
    """Hex sha256 of the current lease's token; the token itself is known only to its holder."""
    lease_since_seq: Mapped[int | None] = mapped_column(BigInteger)
    """The session's next seq when the current lease's token was issued: headers from here on
    were reported under this lease (a holder's reconnect keeps it; SPEC §6 `resume`)."""
    open_turn: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    __table_args__ = (
        Index("ix_sessions_namespace_create_time_id", "namespace", "create_time", "id"),
        Index("ix_sessions_parent_id", "parent_id"),
        Index("ix_sessions_open_turn", "open_turn"),
    )


class EventRow(Base):
    """One committed event; `(session_id, seq)` is the key, `event_id` is unique per session."""

    __tablename__ = "events"

    session_id: Mapped[str] = mapped_column(String(128), ForeignKey("sessions.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    time: Mapped[int] = mapped_column(BigInteger)
    type: Mapped[str] = mapped_column(String(128))
    data: Mapped[str] = mapped_column(Text)
    event_id: Mapped[str | None] = mapped_column(String(128))
    ignorable: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    surface_op: Mapped[str | None] = mapped_column(String(8))
    replace_start_seq: Mapped[int | None] = mapped_column(BigInteger)
    replace_end_seq: Mapped[int | None] = mapped_column(BigInteger)
    source_event_seqs: Mapped[list[int] | None] = mapped_column(JsonPayload)
    blob_refs: Mapped[list[Any] | None] = mapped_column(JsonPayload)

    __table_args__ = (UniqueConstraint("session_id", "event_id"),)


class BlobRow(Base):
    """A large payload string, stored once under the sha256 of its UTF-8 bytes."""

    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    content: Mapped[bytes] = mapped_column(LargeBinary)


class FoldSnapshotRow(Base):
    """A session's fold state after `seq`, written by fold code `fold_version` (a cache)."""

    __tablename__ = "fold_snapshots"

    session_id: Mapped[str] = mapped_column(String(128), ForeignKey("sessions.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    fold_version: Mapped[int] = mapped_column(Integer)
    state: Mapped[bytes] = mapped_column(LargeBinary)
