"""The Alembic chain builds exactly the schema the SQLAlchemy models describe, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from sessionlog_server.storage.factory import normalise_url
from sessionlog_server.storage.models import Base


def test_autogenerate_finds_no_difference(db_url: str) -> None:
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
            assert {"sessions", "events", "blobs", "alembic_version"} <= set(inspect(conn).get_table_names())
    finally:
        engine.dispose()
