"""PostgreSQL compresses event payloads and blobs with lz4 instead of pglz.

A value past TOAST's threshold (about 2 KB: a typical event's `data`) is compressed as it is
stored, with `default_toast_compression` unless its column names a method; the default is
pglz. At 16 sessions streaming 2 KB events the database then spent 38 µs of CPU an event, on
the cores the service shares with it; with lz4, 17 µs, and the service committed 12 % more
events a second (bench/PROFILE.md, round 35). Only values written from now on use lz4: each
stored value names its method, so existing rows read as before, and so do new ones after a
downgrade, which sets the columns back to the default. lz4 needs PostgreSQL 14 or later built
with it (the Debian and official images are); elsewhere the step changes nothing. SQLite
stores text and bytes uncompressed: nothing to do. The change is to the catalogue only: no
table is rewritten, and the lock it takes is held for a moment.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The columns whose values are large: an event's JSON text, a blob's bytes. (A fold snapshot
#: is already zlib-compressed by the service, `sessions.metadata` is small.)
COMPRESSED = (("events", "data"), ("blobs", "content"))


def _lz4_available() -> bool:
    """Whether this PostgreSQL can compress with lz4: 14 or later (the setting exists) and built
    with lz4 (the setting offers it)."""
    offered = op.get_bind().execute(
        sa.text("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
    )
    return offered.scalar() is True


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql" or not _lz4_available():
        return
    for table, column in COMPRESSED:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION lz4")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql" or not _lz4_available():
        return  # the upgrade set nothing here
    for table, column in COMPRESSED:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION DEFAULT")
