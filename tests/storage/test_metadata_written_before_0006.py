"""Metadata that an instance older than migration 0006 wrote during a rolling upgrade
(storage/rows.py `stored_metadata`).

0006 made `sessions.metadata` TEXT (it was JSONB on PostgreSQL). An old instance still serving
beside the new ones wrote a session's metadata into the TEXT column as a JSON *string* holding
the object's text; every listing of its namespace then failed DATA_NOT_OBJECT on the new
instances, for good. Metadata is always an object, so such a string is read as the object it
holds.
"""

from __future__ import annotations

from sqlalchemy import create_engine, text

from sessionlog.client import SessionLogClient
from tests.support.servers import ServerThread


def test_metadata_stored_as_a_string_of_its_object_is_read_as_the_object(db_url: str, sid: str) -> None:
    server = ServerThread(db_url)
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid, metadata={"keep": 1})
            client.create_session(f"{sid}-old")
            engine = create_engine(db_url)
            with engine.begin() as conn:  # as the old instance left it: an object's text, JSON-quoted
                doubled = '"{\\"a\\": \\"\\u00fc\\", \\"b\\": 2}"'
                conn.execute(text("UPDATE sessions SET metadata = :m WHERE id = :s"), {"m": doubled, "s": f"{sid}-old"})
            engine.dispose()
            listed = {info.id: info.metadata for info in client.list_sessions() if info.id.startswith(sid)}
            assert listed == {sid: {"keep": 1}, f"{sid}-old": {"a": "ü", "b": 2}}
    finally:
        server.stop()
