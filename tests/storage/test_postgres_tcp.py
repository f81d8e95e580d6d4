"""A PostgreSQL connection notices a vanished host in about a minute (factory.TCP_DEFAULTS).

The kernel's defaults give an idle connection up after two hours and one waiting on a sent
commit after about 15 minutes, so a failover that moved the database's address held a writer's
append that long. What the settings do on a real cut link cannot be shown on loopback (the
kernel answers for any local peer); these tests show the settings reach libpq on every kind
of connection the service opens, and that a URL's own settings win.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import make_url

from sessionlog_server.storage.factory import TCP_DEFAULTS, normalise_url, open_recorder
from sessionlog_server.storage.postgres import PostgresEventRecorder


def _libpq_settings(recorder: Any) -> dict[str, str]:
    """The connection parameters libpq holds for a connection of the recorder's write pool."""
    with recorder.write_engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert isinstance(raw, psycopg.Connection)
        return dict(raw.info.get_parameters())


def test_every_connection_of_the_service_carries_the_tcp_defaults(pg_database: str) -> None:
    recorder = open_recorder(pg_database)
    try:
        assert isinstance(recorder, PostgresEventRecorder)
        held = _libpq_settings(recorder)
        assert {name: held.get(name) for name in TCP_DEFAULTS} == TCP_DEFAULTS
        # the change feed's LISTEN connection is opened from the same settings
        feed_dsn = recorder.change_feed().dsn  # type: ignore[attr-defined]
        with psycopg.connect(feed_dsn) as conn:
            feed = conn.info.get_parameters()
        assert {name: feed.get(name) for name in TCP_DEFAULTS} == TCP_DEFAULTS
    finally:
        recorder.close()


@pytest.mark.parametrize("own", ["keepalives_idle=5", "tcp_user_timeout=0", "keepalives=0"])
def test_a_url_setting_any_tcp_setting_keeps_its_own_and_gets_no_defaults(pg_database: str, own: str) -> None:
    name, value = own.split("=")
    query = make_url(normalise_url(f"{pg_database}?{own}")).query
    assert query[name] == value
    assert not (set(TCP_DEFAULTS) - {name}) & set(query), query


def test_a_sqlite_url_is_left_as_it_is() -> None:
    assert normalise_url("sqlite:///x.db") == "sqlite:///x.db"
