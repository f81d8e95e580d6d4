"""Subscription delivery latency: same instance, and across instances sharing one database.

A writer appends one small event every `interval` seconds to a session; one subscriber follows
it on the same server and one on a second server process over the same database (PostgreSQL:
how users scale past one machine; SQLite: what `serve --workers` processes do). The latency of
an event is from the moment its append was acknowledged to the moment the subscriber has it;
other instances learn of appends through the change feed (LISTEN/NOTIFY on PostgreSQL,
`data_version` on SQLite), not through the subscribers' safety-net poll of the log.

`python -m bench.delivery [--events 200] [--backends sqlite,postgresql]`.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from bench.procs import Server, each_backend, section_main, unavailable_row
from bench.stats import percentile
from sessionlog.client import SessionLogClient, Subscription
from sessionlog.requests import CaughtUp


def _follow(client: SessionLogClient, sid: str, arrived: dict[int, float], ready: threading.Event) -> Subscription:
    """Follow `sid` on a thread of its own, noting when each event arrives; `ready` is set once
    the subscription has caught up. The caller ends it with the returned subscription's
    `cancel()` before the servers stop: a subscription left open resubscribes, and once the
    servers are gone its thread died of UNAVAILABLE in the middle of the bench's output."""
    subscription = client.subscribe(sid)

    def run() -> None:
        for item in subscription:
            if isinstance(item, CaughtUp):
                ready.set()
            else:
                arrived[item.seq] = time.monotonic()

    threading.Thread(target=run, daemon=True, name=f"follow-{sid}").start()
    return subscription


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"p50_ms": float("nan"), "p99_ms": float("nan")}
    return {
        "p50_ms": round(1000 * percentile(ordered, 50), 2),
        "p99_ms": round(1000 * percentile(ordered, 99), 2),
        "max_ms": round(1000 * ordered[-1], 2),
    }


def measure(db: str, events: int, interval: float) -> dict[str, Any]:
    env = {"SESSIONLOG_METRICS_LISTEN": ""}  # one process each: procs.Server pins it
    with Server(db, env=env) as first, Server(db, env=_sharing(db, env)) as second:
        sid = f"delivery-{int(time.time() * 1000)}"
        with (
            SessionLogClient(first.target) as writer,
            SessionLogClient(first.target) as near,
            SessionLogClient(second.target) as far,
        ):
            writer.create_session(sid)
            same: dict[int, float] = {}
            other: dict[int, float] = {}
            readies = [threading.Event(), threading.Event()]
            subscriptions = [_follow(near, sid, same, readies[0]), _follow(far, sid, other, readies[1])]
            for ready in readies:
                ready.wait(30)
            lease = writer.acquire_lease(sid)
            acked: dict[int, float] = {}
            for n in range(events):
                result = writer.append(sid, lease, [{"type": "bench/tick", "data": {"n": n}, "ignorable": True}])
                acked[result.seqs[0]] = time.monotonic()
                time.sleep(interval)
            deadline = time.monotonic() + 10
            while (len(same) < events or len(other) < events) and time.monotonic() < deadline:
                time.sleep(0.05)
            for subscription in subscriptions:
                subscription.cancel()
    return {"events": events, "same_instance": _figures(acked, same), "other_instance": _figures(acked, other)}


def _figures(acked: dict[int, float], arrived: dict[int, float]) -> dict[str, Any]:
    """Latency from acknowledgement to arrival for every acknowledged event that arrived."""
    latencies = [arrived[seq] - at for seq, at in acked.items() if seq in arrived]
    return {**_percentiles(latencies), "received": len(latencies)}


def _sharing(db: str, env: dict[str, str]) -> dict[str, str]:
    """The second server's environment: no migrations; on SQLite it is a `serve --workers 2`
    service on the same file (an embedded file is shared only that way), so it watches
    `data_version`."""
    out = {**env, "SESSIONLOG_MIGRATE": "false"}
    if db.startswith("sqlite"):
        out["SESSIONLOG_WORKERS"] = "2"
    return out


def run_all(backends: list[str], events: int, interval: float) -> dict[str, Any]:
    return each_backend(backends, "delivery", lambda db: measure(db, events, interval))


def render(results: dict[str, Any]) -> str:
    lines = ["| backend | subscriber | p50 ms | p99 ms | max ms | received |", "|---|---|---:|---:|---:|---:|"]
    for backend, r in results.items():
        if "unavailable" in r:
            lines.append(unavailable_row(backend, 6))
            continue
        for key, label in (("same_instance", "same instance"), ("other_instance", "other instance")):
            f = r[key]
            lines.append(
                f"| {backend} | {label} | {f['p50_ms']} | {f['p99_ms']} | {f.get('max_ms')} "
                f"| {f['received']} of {r['events']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--events", type=int, default=200)
        parser.add_argument("--interval", type=float, default=0.02, help="seconds between appends")

    def run(args: argparse.Namespace, backends: list[str]) -> dict[str, Any]:
        return run_all(backends, args.events, args.interval)

    return section_main(argv, "python -m bench.delivery", __doc__ or "", options, run, render)


if __name__ == "__main__":
    sys.exit(main())
