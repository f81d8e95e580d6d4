"""Lifecycle condition 2, start-up: time to SERVING and to repair done, O(open sessions), and
a check that exactly the open turns were repaired as docs/repair.md says."""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from bench.lifecycle_common import (
    INFO,
    START_TIMEOUT,
    count_events,
    db_engine,
    ms,
    server_log,
    summary,
)
from bench.lifecycle_data import Loaded
from bench.procs import Server
from sessionlog.core import jsonvalue


@dataclass(frozen=True, slots=True)
class StartupData:
    """The start-up database: how many sessions, which ones were left with an open turn."""

    url: str
    closed: int
    opened: list[Loaded]
    events: int


def timed_start(db: str) -> dict[str, Any]:
    """Start `sessionlog serve`, measure process start -> SERVING, stop it; phases from its log.

    Readiness is polled every 5 ms: a TCP connect, then the standard health check. The
    server's own log (info) gives the phases: the first `lease acquired` line is where repair
    began (after imports, migrations and the open-turn query), `serving` is where it ended.
    """
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(db, env=INFO, log_path=Path(tmp) / "server.log")
        wall0, start = time.time(), time.perf_counter()
        try:
            server.start(timeout=START_TIMEOUT)
            ready = time.perf_counter() - start
            _wait_logged(server, "start-up repair done", start + START_TIMEOUT)  # repair runs after SERVING
        finally:
            server.stop(timeout=120)
        lines = server_log(server.stderr())
    stamps = {}
    for line in lines:
        name = line.get("event")
        if name in ("lease acquired", "start-up repair done", "serving") and name not in stamps:
            stamps[name] = _epoch(line["timestamp"]) - wall0
    repaired = sum(1 for line in lines if line.get("event") == "repaired abandoned turn")
    serving = stamps.get("serving")
    repaired_at = stamps.get("start-up repair done")
    return {
        "ready_ms": ms(ready),
        "boot_ms": ms(serving) if serving is not None else None,
        "repair_ms": ms(repaired_at - serving) if repaired_at is not None and serving is not None else 0.0,
        "repaired_sessions_logged": repaired,
    }


def _wait_logged(server: Server, event: str, deadline: float) -> None:
    """Wait until the server's log has a line with `event` (or the server has exited)."""
    while time.perf_counter() < deadline and server.proc is not None and server.proc.poll() is None:
        if event in server.stderr():
            return
        time.sleep(0.01)


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def startup_condition(data: StartupData, empty_url: str, repeats: int) -> dict[str, Any]:
    """Start-up on an empty database, then with the closed sessions and the open turns (reset
    to open before each start, and checked after it), then once more with nothing left open."""
    engine = db_engine(data.url)
    query = repair_query(data.url)
    empty = [timed_start(empty_url) for _ in range(repeats)]
    loaded, checks = [], []
    for rep in range(repeats):
        if rep:
            _reopen(engine, data.opened)
        before = count_events(engine)
        loaded.append(timed_start(data.url))
        checks.append(verify_repairs(engine, data.opened, before))
    nothing_open = [timed_start(data.url) for _ in range(repeats)]
    after_clean = count_events(engine)
    engine.dispose()
    return {
        "closed_sessions": data.closed,
        "open_turns": len(data.opened),
        "events": data.events,
        "empty": _startup_summary(empty),
        "loaded": _startup_summary(loaded),
        "loaded_nothing_open": _startup_summary(nothing_open),
        "repair_query": query,
        "verification": {
            "runs": checks,
            "all_ok": all(c["ok"] for c in checks),
            "events_unchanged_when_nothing_open": after_clean == data.events + 3 * len(data.opened),
        },
    }


def repair_query(url: str, runs: int = 5) -> dict[str, Any]:
    """The start-up query (`recorder.sessions_to_repair`, timed in this process while the turns
    are open) and its plan: does it use `ix_sessions_open_turn`, or read every session row?

    The plan is of the same SQLAlchemy expression the recorder builds, compiled for the
    database with literal values.
    """
    from sqlalchemy import or_, select

    from sessionlog_server.storage.factory import open_recorder
    from sessionlog_server.storage.queries import SESSIONS

    recorder = open_recorder(url)
    times, found = [], 0
    try:
        for _ in range(runs):
            start = time.perf_counter()
            found = len(recorder.sessions_to_repair(int(time.time() * 1000)))
            times.append(ms(time.perf_counter() - start))
    finally:
        recorder.close()
    query = select(SESSIONS).where(
        SESSIONS.c.open_turn.is_(True), or_(SESSIONS.c.writer_id.is_(None), SESSIONS.c.lease_expires_at <= 0)
    )
    engine = db_engine(url)
    sql = str(query.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    explain = "EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN "
    with engine.connect() as conn:
        plan = [" ".join(str(c) for c in row) for row in conn.exec_driver_sql(explain + sql)]
    engine.dispose()
    return {
        "found": found,
        "time": summary(times),
        "plan": plan,
        "uses_open_turn_index": any("ix_sessions_open_turn" in line for line in plan),
    }


def _startup_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "ready": summary([r["ready_ms"] for r in runs]),
        "boot_median_ms": _median([r["boot_ms"] for r in runs]),
        "repair_median_ms": _median([r["repair_ms"] for r in runs]),
        "repaired_sessions_logged": [r["repaired_sessions_logged"] for r in runs],
    }


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def verify_repairs(engine: Engine, opened: list[Loaded], events_before: int) -> dict[str, Any]:
    """Exactly the open turns were repaired, exactly as SPEC §8 says, and nothing else changed.

    Each open session (17 events: system, a closed tool turn, then turn 2 open after its
    `tool/call` at seq 16) must now end with an error `tool/result` for `call_2`
    (TOOL_OUTCOME_UNKNOWN, citing seq 16), `step/end` of step 1 and `turn/end` interrupted,
    all at the last event's time; `open_turn` is false and the service's lease released.
    """
    ids = [s.session_id for s in opened]
    expected_last = {s.session_id: s.last_time for s in opened}
    base = opened[0].events if opened else 0
    problems: list[str] = []
    with engine.connect() as conn:
        still_open = int(conn.execute(text("SELECT count(*) FROM sessions WHERE open_turn")).scalar_one())
        added = int(conn.execute(text("SELECT count(*) FROM events")).scalar_one()) - events_before
        rows = conn.execute(
            text(
                "SELECT session_id, seq, time, type, data, source_event_seqs, surface_op FROM events "
                f"WHERE seq >= {base} AND session_id IN ({', '.join(f':s{i}' for i in range(len(ids)))}) "
                "ORDER BY session_id, seq"
            ),
            {f"s{i}": sid for i, sid in enumerate(ids)},
        ).all()
        states = conn.execute(
            text(
                "SELECT id, next_seq, open_turn, writer_id FROM sessions "
                f"WHERE id IN ({', '.join(f':s{i}' for i in range(len(ids)))})"
            ),
            {f"s{i}": sid for i, sid in enumerate(ids)},
        ).all()
    by_session: dict[str, list[Any]] = {sid: [] for sid in ids}
    for row in rows:
        by_session[row[0]].append(row)
    for sid, events in by_session.items():
        problem = _repair_problem(events, base, expected_last[sid])
        if problem:
            problems.append(f"{sid}: {problem}")
    for sid, next_seq, open_turn, writer in states:
        if next_seq != base + 3 or open_turn or writer is not None:
            problems.append(f"{sid}: next_seq={next_seq} open_turn={open_turn} writer={writer}")
    repaired = len(ids) - len({p.split(":", 1)[0] for p in problems})
    return {
        "ok": not problems and still_open == 0 and added == 3 * len(ids),
        "sessions_still_open": still_open,
        "repaired_sessions": repaired,
        "events_added": added,
        "problems": problems[:5],
    }


def _json(value: Any) -> Any:
    return jsonvalue.loads(value) if isinstance(value, str) else value


def _repair_problem(events: list[Any], base: int, last_time: int) -> str | None:
    kinds = [e[3] for e in events]
    if kinds != ["tool/result", "step/end", "turn/end"] or [e[1] for e in events] != [base, base + 1, base + 2]:
        return f"repair events are {kinds}"
    result, step_end, turn_end = (_json(e[4]) for e in events)
    message = result.get("message", {})
    checks = {
        "tool/result is an error for call_2": message.get("isError") is True and message.get("toolCallId") == "call_2",
        "code TOOL_OUTCOME_UNKNOWN": result.get("error", {}).get("code") == "TOOL_OUTCOME_UNKNOWN",
        "cites the tool/call": _json(events[0][5]) == [base - 1],
        "tool/result appended to the surface": events[0][6] == "append",
        "step/end of step 1": step_end == {"turn": 2, "step": 1},
        "turn/end interrupted": turn_end == {"turn": 2, "reason": {"kind": "interrupted"}},
        "at the last event's time": all(e[2] == last_time for e in events),
    }
    failed = [name for name, ok in checks.items() if not ok]
    return ", ".join(failed) or None


def _reopen(engine: Engine, opened: list[Loaded]) -> None:
    """Undo the repair: drop the three repair events, mark the turn open, no writer."""
    if not opened:
        return
    base = opened[0].events
    params = {f"s{i}": s.session_id for i, s in enumerate(opened)}
    ids = ", ".join(f":s{i}" for i in range(len(opened)))
    with engine.begin() as conn:
        conn.execute(text(f"DELETE FROM events WHERE seq >= {base} AND session_id IN ({ids})"), params)
        conn.execute(
            text(
                f"UPDATE sessions SET next_seq = {base}, last_time = create_time + {base - 1}, open_turn = :yes, "
                f"writer_id = NULL, lease_expires_at = NULL WHERE id IN ({ids})"
            ),
            {**params, "yes": True},
        )
