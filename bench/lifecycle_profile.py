"""Where the time of a model history read goes: the server's steps timed one by one in this
process (`history_breakdown`), and py-spy on a server process (`profile_history`, `--profile`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import profiling
from bench.lifecycle_common import (
    RPC_TIMEOUT,
    info_server,
    ms,
    parse_seconds,
    raw_history,
)
from bench.workload import user_message
from sessionlog.core import jsonvalue


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


def profile_history(db: str, session_id: str, out_dir: Path, rounds: int, max_seconds: float) -> dict[str, Any]:
    """py-spy on a fresh server: one profile of the cold first call, one of appends each
    followed by a history read (at most `rounds` of them and `max_seconds`)."""
    if profiling.py_spy_path() is None:
        return {"error": "py-spy is not installed (pip install py-spy)"}
    out: dict[str, Any] = {}
    with info_server(db) as (server, client):
        client.get_session(session_id)
        with profiling.recording(server.pid, out_dir / "cold.txt") as cold_file:
            raw_history(client, session_id)
        out["cold"] = profiling.summarise(cold_file, top=12, buckets=BUCKETS)
        with client.writer(session_id) as writer, profiling.recording(server.pid, out_dir / "after.txt") as after:
            deadline = time.monotonic() + max_seconds
            done = 0
            while done < rounds and time.monotonic() < deadline:
                writer.append([user_message(f"profiled {done}")]).result(timeout=RPC_TIMEOUT)
                raw_history(client, session_id)
                done += 1
        out["after_append"] = {"rounds": done, **profiling.summarise(after, top=12, buckets=BUCKETS)}
    out["files"] = [str(out_dir / "cold.txt"), str(out_dir / "after.txt")]
    return out


#: Where a sample's innermost frame is, by file (first match wins): the profile's buckets.
BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JSON encode (jsonvalue.dumps*, json.encoder)", ("json/encoder.py", "jsonvalue.py:dumps")),
    ("JSON decode (jsonvalue.loads, json.decoder)", ("json/decoder.py", "jsonvalue.py:loads", "jsonvalue.py:_has")),
    ("SQL driver and SQLAlchemy rows", ("sqlalchemy/", "sqlite3", "psycopg/")),
    ("stored row -> Event (recorder)", ("storage/recorder.py", "storage/rows.py", "storage/blobs.py", "__create_fn__")),
    ("fold (SessionFold.replay and parts)", ("sessionlog/core/",)),
    ("gRPC/asyncio C code (protobuf, send)", ("asyncio/events.py:Handle._run",)),
    ("event loop wait", ("selectors.py", "base_events.py:BaseEventLoop._run_once")),
)
