"""The four measured conditions of `bench/lifecycle.py`, each against real `sessionlog serve`
child processes on loopback (so "cold" means a fresh interpreter, and start-up is a real one).

Every server runs with `SESSIONLOG_LOG_LEVEL=info`, because the service logs one line per RPC
with its handler latency (`latency_ms`, from `transport/status.py`): that is the server-side
time of a call (fold, projection, JSON encoding), as opposed to the end-to-end time the client
sees (plus protobuf, the transfer of the JSON bytes, and the client's JSON parse).

Every loop is bounded by a repeat count; every wait by a timeout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import Engine, create_engine, text

from bench.lifecycle_data import Cuts, Loaded
from bench.procs import ROOT, Server, free_port
from bench.workload import user_message
from sessionlog.client import SessionLogClient
from sessionlog.core import jsonvalue
from sessionlog.requests import scope
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.storage.factory import normalise_url

INFO = {"SESSIONLOG_LOG_LEVEL": "info"}
RESUME_WRITER = "lifebench-resumer"
RPC_TIMEOUT = 900.0
START_TIMEOUT = 300.0


# --- small helpers ---------------------------------------------------------------------------


def ms(seconds: float) -> float:
    """Seconds as milliseconds, rounded for the report."""
    return round(seconds * 1000, 3)


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and count of timings already in milliseconds."""
    if not values:
        return {"n": 0, "median_ms": None, "min_ms": None, "max_ms": None}
    return {
        "n": len(values),
        "median_ms": round(statistics.median(values), 3),
        "min_ms": round(min(values), 3),
        "max_ms": round(max(values), 3),
    }


def server_log(stderr: str) -> list[dict[str, Any]]:
    """The JSON log lines of a server's stderr (anything else is skipped)."""
    lines = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return lines


def rpc_latencies(stderr: str, method: str, session_id: str | None = None) -> list[float]:
    """Server-side handler latencies (ms) of every successful `method` call (of `session_id`,
    when given), in call order."""
    return [
        float(line["latency_ms"])
        for line in server_log(stderr)
        if line.get("event") == "rpc"
        and line.get("method") == method
        and line.get("status") == "OK"
        and (session_id is None or line.get("session_id") == session_id)
    ]


def db_engine(url: str) -> Engine:
    """An engine for the bench's own checks (reads and the start-up reset); never timed."""
    return create_engine(normalise_url(url))


def history_request(session_id: str) -> pb.GetModelHistoryRequest:
    """The GetModelHistory request at the head of the log."""
    return pb.GetModelHistoryRequest(scope=scope(session_id, None, False))


def raw_history(client: SessionLogClient, session_id: str) -> tuple[bytes, float]:
    """One GetModelHistory RPC: the JSON bytes and the seconds it took (no client parse)."""
    start = time.perf_counter()
    response = client.stub.GetModelHistory(history_request(session_id), timeout=RPC_TIMEOUT)
    return bytes(response.messages_json), time.perf_counter() - start


def parse_seconds(body: bytes) -> tuple[int, float]:
    """Parse a history as the client does (`jsonvalue.loads`); (messages, seconds)."""
    start = time.perf_counter()
    messages = jsonvalue.loads(body, what="messages")
    return len(messages), time.perf_counter() - start


Running = tuple[Server, SessionLogClient]


@contextmanager
def info_server(db: str, shared: Running | None = None) -> Iterator[Running]:
    """A fresh `sessionlog serve` (info logs) and a client with long timeouts; or, with
    `shared` (the --quick scale only), that already running server, left running."""
    if shared is not None:
        yield shared
        return
    with Server(db, env=INFO) as server, SessionLogClient(server.target, timeout=RPC_TIMEOUT) as client:
        yield server, client


# --- 1. fork ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ForkSource:
    """A prepared session to fork, and where to cut it."""

    label: str
    session_id: str
    events: int
    cuts: Cuts


def fork_condition(db: str, sources: Sequence[ForkSource], repeats: int) -> dict[str, Any]:
    """Fork each source at its end, in the middle between turns, in the middle inside an open
    turn, and fork a fork (at the child's head and inside its inherited prefix).

    Forks of different sources are interleaved, so drift in machine load hits both alike. For
    every child the bench reads back the rows it stores (the session row plus its own events)
    and checks that reads of the child around the cut see the inherited event at the cut and
    the child's `session/end-seed` right after it.
    """
    engine = db_engine(db)
    kinds = ("end", "closed_mid", "open_mid", "fork_of_fork_head", "fork_of_fork_mid")
    times: dict[tuple[str, str], list[float]] = {(s.label, k): [] for s in sources for k in kinds}
    children: dict[tuple[str, str], list[tuple[str, int]]] = {key: [] for key in times}
    order: list[tuple[str, str]] = []
    before = _count_events(engine)
    with info_server(db) as (server, client):
        for source in sources:  # warm-up (not measured): code paths and the channel
            client.fork(source.session_id, source.cuts.end, f"warm-{source.label}")
        for rep in range(repeats):
            for source in sources:
                cut_of = {
                    "end": source.cuts.end,
                    "closed_mid": source.cuts.closed_mid,
                    "open_mid": source.cuts.open_mid,
                }
                for kind, at in cut_of.items():
                    child = f"fork-{source.label}-{kind}-{rep}"
                    start = time.perf_counter()
                    client.fork(source.session_id, at, child)
                    times[(source.label, kind)].append(ms(time.perf_counter() - start))
                    children[(source.label, kind)].append((child, at))
                    order.append((source.label, kind))
                parent = f"fork-{source.label}-end-{rep}"
                head = source.cuts.end + 1  # the child's own session/end-seed
                for kind, at in (("fork_of_fork_head", head), ("fork_of_fork_mid", source.cuts.closed_mid)):
                    child = f"fork-{source.label}-{kind}-{rep}"
                    start = time.perf_counter()
                    client.fork(parent, at, child)
                    times[(source.label, kind)].append(ms(time.perf_counter() - start))
                    children[(source.label, kind)].append((child, at))
                    order.append((source.label, kind))
        server_ms = rpc_latencies(server.stderr(), "ForkSession")[len(sources) :]
        reads = {key: [_fork_reads_ok(client, child, at) for child, at in kids] for key, kids in children.items()}
    after = _count_events(engine)
    per_server: dict[tuple[str, str], list[float]] = {key: [] for key in times}
    for key, value in zip(order, server_ms, strict=False):
        per_server[key].append(value)
    out: dict[str, Any] = {}
    for source in sources:
        entry: dict[str, Any] = {"source_events": source.events}
        for kind in kinds:
            key = (source.label, kind)
            stored = [_child_storage(engine, child) for child, _ in children[key]]
            entry[kind] = {
                "at_seq": children[key][0][1],
                "rpc": summary(times[key]),
                "server": summary(per_server[key]),
                "child_event_rows": stored[0]["rows"],
                "child_payload_bytes": stored[0]["payload_bytes"],
                "child_rows_constant": len({s["rows"] for s in stored}) == 1,
                "session_rows": 1,
                "reads_ok": all(reads[key]),
            }
        out[source.label] = entry
    forks = len(order) + len(sources)
    out["events_rows_added"] = after - before
    out["forks_made"] = forks
    engine.dispose()
    return out


def _count_events(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM events")).scalar_one())


def _child_storage(engine: Engine, child: str) -> dict[str, int]:
    """Rows and JSON payload bytes a child stores under its own id."""
    size = "length(CAST(data AS BLOB))" if engine.dialect.name == "sqlite" else "octet_length(CAST(data AS TEXT))"
    query = text(f"SELECT count(*), coalesce(sum({size}), 0) FROM events WHERE session_id = :sid")
    with engine.connect() as conn:
        rows, payload = conn.execute(query, {"sid": child}).one()
    return {"rows": int(rows), "payload_bytes": int(payload)}


def _fork_reads_ok(client: SessionLogClient, child: str, at: int) -> bool:
    """Reads of the child see contiguous seqs around the cut, its end-seed right after it."""
    try:
        events = list(client.read_events(child, from_seq=max(0, at - 1), to_seq=at + 1))
    except Exception:  # a wrong read is a finding, reported as reads_ok false
        return False
    seqs = [e.seq for e in events]
    return seqs == list(range(max(0, at - 1), at + 2)) and events[-1].type == "session/end-seed"


# --- 2. start-up ------------------------------------------------------------------------------


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
    port = free_port()
    target = f"127.0.0.1:{port}"
    env = {**os.environ, **INFO}
    cmd = [sys.executable, "-m", "sessionlog", "serve", "--db", db, "--listen", target]
    with tempfile.TemporaryFile() as err:
        wall0, start = time.time(), time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            ready = _wait_serving(proc, port, target, start + START_TIMEOUT) - start
            _wait_logged(err, "start-up repair done", proc, start + START_TIMEOUT)  # repair runs after SERVING
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        err.seek(0)
        lines = server_log(err.read().decode(errors="replace"))
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


def _wait_logged(err: Any, event: str, proc: subprocess.Popen[bytes], deadline: float) -> None:
    """Wait until the server's log (being written to `err`) has a line with `event`."""
    while time.perf_counter() < deadline:
        err.seek(0)
        if event.encode() in err.read():
            return
        if proc.poll() is not None:
            return
        time.sleep(0.01)


def _wait_serving(proc: subprocess.Popen[bytes], port: int, target: str, deadline: float) -> float:
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited during start-up (code {proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.005)
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.perf_counter() < deadline:
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1.0, wait_for_ready=True)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return time.perf_counter()
            except grpc.RpcError:
                pass
            time.sleep(0.005)
    raise TimeoutError("server did not start in time")


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
        before = _count_events(engine)
        loaded.append(timed_start(data.url))
        checks.append(verify_repairs(engine, data.opened, before))
    nothing_open = [timed_start(data.url) for _ in range(repeats)]
    after_clean = _count_events(engine)
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
    from sessionlog_server.storage.recorder import SESSIONS

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


# --- 3. resume --------------------------------------------------------------------------------


def resume_condition(
    db: str, session_id: str, events: int, cold_runs: int, warm_runs: int, shared: Running | None = None
) -> dict[str, Any]:
    """`resume` plus the first `model_history`, in fresh server processes (cold) and again in
    the same process (warm).

    Between two resumes one user message is appended under the resumed lease (the harness
    wrote something, then stopped), so every resume really appends its `session/end-seed`.
    With `shared` (--quick) there is one cold run, in a running server that has not touched
    this session yet.
    """
    cold: list[dict[str, float]] = []
    warm: list[dict[str, float]] = []
    end_seeds: list[bool] = []
    body = b""
    cold_runs = 1 if shared is not None else cold_runs
    for run in range(cold_runs):
        with info_server(db, shared) as (server, client):
            client.get_session(session_id)  # connect the channel; does not fold the log
            cold.append(_resume_once(client, session_id, end_seeds))
            if run == cold_runs - 1:
                for _ in range(warm_runs):
                    warm.append(_resume_once(client, session_id, end_seeds))
                body, _ = raw_history(client, session_id)
            stderr = server.stderr()
        server_resume = rpc_latencies(stderr, "ResumeSession", session_id)
        server_history = rpc_latencies(stderr, "GetModelHistory", session_id)
        cold[-1]["server_resume_ms"] = server_resume[0]
        cold[-1]["server_history_ms"] = server_history[0]
        if run == cold_runs - 1:
            for index, entry in enumerate(warm):
                entry["server_resume_ms"] = server_resume[index + 1]
                entry["server_history_ms"] = server_history[index + 1]
    messages, parse_s = parse_seconds(body)
    return {
        "events": events,
        "history_bytes": len(body),
        "messages": messages,
        "client_parse_ms": ms(parse_s),
        "every_resume_appended_end_seed": all(end_seeds),
        "cold": _resume_summary(cold),
        "warm": _resume_summary(warm),
    }


def _resume_once(client: SessionLogClient, session_id: str, end_seeds: list[bool]) -> dict[str, float]:
    before = client.get_session(session_id).next_seq
    start = time.perf_counter()
    info = client.resume(session_id, writer_id=RESUME_WRITER)
    resumed = time.perf_counter()
    body, _ = raw_history(client, session_id)
    done = time.perf_counter()
    end_seeds.append(info.end_seed_seq == before and info.next_seq == before + 1)
    client.append(session_id, info.lease, [user_message(f"resumed at {before}")])
    return {
        "resume_ms": ms(resumed - start),
        "history_ms": ms(done - resumed),
        "total_ms": ms(done - start),
        "bytes": float(len(body)),
    }


def _resume_summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    return {
        key: summary([r[key] for r in runs])
        for key in ("resume_ms", "history_ms", "total_ms", "server_resume_ms", "server_history_ms")
    }


# --- 4. model history -------------------------------------------------------------------------


def history_condition(
    db: str,
    session_id: str,
    events: int,
    cold_runs: int,
    after_runs: int,
    parse_runs: int = 3,
    shared: Running | None = None,
) -> dict[str, Any]:
    """Model history cold (first call in a fresh server process), after one more append
    (a user message; median of `after_runs`), and warm (no append in between).

    Reports the RPC time (JSON bytes received, not parsed), the server's handler time from its
    log, the client's parse time (`jsonvalue.loads`, measured on `parse_runs` bodies), and the
    bytes. End to end, as `SessionLogClient.model_history` does it, is RPC + parse. With
    `shared` (--quick) there is one cold run, in a running server that has not touched this
    session yet.
    """
    cold_rpc: list[float] = []
    cold_server: list[float] = []
    after_rpc: list[float] = []
    warm_rpc: list[float] = []
    parses: list[float] = []
    grew_by_one = True
    sizes: list[int] = []
    stderr = ""
    count = 0
    cold_runs = 1 if shared is not None else cold_runs
    for run in range(cold_runs):
        with info_server(db, shared) as (server, client):
            client.get_session(session_id)  # connect the channel; does not fold the log
            body, seconds = raw_history(client, session_id)
            cold_rpc.append(ms(seconds))
            sizes.append(len(body))
            if run == cold_runs - 1:
                count, parse_s = parse_seconds(body)
                parses.append(ms(parse_s))
                with client.writer(session_id) as writer:
                    for index in range(after_runs):
                        marker = f"one more question {index}-{time.time_ns()}"
                        writer.append([user_message(marker)]).result(timeout=RPC_TIMEOUT)
                        body, seconds = raw_history(client, session_id)
                        after_rpc.append(ms(seconds))
                        grew_by_one = grew_by_one and marker.encode() in body[-400:]
                        if index < parse_runs:
                            now_count, parse_s = parse_seconds(body)
                            parses.append(ms(parse_s))
                            grew_by_one = grew_by_one and now_count == count + index + 1
                for _ in range(3):
                    body, seconds = raw_history(client, session_id)
                    warm_rpc.append(ms(seconds))
                incremental = _incremental(client, session_id, after_runs)
                stderr = server.stderr()
            else:
                cold_server.append(rpc_latencies(server.stderr(), "GetModelHistory", session_id)[0])
    server_all = rpc_latencies(stderr, "GetModelHistory", session_id)
    cold_server.append(server_all[0])
    after_server = server_all[1 : 1 + after_runs]
    warm_server = server_all[1 + after_runs : 4 + after_runs]
    incremental["server"] = summary(server_all[5 + after_runs :])
    parse_ms = statistics.median(parses)
    return {
        "events": events,
        "messages": count,
        "bytes": sizes[-1],
        "bytes_after": len(body),
        "cold": {"rpc": summary(cold_rpc), "server": summary(cold_server), "e2e_median_ms": _plus(cold_rpc, parse_ms)},
        "after_append": {
            "rpc": summary(after_rpc),
            "server": summary(after_server),
            "e2e_median_ms": _plus(after_rpc, parse_ms),
            "history_grew_by_the_appended_message": grew_by_one,
        },
        "warm": {"rpc": summary(warm_rpc), "server": summary(warm_server)},
        "client_parse": summary(parses),
        "incremental_after_append": incremental,
    }


def _incremental(client: SessionLogClient, session_id: str, runs: int) -> dict[str, Any]:
    """After one more append, the reader's copy brought up to date with only the new message
    (`SessionLogClient.refresh_history`: GetModelHistory from_index/if_generation).

    One full refresh fills the copy first (not counted); each timed refresh is end to end
    (RPC and parse of the tail), and must leave the copy equal in length to the history plus
    the appended message.
    """
    copy = client.history_copy(session_id)
    client.refresh_history(copy)
    times: list[float] = []
    ok = True
    with client.writer(session_id) as writer:
        for index in range(runs):
            marker = f"incremental {index}-{time.time_ns()}"
            before = len(copy.messages)
            writer.append([user_message(marker)]).result(timeout=RPC_TIMEOUT)
            start = time.perf_counter()
            messages = client.refresh_history(copy)
            times.append(ms(time.perf_counter() - start))
            ok = ok and len(messages) == before + 1 and messages[-1]["content"] == marker
    return {"e2e": summary(times), "copy_grew_by_the_appended_message": ok}


def _plus(values: list[float], extra: float) -> float:
    return round(statistics.median(values) + extra, 3)


# --- where the time goes (in-process, no server) -------------------------------------------


def history_breakdown(db: str, session_id: str) -> dict[str, Any]:
    """The pieces of the server's work for one history, timed one by one in this process with
    the server's own code: read the log (recorder), fold it (trusted replay, as a cold load
    does), project (`model_history`), encode (`jsonvalue.dumps_bytes`), then one more event
    applied to the fold and the projection + encoding again; and the client's parse.
    """
    from sessionlog.core.fold import SessionFold
    from sessionlog_server.storage.factory import open_recorder

    recorder = open_recorder(db)
    try:
        start = time.perf_counter()
        record = recorder.get_session(session_id)
        events = recorder.read_events(session_id, 0, None, record.next_seq + 1)
        read_s = time.perf_counter() - start
    finally:
        recorder.close()
    start = time.perf_counter()
    fold = SessionFold.replay(events, validate=False)
    replay_s = time.perf_counter() - start
    timings = _project_and_encode(fold.model_history, 3)
    last = events[-1]
    extra = _append_one(fold, last.seq + 1, last.time)
    after = _project_and_encode(fold.model_history, 3)
    body = jsonvalue.dumps_bytes(fold.model_history())
    _, parse_s = parse_seconds(body)
    cached = _cached_encoding(fold.model_history(), body)
    return {
        "events": len(events),
        "read_log_ms": ms(read_s),
        "trusted_replay_ms": ms(replay_s),
        "model_history_ms": timings["project_ms"],
        "dumps_bytes_ms": timings["encode_ms"],
        "after_append": {"apply_ms": extra, **after},
        "bytes": len(body),
        "client_loads_ms": ms(parse_s),
        "suggested_cached_encoding": cached,
    }


def _cached_encoding(history: list[Any], body: bytes, runs: int = 5) -> dict[str, Any]:
    """What a history read would cost if each message were encoded once, when it was folded,
    and a read only joined the cached bytes (a proposal, measured here; not the server's code).

    Checks that the joined bytes equal the server's encoding of the whole list.
    """
    start = time.perf_counter()
    parts = [jsonvalue.dumps_bytes(message) for message in history]
    build_s = time.perf_counter() - start
    join_s = []
    joined = b""
    for _ in range(runs):
        start = time.perf_counter()
        joined = b"[" + b",".join(parts) + b"]"
        join_s.append(time.perf_counter() - start)
    return {
        "encode_each_message_once_ms": ms(build_s),
        "join_per_read_ms": ms(statistics.median(join_s)),
        "same_bytes": joined == body,
    }


def _project_and_encode(project: Callable[[], list[Any]], runs: int) -> dict[str, float]:
    project_s, encode_s = [], []
    for _ in range(runs):
        start = time.perf_counter()
        history = project()
        mid = time.perf_counter()
        jsonvalue.dumps_bytes(history)
        project_s.append(mid - start)
        encode_s.append(time.perf_counter() - mid)
    return {"project_ms": ms(statistics.median(project_s)), "encode_ms": ms(statistics.median(encode_s))}


def _append_one(fold: Any, seq: int, at: int) -> float:
    from sessionlog.core.events import NewEvent

    event = NewEvent.from_json(user_message("one more question")).committed(seq, at)
    start = time.perf_counter()
    fold.apply(event)
    return ms(time.perf_counter() - start)


# --- profile (py-spy on the server process) ------------------------------------------------------


def profile_history(db: str, session_id: str, out_dir: Path, rounds: int, max_seconds: float) -> dict[str, Any]:
    """py-spy on a fresh server: one profile of the cold first call, one of appends each
    followed by a history read (at most `rounds` of them and `max_seconds`)."""
    exe = _py_spy_path()
    if exe is None:
        return {"error": "py-spy is not installed (pip install py-spy)"}
    out: dict[str, Any] = {}
    with info_server(db) as (server, client):
        client.get_session(session_id)
        with _py_spy(exe, server.pid, out_dir / "cold.txt") as cold_file:
            raw_history(client, session_id)
        out["cold"] = summarise_profile(cold_file)
        with client.writer(session_id) as writer, _py_spy(exe, server.pid, out_dir / "after.txt") as after_file:
            deadline = time.monotonic() + max_seconds
            done = 0
            while done < rounds and time.monotonic() < deadline:
                writer.append([user_message(f"profiled {done}")]).result(timeout=RPC_TIMEOUT)
                raw_history(client, session_id)
                done += 1
        out["after_append"] = {"rounds": done, **summarise_profile(after_file)}
    out["files"] = [str(out_dir / "cold.txt"), str(out_dir / "after.txt")]
    return out


def _py_spy_path() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


@contextmanager
def _py_spy(exe: str, pid: int, path: Path) -> Iterator[Path]:
    """Sample `pid` (all threads, no native frames) while the block runs; SIGINT ends it."""
    cmd = [exe, "record", "-p", str(pid), "-r", "250", "-f", "raw", "-o", str(path), "--nonblocking"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # let py-spy attach before the work starts
    try:
        yield path
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


#: Where a sample's innermost frame is, by file (first match wins): the profile's buckets.
BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JSON encode (jsonvalue.dumps*, json.encoder)", ("json/encoder.py", "jsonvalue.py:dumps")),
    ("JSON decode (jsonvalue.loads, json.decoder)", ("json/decoder.py", "jsonvalue.py:loads", "jsonvalue.py:_has")),
    ("SQL driver and SQLAlchemy rows", ("sqlalchemy/", "sqlite3", "psycopg/")),
    ("stored row -> Event (recorder)", ("storage/recorder.py", "storage/blobs.py", "__create_fn__")),
    ("fold (SessionFold.replay and parts)", ("sessionlog/core/",)),
    ("gRPC/asyncio C code (protobuf, send)", ("asyncio/events.py:Handle._run",)),
    ("event loop wait", ("selectors.py", "base_events.py:BaseEventLoop._run_once")),
)
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _label(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match.group("file")
    for marker in ("site-packages/", "/server/", "/client/", "/lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{match.group('func')}"


def summarise_profile(path: Path, top: int = 12) -> dict[str, Any]:
    """A py-spy raw profile as buckets (by innermost frame), the top functions by self time,
    and the project's own functions by inclusive time (`file:function`, % of samples)."""
    self_counts: Counter[str] = Counter()
    project: Counter[str] = Counter()
    buckets: Counter[str] = Counter()
    total = 0
    text_in = path.read_text(errors="replace") if path.exists() else ""
    for line in text_in.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_label(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        leaf = frames[-1]
        self_counts[leaf] += count
        buckets[next((name for name, keys in BUCKETS if any(k in leaf for k in keys)), "other")] += count
        for frame in set(frames):
            if frame.startswith(("sessionlog/", "sessionlog_server/")) and "cli/" not in frame:
                project[frame] += count

    def ranked(counter: Counter[str], limit: int) -> list[dict[str, Any]]:
        return [
            {"function": name, "samples": n, "pct": round(100 * n / max(total, 1), 1)}
            for name, n in counter.most_common(limit)
        ]

    return {
        "samples": total,
        "buckets": ranked(buckets, len(BUCKETS) + 1),
        "self": ranked(self_counts, top),
        "project_inclusive": ranked(project, top),
    }
