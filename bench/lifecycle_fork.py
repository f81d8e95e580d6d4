"""Lifecycle condition 1, fork: constant cost whatever the source's length, and what a child stores."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, text

from bench.lifecycle_common import (
    count_events,
    db_engine,
    info_server,
    ms,
    rpc_latencies,
    summary,
)
from bench.lifecycle_data import Cuts
from sessionlog.client import SessionLogClient


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
    before = count_events(engine)
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
    after = count_events(engine)
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
