"""Run the Alembic migration chain in migrations/ (the `db upgrade` command and `serve`)."""

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
from sqlalchemy import Connection, create_engine, make_url, text
from sqlalchemy.pool import NullPool

from sessionlog_server.storage.factory import normalise_url, shown_url, sqlite_file

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


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` to `revision` (creating the SQLite file if needed).

    Runs under a lock held for the whole upgrade, so several `serve` or `db upgrade` processes
    started together on a fresh database migrate one after the other (the later ones find it
    at head) instead of racing to create the same tables.
    """
    config = alembic_config(url)
    with migration_lock(url):
        current = None if _missing(url) else _current_revision(url)
        check_known(url, config, current)
        command.upgrade(config, revision)


def prepare(url: str, migrate: bool) -> None:
    """Before serving: make sure the database takes writes (`check_writable`), then bring it to
    head, or, told not to migrate, make sure it is there already (`check_at_head`)."""
    check_writable(url)
    if migrate:
        upgrade(url)
    else:
        check_at_head(url)


def check_writable(url: str) -> None:
    """Refuse (ValueError, naming the database) a PostgreSQL database that takes no writes: a
    standby (a replica's address given by mistake) or one whose transactions are read-only
    (`default_transaction_read_only` on the database or the role). Served anyway, reads worked,
    the health check said SERVING and every write failed with STORAGE_UNAVAILABLE, which
    clients retry as if it would pass."""
    parsed = make_url(normalise_url(url))
    if parsed.get_backend_name() != "postgresql":
        return
    with _connection(url) as conn:
        standby, read_only = conn.execute(
            text("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
        ).one()
    if standby or read_only == "on":
        why = "a standby in recovery" if standby else "its transactions are read-only: default_transaction_read_only"
        raise ValueError(
            f"the database {shown_url(url)} is read-only ({why}); sessionlog writes to it: "
            "point --db (SESSIONLOG_DB) at the primary"
        )


def check_at_head(url: str) -> None:
    """Refuse (ValueError, naming the command that fixes it) a database whose schema is not the
    one this code was written for. Served anyway (`serve --no-migrate` on a database never or
    not yet migrated), every call failed with STORAGE_UNAVAILABLE ("no such table"), which
    clients retry as if it would pass. A SQLite file that does not exist is not created.
    Migrations are turned off by a flag or by the environment, and this layer does not know
    which: the message names both (it named only the flag, which an operator who had set
    SESSIONLOG_MIGRATE=false never gave)."""
    config = alembic_config(url)
    head = ScriptDirectory.from_config(config).get_current_head()
    missing = _missing(url)
    current = None if missing else _current_revision(url)
    check_known(url, config, current)
    if current != head:
        found = "does not exist" if missing else f"is at schema revision {current or 'none (never migrated)'}"
        # The URL as the operator wrote it, not as it was rewritten for the driver.
        raise ValueError(
            f"the database {shown_url(url)} {found}; this server needs "
            f"schema revision {head}: run `sessionlog db upgrade` with the same --db, or serve with migrations "
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
    raise ValueError(
        f"the database {shown_url(url)} is at schema revision {current}, newer than this version's "
        f"({script.get_current_head()}): a newer sessionlog migrated it; serve it with that version or a later one"
    )


def _missing(url: str) -> bool:
    """Whether `url` names a SQLite file that does not exist (and must not be created here)."""
    file = sqlite_file(url)
    return file is not None and not file.exists()


def _current_revision(url: str) -> str | None:
    """The database's schema revision (None: never migrated)."""
    with _connection(url) as conn:
        return MigrationContext.configure(conn).get_current_revision()


@contextmanager
def _connection(url: str) -> Iterator[Connection]:
    """One connection to `url`, for a check before serving or the migration lock: its engine,
    pooling nothing, is disposed of once the connection is done."""
    engine = create_engine(make_url(normalise_url(url)), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


#: PostgreSQL advisory lock key of migrations (any fixed 64-bit number; "sessionlog" in ASCII).
PG_MIGRATION_LOCK = 0x73657373696F6E6C


@contextmanager
def migration_lock(url: str) -> Iterator[None]:
    """Hold the database's migration lock: a PostgreSQL advisory lock, or, for a SQLite file, an
    exclusive `flock` on a `.migrate-lock` file beside it (in-memory SQLite needs none)."""
    parsed = make_url(normalise_url(url))
    if parsed.get_backend_name() == "postgresql":
        with _connection(url) as conn:
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
