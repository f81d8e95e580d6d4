"""The peers, in the bench process, on the same events with the same durability.

Every peer appends one session's events in order and commits after each event (or after
each 16 events for the `*_x16` raw-driver limits, which write 16 times as many events so that
every raw driver makes the same number of commits: `PeerEvents`), on a fresh SQLite file (WAL,
`synchronous=FULL`, checked with `PRAGMA synchronous` on the peer's own connection) or a
fresh PostgreSQL database (`synchronous_commit=on`). Each event is serialised with
`json.dumps` inside the timed loop, as the sessionlog client serialises inside its own.

A peer that cannot be imported is reported as unavailable with the reason; nothing is faked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from bench.procs import settle_writes
from bench.stats import latency_ms

Events = list[dict[str, Any]]
PeerFn = Callable[[Events, float], dict[str, Any]]
T = TypeVar("T")
Row = tuple[str, int, str, str]
"""(session_id, seq, type, json) of one event."""

PER_COMMIT_BULK = 16
"""Events per commit of the `*_x16` raw drivers."""


@dataclass(frozen=True)
class PeerEvents:
    """What the peers write: `per_event` for those that commit after every event, `bulk`
    (PER_COMMIT_BULK times as many) for the raw drivers at PER_COMMIT_BULK events per commit.

    Every raw driver so makes the same number of commits. With the same 1,000 events, raw
    sqlite3 at 16 per commit made 63 commits in ~40 ms, which measured its start more than its
    pace: 23,000-29,000 events/s in three tries, against 30,800-31,400 over 1,250 commits.
    """

    per_event: Events
    bulk: Events


def _dumps(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def _result(events: int, seconds: float, **extra: Any) -> dict[str, Any]:
    return {
        "events": events,
        "seconds": round(seconds, 3),
        "events_per_s": round(events / max(seconds, 1e-9), 1),
        **extra,
    }


def _timed(items: Iterable[T], write: Callable[[T], int], max_seconds: float) -> tuple[int, float]:
    """`write` each item in order (it returns how many events it committed) until all are
    written or `max_seconds` have passed: (events written, seconds)."""
    start = time.monotonic()
    done = 0
    for item in items:
        done += write(item)
        if time.monotonic() - start > max_seconds:
            break
    return done, time.monotonic() - start


def _rows(events: Events, per_commit: int) -> Iterator[list[Row]]:
    """One session's `(session_id, seq, type, json)` rows, `per_commit` at a time."""
    sid = uuid.uuid4().hex
    for first in range(0, len(events), per_commit):
        yield [(sid, first + i, e["type"], _dumps(e)) for i, e in enumerate(events[first : first + per_commit])]


def _sqlite_sync(conn: sqlite3.Connection) -> str:
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[conn.execute("PRAGMA synchronous").fetchone()[0]]
    return f"journal_mode={mode}, synchronous={sync}"


# --- raw sqlite3 -----------------------------------------------------------------------------


@contextlib.contextmanager
def _sqlite_commits(path: Path) -> Iterator[tuple[Callable[[list[Row]], int], str]]:
    """A fresh SQLite file (WAL, synchronous=FULL) with an events table: a function committing
    rows in one transaction, and the durability the connection reports."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, "
        "data TEXT NOT NULL, PRIMARY KEY (session_id, seq))"
    )

    def commit(rows: list[Row]) -> int:
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
        return len(rows)

    try:
        yield commit, _sqlite_sync(conn)
    finally:
        conn.close()


def raw_sqlite(path: Path, per_commit: int) -> PeerFn:
    """sqlite3 from the standard library: the floor of what any SQLite-backed log can cost."""

    def run(events: Events, max_seconds: float) -> dict[str, Any]:
        with _sqlite_commits(path) as (commit, durability):
            done, wall = _timed(_rows(events, per_commit), commit, max_seconds)
        return _result(done, wall, durability=durability, per_commit=per_commit)

    return run


# --- raw psycopg 3 ---------------------------------------------------------------------------


@contextlib.contextmanager
def _psycopg_commits(url: str, table: str) -> Iterator[tuple[Callable[[list[Row]], int], str]]:
    """A new table on one psycopg connection: a function committing rows in one transaction,
    and the durability the server reports."""
    with psycopg.connect(url) as conn:
        conn.execute(
            f"CREATE TABLE {table} (session_id text NOT NULL, seq bigint NOT NULL, type text NOT NULL, "
            "data jsonb NOT NULL, PRIMARY KEY (session_id, seq))"
        )
        conn.commit()
        durability = "synchronous_commit=" + str(conn.execute("SHOW synchronous_commit").fetchone()[0])  # type: ignore[index]
        with conn.cursor() as cur:

            def commit(rows: list[Row]) -> int:
                cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", rows)
                conn.commit()
                return len(rows)

            yield commit, durability


def raw_psycopg(url: str, per_commit: int, tag: str = "") -> PeerFn:
    """psycopg 3 on one connection: the floor of a PostgreSQL-backed log."""

    def run(events: Events, max_seconds: float) -> dict[str, Any]:
        with _psycopg_commits(url, f"raw_events_{per_commit}{tag}") as (commit, durability):
            done, wall = _timed(_rows(events, per_commit), commit, max_seconds)
        return _result(done, wall, durability=durability, per_commit=per_commit)

    return run


def commit_latency(backend: str, where: str, events: Events, rate: float, seconds: float) -> dict[str, Any]:
    """The raw driver's own latency at sessionlog's latency figure's load: one event per
    commit, commit i due at start + i/`rate` (open loop), for `seconds`, on a fresh SQLite
    file (`where` a path) or a new table in PostgreSQL (`where` a URL). What an acknowledgement
    that waits for its own durable commit can do at best on this machine.

    Each commit counts from its due time, as sessionlog's figure counts from the moment its
    client hands the event over on schedule: a commit that stalls delays every commit due
    during the stall. Counted from the moment each commit began, a 234 ms stall of the disk
    showed as one slow commit, and the raw driver's p99 stayed at 1.0 ms while sessionlog's,
    in the same run, counted every event that waited out the stall."""
    table = f"raw_latency_{uuid.uuid4().hex[:8]}"
    settle_writes(backend)  # as sessionlog's figure starts (`figures.fixed_rate`)
    opened = _sqlite_commits(Path(where)) if backend == "sqlite" else _psycopg_commits(where, table)
    count = min(len(events), int(rate * seconds))
    taken: list[float] = []
    with opened as (commit, durability):
        start = time.monotonic()
        for i, rows in enumerate(_rows(events[:count], 1)):
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            commit(rows)
            taken.append(time.monotonic() - due)
    return {"offered_per_s": rate, "commits": len(taken), "durability": durability, **latency_ms(taken)}


# --- eventsourcing ---------------------------------------------------------------------------


def _one_by_one(recorder: Any) -> Callable[[Any], int]:
    """Insert one stored event per call (a commit each) into an eventsourcing recorder."""

    def insert(stored: Any) -> int:
        recorder.insert_events([stored])
        return 1

    return insert


def _stored_events(events: Events) -> Any:
    from eventsourcing.persistence import StoredEvent

    originator = uuid.uuid4()
    for version, event in enumerate(events, start=1):
        yield StoredEvent(
            originator_id=originator, originator_version=version, topic=event["type"], state=_dumps(event).encode()
        )


def eventsourcing_sqlite(path: Path) -> PeerFn:
    """eventsourcing's SQLiteApplicationRecorder (what its Application uses on SQLite)."""

    def run(events: Events, max_seconds: float) -> dict[str, Any]:
        from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

        datastore = SQLiteDatastore(str(path))
        recorder = SQLiteApplicationRecorder(datastore)
        recorder.create_table()
        with datastore.get_connection(commit=False) as conn:
            durability = _sqlite_sync(conn._sqlite_conn)
        done, wall = _timed(_stored_events(events), _one_by_one(recorder), max_seconds)
        datastore.close()
        return _result(done, wall, durability=durability)

    return run


def eventsourcing_postgres(url: str, tag: str = "") -> PeerFn:
    """eventsourcing's PostgresApplicationRecorder (its notification log takes a table lock)."""

    def run(events: Events, max_seconds: float) -> dict[str, Any]:
        from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        datastore = PostgresDatastore(
            dbname=parsed.database or "",
            host=parsed.host or "127.0.0.1",
            port=parsed.port or 5432,
            user=parsed.username or "postgres",
            password=parsed.password or "",
        )
        recorder = PostgresApplicationRecorder(datastore, events_table_name=f"stored_events{tag}")
        recorder.create_table()
        done, wall = _timed(_stored_events(events), _one_by_one(recorder), max_seconds)
        datastore.close()
        return _result(done, wall, durability="synchronous_commit=on (server default)")

    return run


# --- OpenAI Agents SDK -------------------------------------------------------------------------


def openai_sqlite_session(path: Path) -> PeerFn:
    """agents.SQLiteSession: `await add_items([item])` per event (it commits per call)."""

    def run(events: Events, max_seconds: float) -> dict[str, Any]:
        from agents import SQLiteSession

        async def go() -> tuple[int, float, str]:
            session = SQLiteSession(uuid.uuid4().hex, str(path))
            with sqlite3.connect(path) as probe:
                probe.execute("PRAGMA journal_mode=WAL")
                durability = _sqlite_sync(probe) + " (default; not set by the SDK)"
            start = time.monotonic()
            done = 0
            for event in events:
                await session.add_items([event])  # type: ignore[list-item]
                done += 1
                if time.monotonic() - start > max_seconds:
                    break
            wall = time.monotonic() - start
            session.close()
            return done, wall, durability

        done, wall, durability = asyncio.run(go())
        return _result(done, wall, durability=durability)

    return run


# --- LangGraph -------------------------------------------------------------------------------


def langgraph_sqlite_saver(path: Path) -> PeerFn:
    """langgraph SqliteSaver: one checkpoint per event, whose `messages` channel holds every
    event so far (what a graph with a messages list stores after each step). Its cost per
    event grows with the session, so it runs under the same time cap and reports how far
    it got."""

    def run(events: Events, max_seconds: float) -> dict[str, Any]:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.base.id import uuid6
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(path, check_same_thread=False)
        conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(conn)
        saver.setup()
        durability = _sqlite_sync(conn)
        config: dict[str, Any] = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
        messages: list[dict[str, Any]] = []
        checkpoint = empty_checkpoint()

        def put(step: int) -> int:
            nonlocal checkpoint, config
            messages.append(events[step])
            checkpoint = {
                **checkpoint,
                "id": str(uuid6(clock_seq=step)),
                "channel_values": {"messages": list(messages)},
                "channel_versions": {"messages": step + 1},
            }
            config = saver.put(config, checkpoint, {"source": "loop", "step": step}, {"messages": step + 1})  # type: ignore[arg-type, typeddict-item, assignment]
            return 1

        done, wall = _timed(range(len(events)), put, max_seconds)
        conn.close()
        return _result(done, wall, durability=durability, stopped_early=done < len(events))

    return run


# --- registry -------------------------------------------------------------------------------


PEERS: dict[str, tuple[str, str]] = {
    "sqlite3_x1": ("sqlite", "raw sqlite3, 1 event/commit"),
    "sqlite3_x16": ("sqlite", "raw sqlite3, 16 events/commit"),
    "eventsourcing_sqlite": ("sqlite", "eventsourcing SQLiteApplicationRecorder"),
    "openai_agents_sqlite_session": ("sqlite", "OpenAI Agents SDK SQLiteSession"),
    "langgraph_sqlite_saver": ("sqlite", "LangGraph SqliteSaver (checkpoint/event)"),
    "psycopg_x1": ("postgresql", "raw psycopg 3, 1 event/commit"),
    "psycopg_x16": ("postgresql", "raw psycopg 3, 16 events/commit"),
    "eventsourcing_postgres": ("postgresql", "eventsourcing PostgresApplicationRecorder"),
}


def run_peer_round(
    backend: str,
    events: PeerEvents,
    workdir: Path,
    pg_url: str,
    round_no: int,
    max_seconds: float,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """One run of every peer of `backend`, each on a fresh file / fresh tables."""
    tag = f"_r{round_no}"
    one, bulk = events.per_event, events.bulk
    makers: dict[str, tuple[Callable[[], PeerFn], Events]] = {
        "sqlite3_x1": (lambda: raw_sqlite(workdir / f"raw1{tag}.db", 1), one),
        "sqlite3_x16": (lambda: raw_sqlite(workdir / f"raw16{tag}.db", PER_COMMIT_BULK), bulk),
        "eventsourcing_sqlite": (lambda: eventsourcing_sqlite(workdir / f"es{tag}.db"), one),
        "openai_agents_sqlite_session": (lambda: openai_sqlite_session(workdir / f"openai{tag}.db"), one),
        "langgraph_sqlite_saver": (lambda: langgraph_sqlite_saver(workdir / f"langgraph{tag}.db"), one),
        "psycopg_x1": (lambda: raw_psycopg(pg_url, 1, tag), one),
        "psycopg_x16": (lambda: raw_psycopg(pg_url, PER_COMMIT_BULK, tag), bulk),
        "eventsourcing_postgres": (lambda: eventsourcing_postgres(pg_url, tag), one),
    }
    out: dict[str, Any] = {}
    for name, (peer_backend, label) in PEERS.items():
        if peer_backend != backend:
            continue
        log(f"peer {name} (round {round_no + 1})")
        make, written = makers[name]
        try:
            result = make()(written, max_seconds)
        except ImportError as exc:
            result = {"unavailable": f"not installed ({exc}); pip install -e '.[bench]'"}
        out[name] = {"label": label, "backend": backend, **result}
    return out


def unavailable(backend: str, reason: str) -> dict[str, Any]:
    """Every peer of `backend`, marked unavailable with `reason`."""
    return {
        name: {"label": label, "backend": peer_backend, "unavailable": reason}
        for name, (peer_backend, label) in PEERS.items()
        if peer_backend == backend
    }
