"""Several `db upgrade` processes started together on a fresh database all succeed (issue 11
§5): migrations are serialised (a PostgreSQL advisory lock, a lock file beside a SQLite file),
so the later ones find the database at head instead of racing to create the same tables."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from sessionlog_server.storage.factory import normalise_url, shown_url
from sessionlog_server.storage.schema import SCHEMA_REVISION
from tests.conftest import scratch_pg
from tests.support.servers import ROOT

PROCESSES = 3
ROUNDS = 3


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """ROUNDS empty databases of one backend."""
    if request.param == "sqlite":
        yield [f"sqlite:///{tmp_path / f'round-{i}' / 'fresh.db'}" for i in range(ROUNDS)]
        return
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(scratch_pg("sessionlog_mig")) for _ in range(ROUNDS)]


def test_upgrades_started_together_on_a_fresh_database_all_succeed(fresh_urls: list[str]) -> None:
    for url in fresh_urls:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "sessionlog", "db", "upgrade", "--db", url],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(PROCESSES)
        ]
        results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
        assert all(code == 0 for code, _ in results), [err[-500:] for code, err in results if code]
        # One migrated, and says so; the others found it done. Each said "at the newest revision".
        said = sorted(p.stdout.read().strip() if p.stdout else "" for p in procs)
        database = f"database {shown_url(url)}"  # named: it did not say which database it was
        assert said == sorted(
            [f"{database} upgraded from no schema to {SCHEMA_REVISION}, the newest revision"]
            + [f"{database} is at the newest revision ({SCHEMA_REVISION}): nothing to do"] * (PROCESSES - 1)
        ), said
        engine = create_engine(normalise_url(url))
        try:
            with engine.connect() as conn:
                assert {"sessions", "events", "alembic_version"} <= set(inspect(conn).get_table_names())
        finally:
            engine.dispose()
