"""What the lifecycle conditions share: servers with info logs, timing summaries, raw reads.

Every server runs with `SESSIONLOG_LOG_LEVEL=info`, because the service logs one line per RPC
with its handler latency (`latency_ms`, from `transport/status.py`): that is the server-side
time of a call (fold, projection, JSON encoding), as opposed to the end-to-end time the client
sees (plus protobuf, the transfer of the JSON bytes, and the client's JSON parse).

Every loop is bounded by a repeat count; every wait by a timeout.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, text

from bench.procs import Server
from sessionlog.client import SessionLogClient
from sessionlog.core import jsonvalue
from sessionlog.requests import scope
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.storage.factory import normalise_url

INFO = {"SESSIONLOG_LOG_LEVEL": "info"}
RESUME_WRITER = "lifebench-resumer"
RPC_TIMEOUT = 900.0
START_TIMEOUT = 300.0


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
def info_server(db: str, shared: Running | None = None, *, log_level: str = "info") -> Iterator[Running]:
    """A fresh `sessionlog serve` (info logs, unless `log_level` says otherwise) and a client
    with long timeouts, its channel connected; or, with `shared` (the --quick scales only),
    that already running server, left running."""
    if shared is not None:
        yield shared
        return
    env = {"SESSIONLOG_LOG_LEVEL": log_level}
    with Server(db, env=env) as server, SessionLogClient(server.target, timeout=RPC_TIMEOUT) as client:
        yield server, client


def count_events(engine: Engine) -> int:
    """Rows in the events table (every session's)."""
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM events")).scalar_one())
