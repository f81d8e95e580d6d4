"""Data for `bench/lifecycle.py`: valid session logs written straight into a migrated database.

Why not through the server: a 1,000,000-event fork source and 100,000 closed sessions would take
many minutes to append, and appending is not what these conditions measure (fork, start-up,
resume and model history are). So the rows are written in bulk, but they are the rows the server
itself would have written:

- every event is built as a `NewEvent`, committed at its seq and time, and turned into a row by
  the recorder's own mapping (`rows.event_params` over `rows.stored_form`, the
  parameters of the server's insert), with an eventId like a client's;
- seqs are contiguous from 0, times never decrease, and each `sessions` row carries the
  matching `next_seq`, `last_time` and `open_turn`;
- an open turn is a real one: `turn/start`, `user/message`, `step/start`, an `assistant/message`
  with a `toolCall` block, and that call's `tool/call` (no result), so repair has work to do;
- before anything is written, samples of every log shape are replayed through the core's
  validating fold (`SessionFold.replay(validate=True)`): the server would accept these events.

SQLite rows go in with `executemany` on one SQLAlchemy connection (synchronous=OFF during the
load, then a WAL checkpoint); PostgreSQL rows go in with `COPY` on the psycopg connection under
SQLAlchemy, then `ANALYZE`. The load is never timed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

from bench.workload import session_events
from sessionlog.core.events import APPEND, Event, NewEvent
from sessionlog.core.fold import SessionFold
from sessionlog.core.snapshot import FOLD_VERSION, encode_snapshot
from sessionlog_server.service.loader import SnapshotPolicy
from sessionlog_server.storage.factory import normalise_url
from sessionlog_server.storage.migrate import upgrade
from sessionlog_server.storage.rows import EVENT_COLUMNS as RECORDER_EVENT_COLUMNS
from sessionlog_server.storage.rows import event_params, stored_form

#: The columns of the server's event insert, in the order `event_params` fills them.
EVENT_COLUMNS = tuple(column.strip() for column in RECORDER_EVENT_COLUMNS.split(","))
SNAPSHOT_COLUMNS = ("session_id", "seq", "fold_version", "state")
DATA_COLUMN = EVENT_COLUMNS.index("data")
SESSION_COLUMNS = ("id", "namespace", "create_time", "cwd", "metadata", "next_seq", "last_time", "epoch", "open_turn")
CHUNK = 20_000
#: The size of each lean turn shape, in events.
SHAPE_SIZES = {"tool": 11, "tool_only": 8, "simple": 6, "context": 1, "open": 5}


# --- lean logs (fork sources, start-up sessions) ------------------------------------------


def lean_plan(n: int) -> list[str]:
    """Turn shapes of a lean log of exactly `n` events (n >= 7) that ends on a turn boundary.

    The log is a system prompt, then 11-event turns (one tool call, a final answer); the last
    few events are made to fit with a 6-event turn, an 8-event turn (tool step only) and at
    most two `request/context` events, so any `n` >= 7 is met exactly with no turn left open.
    """
    if n < 7:
        raise ValueError("a lean log needs at least 7 events")
    plan = ["system"]
    left = n - 1
    while left > 16:
        plan.append("tool")
        left -= 11
    if left >= 12:
        plan.append("simple")
        left -= 6
    base = "tool" if left == 11 else "tool_only" if left >= 8 else "simple"
    plan += ["context"] * (left - SHAPE_SIZES[base])
    plan.append(base)
    return plan


@dataclass(frozen=True, slots=True)
class Cuts:
    """Named seqs of a lean log, where the bench forks it."""

    end: int
    """The last event (a `turn/end`): a fork there has no open turn."""
    closed_mid: int
    """The last seq at or before the middle at which no turn is open."""
    open_mid: int
    """A `tool/call` seq near the middle: a fork there cuts inside an open turn."""


def lean_cuts(plan: list[str]) -> Cuts:
    """Where the middle cuts of a lean log fall (walks the plan, not the events)."""
    n = sum(1 if shape == "system" else SHAPE_SIZES[shape] for shape in plan)
    middle = n // 2
    seq, closed_mid, open_mid = 0, 0, -1
    for shape in plan:
        size = 1 if shape == "system" else SHAPE_SIZES[shape]
        end = seq + size - 1
        if end <= middle:
            closed_mid = end
        if shape in ("tool", "tool_only") and (open_mid < middle):
            open_mid = seq + 4
        seq += size
    return Cuts(end=n - 1, closed_mid=closed_mid, open_mid=open_mid)


def _text(kind: str, turn: int) -> str:
    return f"{kind} {turn}: check the parser and fix the off-by-one in module_{turn % 97}.py"


def lean_turn(shape: str, turn: int) -> list[NewEvent]:
    """The events of one lean turn of `shape` (see SHAPE_SIZES); the soak writes `simple` turns."""
    if shape == "system":
        return [_surface("system/message", {"message": {"role": "system", "content": "You are a careful coder."}})]
    if shape == "context":
        model = "model-a" if turn % 2 else "model-b"
        return [NewEvent(type="request/context", data={"provider": "bench", "model": model})]
    call_id = f"call_{turn}"
    events = [
        NewEvent(type="turn/start", data={"turn": turn}),
        _surface("user/message", {"message": {"role": "user", "content": _text("question", turn)}}),
        NewEvent(type="step/start", data={"turn": turn, "step": 1}),
    ]
    if shape == "simple":
        events += [_assistant(turn, 1, _text("answer", turn), None), _step_end(turn, 1), _turn_end(turn)]
        return events
    events += [
        _assistant(turn, 1, "", call_id),
        NewEvent(
            type="tool/call",
            data={"turn": turn, "step": 1, "callId": call_id, "name": "read_file", "arguments": '{"path":"a.py"}'},
        ),
    ]
    if shape == "open":
        return events
    result = {
        "role": "toolResult",
        "toolCallId": call_id,
        "content": [{"type": "text", "text": _text("file", turn)}],
        "isError": False,
    }
    events += [_surface("tool/result", {"turn": turn, "step": 1, "message": result}), _step_end(turn, 1)]
    if shape == "tool":
        events += [
            NewEvent(type="step/start", data={"turn": turn, "step": 2}),
            _assistant(turn, 2, _text("done", turn), None),
            _step_end(turn, 2),
        ]
    events.append(_turn_end(turn))
    return events


def _surface(kind: str, data: dict[str, Any]) -> NewEvent:
    return NewEvent(type=kind, data=data, surface_op=APPEND)


def _assistant(turn: int, step: int, say: str, call_id: str | None) -> NewEvent:
    content: list[dict[str, Any]] = [{"type": "text", "text": say}] if say else []
    if call_id is not None:
        content.append({"type": "toolCall", "id": call_id, "name": "read_file", "arguments": {"path": "a.py"}})
    usage = {"input": 1200, "output": 80, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1280}
    data = {"turn": turn, "step": step, "message": {"role": "assistant", "content": content}, "usage": usage}
    return _surface("assistant/message", data)


def _step_end(turn: int, step: int) -> NewEvent:
    return NewEvent(type="step/end", data={"turn": turn, "step": step})


def _turn_end(turn: int) -> NewEvent:
    return NewEvent(type="turn/end", data={"turn": turn, "reason": {"kind": "completed"}})


def lean_events(plan: list[str]) -> Iterator[NewEvent]:
    """The events of a lean plan, lazily (a 1,000,000-event log is never held in memory)."""
    turn = 0
    for shape in plan:
        if shape not in ("system", "context"):
            turn += 1
        yield from lean_turn(shape, turn)


def startup_log(open_turn: bool) -> list[NewEvent]:
    """A start-up session: system prompt and one simple closed turn (7 events); with
    `open_turn`, an 11-event turn and then an open turn whose tool call has no result (17)."""
    if not open_turn:
        return list(lean_events(["system", "simple"]))
    return list(lean_events(["system", "tool", "open"]))


def workload_events(n: int, seed: int) -> list[NewEvent]:
    """At least `n` events of `bench.workload` (the issue-6 agent sessions, about 2 KB of data
    per event on average), continued to the end of the turn."""
    return [NewEvent.from_json(e) for e in session_events(n, seed, whole_turns=True)]


def check_shapes(extra: Iterable[list[NewEvent]] = ()) -> int:
    """Replay samples of every log shape through the validating fold; returns events checked.

    Covers each tail of `lean_plan` (n = 7..40), the first 3,000 events of a long lean log,
    both start-up sessions, and any `extra` logs (e.g. a workload sample).
    """
    checked = 0
    logs: list[list[NewEvent]] = [list(lean_events(lean_plan(n))) for n in range(7, 41)]
    logs.append(list(islice(lean_events(lean_plan(1_000_000)), 3000)))
    logs += [startup_log(False), startup_log(True), *extra]
    for log in logs:
        fold = SessionFold.replay(committed(log, 0), validate=True)
        checked += fold.next_seq
    return checked


def committed(events: Iterable[NewEvent], t0: int, first_seq: int = 0) -> Iterator[Event]:
    """Commit proposals at seqs from `first_seq`, one millisecond apart from `t0`, with eventIds."""
    for offset, event in enumerate(events):
        seq = first_seq + offset
        draft = event if event.event_id is not None else replace(event, event_id=f"e{seq}")
        yield draft.committed(seq, t0 + seq)


@dataclass(slots=True)
class Loaded:
    """What was written for one session."""

    session_id: str
    events: int
    last_time: int
    open_turn: bool
    marks: dict[str, int] = field(default_factory=dict)


class BulkLoader:
    """Writes sessions and their events into a migrated database, in chunks (never timed)."""

    def __init__(self, url: str) -> None:
        upgrade(url)
        self.url = url
        self.backend = make_url(normalise_url(url)).get_backend_name()
        self.engine: Engine = create_engine(normalise_url(url))
        self.rows_written = 0

    def close(self) -> None:
        """Make the load durable and tidy (WAL checkpoint / ANALYZE), release connections."""
        with self.engine.connect() as conn:
            if self.backend == "sqlite":
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            else:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
        self.engine.dispose()

    def sessions(
        self, logs: Iterable[tuple[str, list[NewEvent], bool]], t0: int, per_chunk: int = 5000
    ) -> list[Loaded]:
        """Write many small sessions (id, events, open_turn), `per_chunk` sessions at a time:
        their session rows first, then their events."""
        loaded: list[Loaded] = []
        stream = iter(logs)
        while True:
            batch = list(islice(stream, per_chunk))
            if not batch:
                return loaded
            session_rows: list[tuple[Any, ...]] = []
            event_rows: list[tuple[Any, ...]] = []
            for sid, events, open_turn in batch:
                start = t0 + len(loaded)
                last_time = start + len(events) - 1
                event_rows += [_row(sid, e) for e in committed(events, start)]
                session_rows.append(_session_row(sid, start, len(events), last_time, open_turn))
                loaded.append(Loaded(sid, len(events), last_time, open_turn))
            self._insert("sessions", SESSION_COLUMNS, session_rows)
            for chunk in _chunks(event_rows, CHUNK):
                self._insert("events", EVENT_COLUMNS, chunk)

    def long_session(
        self,
        sid: str,
        events: Iterable[NewEvent],
        t0: int,
        *,
        open_turn: bool = False,
        snapshots: SnapshotPolicy | None = None,
    ) -> Loaded:
        """Write one session of any length, streaming its events in chunks; with `snapshots`,
        also the fold snapshots the server's policy would have stored along the way."""
        self._insert("sessions", SESSION_COLUMNS, [_session_row(sid, t0, 0, t0, open_turn)])
        count, last_time = 0, t0
        stream = committed(events, t0)
        taker = _Snapshots(sid, snapshots) if snapshots is not None else None
        while True:
            chunk = list(islice(stream, CHUNK))
            if not chunk:
                break
            rows = [_row(sid, e) for e in chunk]
            self._insert("events", EVENT_COLUMNS, rows)
            if taker is not None:
                self._insert("fold_snapshots", SNAPSHOT_COLUMNS, taker.take(chunk, rows))
            count += len(rows)
            last_time = rows[-1][2]
        with self.engine.begin() as conn:
            conn.execute(
                text("UPDATE sessions SET next_seq = :n, last_time = :t WHERE id = :sid"),
                {"n": count, "t": last_time, "sid": sid},
            )
        return Loaded(sid, count, last_time, open_turn)

    def _insert(self, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        names = ", ".join(columns)
        raw = self.engine.raw_connection()
        try:
            driver: Any = raw.driver_connection
            if self.backend == "sqlite":
                driver.execute("PRAGMA synchronous=OFF")
                driver.execute("PRAGMA journal_mode=WAL")
                marks = ", ".join("?" for _ in columns)
                driver.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)
            else:
                with driver.cursor() as cursor, cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            raw.commit()
        finally:
            raw.close()
        self.rows_written += len(rows)


class _Snapshots:
    """The fold snapshots of one session as the server's `SnapshotPolicy` would have taken them
    while the events were appended (a fold runs alongside the load)."""

    def __init__(self, sid: str, policy: SnapshotPolicy) -> None:
        self.sid = sid
        self.policy = policy
        self.fold = SessionFold(keep_messages=False)
        self.since_events = self.since_bytes = 0

    def take(self, events: list[Event], rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The snapshot rows due within `events` (whose stored rows are `rows`)."""
        out = []
        for event, row in zip(events, rows, strict=True):
            self.fold.extend([event])
            self.since_events += 1
            self.since_bytes += len(row[DATA_COLUMN])
            if self.policy.due(self.since_events, self.since_bytes, self.fold.surface_size):
                out.append((self.sid, event.seq, FOLD_VERSION, encode_snapshot(self.fold.snapshot())))
                self.since_events = self.since_bytes = 0
        return out


def _row(session_id: str, event: Event) -> tuple[Any, ...]:
    """The server's own insert parameters for `event` (in EVENT_COLUMNS order, no blobs), with
    the data as text: the server's insert makes its UTF-8 bytes TEXT in SQL, a bulk load cannot."""
    params = list(event_params(session_id, event, stored_form(event.data, None)))
    params[DATA_COLUMN] = params[DATA_COLUMN].decode("utf-8")
    return tuple(params)


def _session_row(sid: str, create_time: int, next_seq: int, last_time: int, open_turn: bool) -> tuple[Any, ...]:
    return (sid, "default", create_time, None, "{}", next_seq, last_time, 0, open_turn)


def _chunks(rows: list[tuple[Any, ...]], size: int) -> Iterator[list[tuple[Any, ...]]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]
