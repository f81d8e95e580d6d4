"""Shared fixtures: one suite, run against SQLite and PostgreSQL.

Every test that takes `db_url` runs twice, once per backend, each on a freshly migrated
database. PostgreSQL is required, not optional: when it cannot be reached the PostgreSQL
half of the suite fails (it is not skipped). Each test process gets its own PostgreSQL
database, so concurrent runs do not collide.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sessionlog.client import SessionLogClient
from sessionlog_server.storage.migrate import upgrade
from tests.support.servers import ServerThread

# A `sessionlog serve` the tests start runs one process (their pids, kills and restarts are
# of that process) unless a test asks for workers; tests/transport/test_workers.py covers
# several, and the default of one per core.
os.environ.setdefault("SESSIONLOG_WORKERS", "1")

PG_ADMIN_URL = os.environ.get("SESSIONLOG_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgresql"]


def _pg_url(database: str) -> str:
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{database}"


@contextlib.contextmanager
def scratch_pg(prefix: str) -> Iterator[str]:
    """The URL of an empty PostgreSQL database of its own (named `prefix_PID_RANDOM`), dropped
    when the block ends, connections and all."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _pg_url(name)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test process, dropped at the end."""
    with scratch_pg("sessionlog_test") as url:
        upgrade(url)
        yield url


@pytest.fixture(scope="session")
def sqlite_database(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("sqlite") / "sessionlog.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    return url


@pytest.fixture(params=BACKENDS, scope="session")
def db_url(request: pytest.FixtureRequest) -> str:
    """A migrated database URL, once per backend (shared within the test process)."""
    fixture = "sqlite_database" if request.param == "sqlite" else "pg_database"
    return str(request.getfixturevalue(fixture))


@pytest.fixture(scope="session")
def server(db_url: str) -> Iterator[ServerThread]:
    """A real gRPC server on loopback over `db_url`, shared by the tests of one backend."""
    running = ServerThread(db_url, lease_ttl_ms=5_000)
    yield running
    running.stop()


@pytest.fixture
def client(server: ServerThread) -> Iterator[SessionLogClient]:
    with SessionLogClient(server.target) as c:
        yield c


@pytest.fixture
def sid() -> str:
    """A fresh session id (tests share a database, never a session)."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def fresh_db(db_url: str, tmp_path: Path) -> str:
    """A database of its own for tests that restart or fence servers (a new SQLite file, or the
    shared PostgreSQL database, whose sessions are isolated by id)."""
    if db_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'own.db'}"
        upgrade(url)
        return url
    return db_url
