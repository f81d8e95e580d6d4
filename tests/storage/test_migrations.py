"""The Alembic chain builds exactly the schema the SQLAlchemy models describe, on both databases,
and its steps carry existing rows over (and back, downgraded)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from sessionlog.core import jsonvalue
from sessionlog_server.storage.factory import normalise_url, open_recorder, shown_url
from sessionlog_server.storage.migrate import alembic_config, check_at_head, upgrade
from sessionlog_server.storage.models import Base
from sessionlog_server.storage.schema import SCHEMA_REVISION, prepare, stored_revisions
from tests.conftest import BACKENDS, scratch_pg
from tests.support.fresh_interpreter import loaded
from tests.support.servers import ROOT


def test_autogenerate_finds_no_difference(db_url: str) -> None:
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
            assert {"sessions", "events", "blobs", "alembic_version"} <= set(inspect(conn).get_table_names())
    finally:
        engine.dispose()


@pytest.fixture(params=BACKENDS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of its own (migrated step by step by the test)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'steps.db'}"
        return
    with scratch_pg("sessionlog_steps") as url:
        yield url


#: Session metadata written before 0006, as the JSON column took it.
OLD_METADATA = {"m-keys": '{"zeta": 1, "alpha": [1.5, "é😀"], "n": {"b": null}}', "m-empty": "{}"}


def _metadata(url: str) -> tuple[str, dict[str, Any]]:
    """The metadata column's type and each session's metadata value, straight from the table."""
    engine = create_engine(normalise_url(url))
    try:
        with engine.connect() as conn:
            kind = next(c["type"] for c in inspect(conn).get_columns("sessions") if c["name"] == "metadata")
            rows = conn.execute(text("SELECT id, metadata FROM sessions")).all()
    finally:
        engine.dispose()
    return type(kind).__name__.upper(), {
        sid: jsonvalue.loads(value) if isinstance(value, str) else value for sid, value in rows
    }


def test_0006_keeps_metadata_as_text_carrying_existing_rows_over_and_back(empty_url: str) -> None:
    upgrade(empty_url, "0005")
    engine = create_engine(normalise_url(empty_url))
    as_json = "CAST(:m AS jsonb)" if engine.dialect.name == "postgresql" else ":m"
    try:
        with engine.begin() as conn:
            for sid, metadata in OLD_METADATA.items():
                conn.execute(
                    text(f"INSERT INTO sessions (id, create_time, metadata) VALUES (:id, 0, {as_json})"),
                    {"id": sid, "m": metadata},
                )
    finally:
        engine.dispose()
    values = {sid: jsonvalue.loads(metadata) for sid, metadata in OLD_METADATA.items()}
    before = _metadata(empty_url)
    assert before[1] == values

    upgrade(empty_url)
    assert _metadata(empty_url) == ("TEXT", values)
    recorder = open_recorder(empty_url)
    try:
        assert {sid: recorder.get_session(sid).metadata for sid in OLD_METADATA} == values
    finally:
        recorder.close()

    command.downgrade(alembic_config(empty_url), "0005")
    assert _metadata(empty_url) == before  # the previous shape (JSONB on PostgreSQL), same values
    upgrade(empty_url)
    assert _metadata(empty_url) == ("TEXT", values)


def _tables_and_revision(url: str) -> tuple[set[str], str | None]:
    engine = create_engine(normalise_url(url))
    try:
        with engine.connect() as conn:
            return set(inspect(conn).get_table_names()), MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def test_a_sqlite_migration_stopped_halfway_leaves_its_revision_as_it_was(tmp_path: Path) -> None:
    """A step that stops partway (`db upgrade` killed, a failure in the step) takes back what it
    did: SQLite's DDL is transactional, but pysqlite runs it outside a transaction unless one is
    begun explicitly. Killed during 0003, a file was left at revision 0001 with fold_snapshots
    (and Alembic's copy of events) created, and every later upgrade, `serve` included, failed
    with 'table fold_snapshots already exists'."""
    url = f"sqlite:///{tmp_path / 'halfway.db'}"
    upgrade(url, "0001")
    engine = create_engine(normalise_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO sessions (id, create_time, metadata) VALUES ('s', 0, '{}')"))
            conn.execute(text("INSERT INTO events (session_id, seq, time, type, data) VALUES ('s', 0, 5, 'n', '{}')"))
            # 0003 rebuilds events through this table (Alembic's batch mode): with the name taken,
            # the step fails after it created fold_snapshots, as a kill there would stop it.
            conn.execute(text("CREATE TABLE _alembic_tmp_events (taken INTEGER)"))
        with pytest.raises(Exception, match="_alembic_tmp_events"):
            upgrade(url)
        tables, revision = _tables_and_revision(url)
        assert revision == "0001" and "fold_snapshots" not in tables
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE _alembic_tmp_events"))
    finally:
        engine.dispose()

    upgrade(url)  # the next upgrade runs the whole step
    tables, revision = _tables_and_revision(url)
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    assert revision == head and "fold_snapshots" in tables
    recorder = open_recorder(url)
    try:
        assert [(e.seq, e.time, e.type) for e in recorder.read_events("s", 0, None, 10)] == [(0, 5, "n")]
    finally:
        recorder.close()


def test_a_database_migrated_by_a_newer_version_is_refused_naming_what_to_run(empty_url: str) -> None:
    """A database at a revision this version does not know (a newer instance migrated it, as in
    a rolling upgrade rolled back): `serve` said only "Can't locate revision identified by
    '0099'", naming neither the database nor why, and `serve --no-migrate` told the operator to
    run `sessionlog db upgrade`, which fails the same way. Both now say the schema is newer than
    this version's, and leave the database as it is."""
    upgrade(empty_url)
    engine = create_engine(normalise_url(empty_url))
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    finally:
        engine.dispose()
    head = ScriptDirectory.from_config(alembic_config(empty_url)).get_current_head()
    for prepared in (lambda: upgrade(empty_url), lambda: check_at_head(empty_url)):
        with pytest.raises(ValueError) as refused:
            prepared()
        said = str(refused.value)
        assert said.startswith(f"the database {shown_url(empty_url)} is at schema revision 0099"), said
        assert f"newer than this version's ({head})" in said and "db upgrade" not in said, said
    assert _tables_and_revision(empty_url)[1] == "0099"


def test_another_applications_database_is_refused_as_not_sessionlogs(empty_url: str) -> None:
    """A database whose Alembic table another application keeps was refused as "a newer
    sessionlog migrated it; serve it with that version", sending the operator to upgrade."""
    engine = create_engine(normalise_url(empty_url))
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)"))
            conn.execute(text("INSERT INTO alembic_version VALUES ('a1b2c3d4e5')"))
    finally:
        engine.dispose()
    for prepared in (lambda: upgrade(empty_url), lambda: check_at_head(empty_url)):
        with pytest.raises(ValueError) as refused:
            prepared()
        said = str(refused.value)
        assert said.startswith(f"the database {shown_url(empty_url)} is not a sessionlog database"), said
        assert "revision a1b2c3d4e5" in said and "newer" not in said, said
    assert _tables_and_revision(empty_url) == ({"alembic_version"}, "a1b2c3d4e5")


def test_the_schema_revision_is_the_head_of_the_chain(tmp_path: Path) -> None:
    """SCHEMA_REVISION, which a start-up compares the database's revision with, is where the
    migrations in migrations/ end: a new migration moves both."""
    config = alembic_config(f"sqlite:///{tmp_path / 'any.db'}")
    assert ScriptDirectory.from_config(config).get_current_head() == SCHEMA_REVISION


def test_a_database_at_head_is_prepared_without_loading_alembic(empty_url: str) -> None:
    """A restart finds its database at head: `prepare`, with migrations on or off, answers from
    the version table, and a fresh interpreter that loads the server and prepares the database
    never imports Alembic (8 % of a start-up's instructions, in the parent and each worker)."""
    upgrade(empty_url)
    steps = (
        "from sessionlog.cli import server_commands\n"
        "from sessionlog_server.transport import server, workers\n"
        "from sessionlog_server.storage.schema import prepare\n"
        "with server_commands.startup_errors():\n"
        f"    prepare({empty_url!r}, True)\n"
        f"    prepare({empty_url!r}, False)\n"
    )
    assert loaded(steps, ["alembic", "mako"]) == []


def test_a_database_behind_head_is_migrated_or_refused_as_before(empty_url: str) -> None:
    """Anywhere but at head, `prepare` leaves the database to Alembic: refused, naming the
    revision, with migrations off; brought to head with them on."""
    upgrade(empty_url, "0005")
    with pytest.raises(ValueError, match=f"revision 0005; this server needs schema revision {SCHEMA_REVISION}"):
        prepare(empty_url, False)
    assert stored_revisions(empty_url) == ["0005"]
    prepare(empty_url, True)
    assert stored_revisions(empty_url) == [SCHEMA_REVISION]


def test_a_chain_that_ends_elsewhere_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SESSIONLOG_MIGRATIONS_DIR naming a chain that does not end at this code's schema (here
    its first step alone; a directory without versions/ is an empty chain to Alembic): `db
    upgrade` said the database was at the newest revision and `serve` served it, a table or
    column short. Now the upgrade names the directory and what the server needs."""
    chain = tmp_path / "migrations"
    (chain / "versions").mkdir(parents=True)
    (chain / "env.py").write_text((ROOT / "migrations" / "env.py").read_text())
    first = Path("versions") / "0001_initial.py"
    (chain / first).write_text((ROOT / "migrations" / first).read_text())
    monkeypatch.setenv("SESSIONLOG_MIGRATIONS_DIR", str(chain))
    url = f"sqlite:///{tmp_path / 'short.db'}"
    with pytest.raises(ValueError) as refused:
        prepare(url, True)
    assert str(refused.value) == (
        f"the migrations in {chain} end at schema revision 0001, but this server needs {SCHEMA_REVISION}: "
        "SESSIONLOG_MIGRATIONS_DIR, if set, names another version's migrations/"
    )
    with pytest.raises(ValueError, match=f"revision 0001; this server needs schema revision {SCHEMA_REVISION}"):
        prepare(url, False)
