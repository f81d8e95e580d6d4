"""Group commits on the driver itself: one long-lived connection, no ORM layer per statement.

A group commit runs a handful of fixed statements (the fence, one executemany of events, a
change notice) and a COMMIT. Through SQLAlchemy each group also paid for a pool checkout and
check-in (with a reset ROLLBACK, and on PostgreSQL a pre-ping round trip) and ~40 µs of
execution-context set-up per statement: measured on this machine, 110-150 µs of CPU per commit
on SQLite and ~230 µs on PostgreSQL, as much as the database's own work. `CommitConnection`
holds one pooled connection for the writer thread and runs the group on the DBAPI connection.
Compiled (setup.py), with the group's statements (storage/group_commit.py).

Errors mean the same here as everywhere else in storage (`storage_error`); a connection that
broke is dropped and the next group checks out a fresh one.
"""

from __future__ import annotations

import select
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, TypeVar

from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import PoolProxiedConnection

from sessionlog.core.errors import AlreadyExists, SessionLogError, Unavailable, ValidationError, first_line

T = TypeVar("T")


class Rows(Protocol):
    """What a driver statement returns: its rows, and how many rows it changed."""

    @property
    def rowcount(self) -> int: ...

    def __iter__(self) -> Iterator[Any]: ...


class DriverSQL(Protocol):
    """Runs driver SQL (the driver's own parameter markers): a SQLAlchemy `Connection` or a
    `DriverTransaction`, so the recorder's statements are written once for both."""

    def exec_driver_sql(self, statement: str, parameters: Any = None) -> Any: ...


class DriverTransaction:
    """Driver SQL on a DBAPI connection inside an open transaction: a list of parameter
    tuples is an executemany, one tuple a single execute. Every statement runs on `cursor`
    (psycopg builds a cursor in a dozen Python calls, its adapters' map copied), so the rows or
    rowcount a statement returns are read before the next one runs."""

    def __init__(self, connection: Any, cursor: Any) -> None:
        self._connection = connection
        self._cursor = cursor

    def exec_driver_sql(self, statement: str, parameters: Any = None) -> Rows:
        cursor = self._cursor
        if isinstance(parameters, list):
            cursor.executemany(statement, parameters)
        else:
            cursor.execute(statement, parameters or ())
        return cursor  # type: ignore[no-any-return]

    def rowcounts(self, statement: str, each: Sequence[tuple[Any, ...] | None]) -> list[int]:
        """Run `statement` once per parameter tuple (None: skip it, count 0) and return each
        run's rowcount. A driver that pipelines (psycopg) sends them all before reading the
        first answer: one round trip for the lot, where one execute each would pay one per run."""
        pipeline = getattr(self._connection, "pipeline", None)
        cursors: list[Any] = []
        with pipeline() if pipeline is not None and len(each) > 1 else nullcontext():
            for parameters in each:
                cursor = None
                if parameters is not None:
                    cursor = self._connection.cursor()
                    cursor.execute(statement, parameters)
                cursors.append(cursor)
        return [0 if cursor is None else cursor.rowcount for cursor in cursors]


def storage_error(cause: BaseException, *, conflict: bool, unstorable: bool) -> SessionLogError:
    """What a driver error means to a caller: the one rule for every storage path.

    A conflict with stored data (`conflict`) is ALREADY_EXISTS; a value the database cannot
    hold or compare (`unstorable`: an integer beyond 64 bits, a NUL in a text column, a string
    over its column's length) is the request's fault and a retry can only fail again, so it is
    INVALID_ARGUMENT; anything else is the database being unavailable.
    """
    # The driver's first line says what is wrong; the rest (PostgreSQL's DETAIL and CONTEXT,
    # naming statement parameters) is for the server's log, not for a client's error.
    said = first_line(cause)
    if conflict:
        return AlreadyExists("INTEGRITY_ERROR", f"the write conflicts with stored data: {said}")
    if unstorable:
        return ValidationError("UNSTORABLE_VALUE", f"the database cannot hold a value of this request: {said}")
    return Unavailable("STORAGE_UNAVAILABLE", f"storage error: {said}")


def sqlalchemy_error(exc: BaseException) -> SessionLogError:
    """`storage_error` of an error raised through SQLAlchemy (or an OverflowError binding an
    integer beyond 64 bits)."""
    cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    return storage_error(
        cause,
        conflict=isinstance(exc, sa_exc.IntegrityError),
        unstorable=isinstance(exc, (sa_exc.DataError, OverflowError)),
    )


class StatementLost(Exception):
    """The connection broke while a statement that commits itself was out: whether it committed
    is not known here (`CommitConnection.run_alone`)."""


def _connection_lost(connection: Any) -> bool:
    """Whether the driver's connection is gone (psycopg's `broken` or `closed`): a statement or
    COMMIT that was out when it went has an unknown outcome. sqlite3 has neither: a local
    COMMIT that fails did not commit."""
    return bool(getattr(connection, "broken", False) or getattr(connection, "closed", False))


class CommitConnection:
    """The writer thread's own connection for group commits, checked out once and kept.

    `begin` is the statement that opens each write transaction (SQLite: `BEGIN IMMEDIATE`, so
    the write lock is taken up front; PostgreSQL: `BEGIN`). The driver connection is kept in
    its autocommit mode (`driver_autocommit`: psycopg's, set once at checkout; sqlite3's is set
    by the engine), so `begin` opens each transaction and `run_alone`'s statement is one of its
    own: switching psycopg's mode for each such statement and back cost ten Python calls a
    commit. `turn` is held around each transaction, rollback included (SQLite: this process's
    turn to write the file, storage/writer_turn.py). Used from one thread at a time (the group
    committer's writer thread).
    """

    def __init__(
        self,
        engine: Engine,
        begin: str,
        turn: Callable[[], AbstractContextManager[None]],
        *,
        driver_autocommit: bool = False,
    ) -> None:
        self._engine = engine
        self._begin = begin
        self._turn = turn
        self._driver_autocommit = driver_autocommit
        self._pooled: PoolProxiedConnection | None = None
        self._driver: Any = None
        """`_pooled`'s driver connection (SQLAlchemy's property to it is a Python call a group)."""
        self._cursor: Any = None
        """The cursor every statement of the kept connection runs on (`DriverTransaction`)."""
        dbapi: Any = engine.dialect.loaded_dbapi  # the driver module (PEP 249 error classes)
        self._dbapi = dbapi
        self._broken: tuple[type[BaseException], ...] = (dbapi.OperationalError, dbapi.InterfaceError)
        self._driver_errors: tuple[type[BaseException], ...] = (dbapi.Error, OverflowError)

    def run(self, work: Callable[[DriverTransaction], T]) -> T:
        """`work` in one write transaction: committed when it returns, rolled back if it raises;
        driver errors become sessionlog errors (`storage_error`).

        A kept connection can die while idle (a database restart, a dropped TCP connection);
        SQLAlchemy's pool would have pinged it before lending it out. Here the first statement
        finds out instead, before anything was sent for commit, so the work is run once more on
        a fresh connection: nothing of the failed attempt was written.
        """
        while True:
            reused = self._pooled is not None
            connection = self._connection()
            cursor = self._cursor
            committing = False
            with self._turn():
                try:
                    cursor.execute(self._begin)
                    result = work(DriverTransaction(connection, cursor))
                    committing = True
                    connection.commit()
                    return result
                except BaseException as exc:
                    lost = _connection_lost(connection)
                    dropped = self._rollback(connection, exc)
                    if not (dropped and reused and not committing):
                        if committing and lost and isinstance(exc, self._driver_errors):
                            # The COMMIT was sent and the connection broke: the database may
                            # have made it durable before the answer was lost.
                            raise Unavailable(
                                "COMMIT_OUTCOME_UNKNOWN",
                                f"the connection broke during the commit: {first_line(exc)}; retry with event ids",
                            ) from exc
                        if isinstance(exc, self._driver_errors):
                            raise self._storage_error(exc) from exc
                        raise
            # The connection had died while idle: try once on a new one (no `continue` in the
            # `with`: the compiled build does not implement it inside a try/finally).

    def run_alone(self, statement: str, parameters: Any) -> list[Any] | None:
        """`statement` as a transaction of its own (the driver's autocommit: `driver_autocommit`
        must be set), and its rows.

        One round trip, where `run`'s BEGIN, statement and COMMIT take three on psycopg (raw
        psycopg on loopback, one 2 KB insert per commit: 0.74-1.0 ms and 190-230 µs of CPU
        against 1.6-2.0 ms and 530-590 µs). The statement must be all of the transaction.

        None when nothing was sent: the kept connection has something to read while idle, most
        likely the server closing it (a restart), so the caller takes `run`'s way, which
        replaces a connection that died while idle and tries again. A statement the database
        refuses wrote nothing: its `storage_error` is raised. A connection that breaks while the
        statement is out leaves its outcome unknown here, as a COMMIT that breaks does: the
        connection is dropped and `StatementLost` raised, for the caller to find out.
        """
        connection = self._connection()
        if _has_input(connection):
            return None
        cursor = self._cursor
        with self._turn():
            try:
                cursor.execute(statement, parameters)
                return list(cursor)
            except self._driver_errors as exc:
                if _connection_lost(connection):
                    self._drop()
                    raise StatementLost(str(exc)) from exc
                raise self._storage_error(exc) from exc

    def close(self) -> None:
        """Give the connection back to its pool, in the driver's own mode again."""
        if self._pooled is not None:
            pooled, driver = self._pooled, self._driver
            self._pooled = self._driver = self._cursor = None
            if self._driver_autocommit:
                try:
                    driver.autocommit = False
                except self._driver_errors:  # broken: the pool must not lend it out again
                    pooled.invalidate()
                    return
            pooled.close()

    def _connection(self) -> Any:
        """The kept driver connection, checked out of the pool first if there is none. A
        connection the database refuses (restarting, failing over, at `max_connections`) is
        `storage_error`'s STORAGE_UNAVAILABLE: nothing was sent. The pool raises the driver's
        own error here, not SQLAlchemy's wrapper, which reached the committer unmapped (an
        error with a traceback per group, and COMMIT_OUTCOME_UNKNOWN for batches never sent)."""
        if self._pooled is None:
            try:
                pooled = self._engine.raw_connection()
            except sa_exc.DBAPIError as exc:
                raise sqlalchemy_error(exc) from exc
            except self._driver_errors as exc:
                raise self._storage_error(exc) from exc
            driver: Any = pooled.driver_connection
            try:  # set up for `run` and `run_alone` (see the class); one that cannot be is dropped
                if self._driver_autocommit:
                    driver.autocommit = True
                cursor = driver.cursor()
            except self._driver_errors as exc:
                pooled.invalidate()
                raise self._storage_error(exc) from exc
            self._pooled, self._driver, self._cursor = pooled, driver, cursor
        return self._driver

    def _rollback(self, connection: Any, cause: BaseException) -> bool:
        """Roll back; a connection that broke (or cannot roll back) is dropped for a new one.
        True when it was dropped."""
        broken = isinstance(cause, self._broken)
        try:
            connection.rollback()
        except self._driver_errors:
            broken = True
        if not broken or self._pooled is None:
            return False
        self._drop()
        return True

    def _storage_error(self, exc: BaseException) -> SessionLogError:
        """`storage_error` of a driver error, classed by this driver's PEP 249 error classes."""
        return storage_error(
            exc,
            conflict=isinstance(exc, self._dbapi.IntegrityError),
            unstorable=isinstance(exc, (self._dbapi.DataError, OverflowError)),
        )

    def _drop(self) -> None:
        """Invalidate the kept connection; the next use checks out a fresh one."""
        if self._pooled is not None:
            pooled = self._pooled
            self._pooled = self._driver = self._cursor = None
            pooled.invalidate()


def _has_input(connection: Any) -> bool:
    """Whether an idle connection's socket has something to read (the server closed it, or sent
    a notice): a poll that does not wait."""
    fileno = getattr(connection, "fileno", None)
    if fileno is None:
        return False
    poller = select.poll()  # not select.select: it refuses descriptors past 1,023
    poller.register(fileno(), select.POLLIN)
    return bool(poller.poll(0))


__all__ = [
    "CommitConnection",
    "DriverSQL",
    "DriverTransaction",
    "Rows",
    "StatementLost",
    "sqlalchemy_error",
    "storage_error",
]
