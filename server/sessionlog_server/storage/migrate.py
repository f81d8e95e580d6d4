"""Run the Alembic migration chain in migrations/ (the `db upgrade` command, and `serve` on a
database not at head: schema.prepare)."""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, make_url, text

from sessionlog_server.storage.factory import normalise_url, shown_url, sqlite_file
from sessionlog_server.storage.schema import SCHEMA_REVISION, connection, missing

INSTALLED_MIGRATIONS = Path("share") / "sessionlog" / "migrations"  # pyproject's data-files


def migrations_dir() -> Path:
    """Where the Alembic chain is: $SESSIONLOG_MIGRATIONS_DIR, else migrations/ of the checkout this
    code runs from (a development install), else the copy a regular install put beside it.

    The checkout wins over the installed copy so that a developer's new migration is the one run.
    """
    override = os.environ.get("SESSIONLOG_MIGRATIONS_DIR")
    if override:
        return Path(override)
    checkout = Path(__file__).resolve().parents[3] / "migrations"
    candidates = [checkout, *_installed_migrations(), Path(sys.prefix) / INSTALLED_MIGRATIONS]
    for candidate in candidates:
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(
        f"no Alembic migrations in {' or '.join(dict.fromkeys(map(str, candidates)))}: "
        "set SESSIONLOG_MIGRATIONS_DIR to the repository's migrations/ directory"
    )


def _installed_migrations() -> list[Path]:
    """Where the installer put the chain, as the installed distribution's file list says.

    An installer puts data files under its scheme's data directory, which is `sys.prefix` in a
    venv but not elsewhere: a distribution's own Python (Debian's, in a `python:` image built
    on it, has `sys.prefix` /usr) installs them under /usr/local, and `pip install --user` under
    ~/.local. Looking under `sys.prefix` alone, `serve` found no migrations there and would not
    start. A checkout's own metadata (`*.egg-info`, on the path when run from it) lists the
    files at their checkout paths and names no installed copy.
    """
    try:
        files = metadata.distribution("sessionlog").files or []
    except metadata.PackageNotFoundError:
        return []
    marker = (INSTALLED_MIGRATIONS / "env.py").parts
    return [Path(str(file.locate())).resolve().parent for file in files if tuple(file.parts[-len(marker) :]) == marker]


def alembic_config(url: str) -> Config:
    """An Alembic config for `url`, without needing an alembic.ini on disk."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> str | None:
    """Bring the database at `url` to `revision` (creating the SQLite file if needed); returns
    the revision it was at before (None: never migrated), so a caller can say what it did.

    Runs under a lock held for the whole upgrade, so several `serve` or `db upgrade` processes
    started together on a fresh database migrate one after the other (the later ones find it
    at head) instead of racing to create the same tables. Brought to head, the database must
    then be at SCHEMA_REVISION, the schema this code reads and writes (`check_chain_end`).
    """
    config = alembic_config(url)
    with migration_lock(url):
        current = None if missing(url) else _current_revision(url)
        check_known(url, config, current)
        command.upgrade(config, revision)
    if revision == "head":
        check_chain_end(url)
    return current


def check_chain_end(url: str) -> None:
    """Refuse (ValueError, naming the chain's directory) a database that the chain's head left at
    another revision than SCHEMA_REVISION: SESSIONLOG_MIGRATIONS_DIR names another version's chain
    (or a directory without its versions/, which Alembic takes for an empty chain: `db upgrade`
    said the database was at the newest revision, and `serve` served it without a table)."""
    reached = _current_revision(url)
    if reached != SCHEMA_REVISION:
        raise ValueError(
            f"the migrations in {migrations_dir()} end at schema revision {reached or 'none (no revision)'}, "
            f"but this server needs {SCHEMA_REVISION}: SESSIONLOG_MIGRATIONS_DIR, if set, names another "
            "version's migrations/"
        )


def check_at_head(url: str) -> None:
    """Refuse (ValueError, naming the command that fixes it) a database whose schema is not the
    one this code was written for. Served anyway (`serve --no-migrate` on a database never or
    not yet migrated), every call failed with STORAGE_UNAVAILABLE ("no such table"), which
    clients retry as if it would pass. A SQLite file that does not exist is not created.
    Migrations are turned off by a flag or by the environment, and this layer does not know
    which: the message names both (it named only the flag, which an operator who had set
    SESSIONLOG_MIGRATE=false never gave)."""
    absent = missing(url)
    current = None if absent else _current_revision(url)
    check_known(url, alembic_config(url), current)
    if current != SCHEMA_REVISION:
        found = "does not exist" if absent else f"is at schema revision {current or 'none (never migrated)'}"
        # The URL as the operator wrote it, not as it was rewritten for the driver.
        raise ValueError(
            f"the database {shown_url(url)} {found}; this server needs schema revision {SCHEMA_REVISION}: "
            "run `sessionlog db upgrade` with the same --db, or serve with migrations "
            "on (without --no-migrate, and SESSIONLOG_MIGRATE unset or true)"
        )


def check_known(url: str, config: Config, current: str | None) -> None:
    """Refuse (ValueError, naming the database) a schema revision `current` that this version's
    chain does not hold: a newer version migrated the database (a rolling upgrade rolled back,
    an old instance restarted after a new one started). Alembic said only "Can't locate
    revision", and `check_at_head` sent the operator to `sessionlog db upgrade`, which fails
    the same way. Nothing is done to the database."""
    script = ScriptDirectory.from_config(config)
    if current is None or current in {step.revision for step in script.walk_revisions()}:
        return
    if not _holds_sessions(url):
        raise ValueError(
            f"the database {shown_url(url)} is not a sessionlog database: another application's "
            f"migrations are at revision {current} there, and it has no sessions table; give sessionlog a "
            "database of its own"
        )
    raise ValueError(
        f"the database {shown_url(url)} is at schema revision {current}, newer than this version's "
        f"({script.get_current_head()}): a newer sessionlog migrated it; serve it with that version or a later one"
    )


def _holds_sessions(url: str) -> bool:
    """Whether the database has sessionlog's `sessions` table, as every revision made it: one
    whose Alembic revision this version does not know is then a newer sessionlog's, else
    another application's (it said "a newer sessionlog migrated it" of those too)."""
    with connection(url) as conn:
        return inspect(conn).has_table("sessions")


def _current_revision(url: str) -> str | None:
    """The database's schema revision (None: never migrated)."""
    with connection(url) as conn:
        return MigrationContext.configure(conn).get_current_revision()


#: PostgreSQL advisory lock key of migrations (any fixed 64-bit number; "sessionlog" in ASCII).
PG_MIGRATION_LOCK = 0x73657373696F6E6C


@contextmanager
def migration_lock(url: str) -> Iterator[None]:
    """Hold the database's migration lock: a PostgreSQL advisory lock, or, for a SQLite file, an
    exclusive `flock` on a `.migrate-lock` file beside it (in-memory SQLite needs none)."""
    parsed = make_url(normalise_url(url))
    if parsed.get_backend_name() == "postgresql":
        with connection(url) as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": PG_MIGRATION_LOCK})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": PG_MIGRATION_LOCK})
                conn.commit()
        return
    database = sqlite_file(url)
    if database is None:
        yield
        return
    lock_path = database.with_name(database.name + ".migrate-lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
