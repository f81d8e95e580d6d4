"""After a fold-version bump: what reads at old seqs of a long session cost, the first and again.

Every stored snapshot is ignored once `FOLD_VERSION` changes. The session is written in bulk
with the snapshots the policy would have stored (`bench/lifecycle_data.py`), then each one is
marked as written by the previous fold version, as an upgrade leaves them. One server process
then answers, in this order, the model history at the middle seq (twice), at a quarter, at
three quarters, and at the head; each read is timed, and the snapshots of the current version
stored by the end are counted (a cold fold stores them along the way at the policy's spacing,
so the second read at an old seq starts near it).

`python -m bench.fold_upgrade [--events N] [--backends sqlite,postgresql] [--json P]`
"""

from __future__ import annotations

import argparse
import time
import zlib
from typing import Any

from sqlalchemy import create_engine, text

from bench.lifecycle_common import info_server
from bench.lifecycle_data import BulkLoader
from bench.long_sessions import HALF_KB, session_log
from bench.procs import each_backend, section_main
from sessionlog.core import jsonvalue
from sessionlog.core.snapshot import FOLD_VERSION
from sessionlog_server.config import Settings
from sessionlog_server.service.loader import SnapshotPolicy
from sessionlog_server.storage.factory import normalise_url

SID = "upgraded"


def make_stale(db: str) -> int:
    """Mark every stored snapshot as written by the previous fold version; how many there are."""
    engine = create_engine(normalise_url(db))
    with engine.begin() as conn:
        rows = conn.execute(text("SELECT session_id, seq, state FROM fold_snapshots")).all()
        for session_id, seq, state in rows:
            body = jsonvalue.loads(zlib.decompress(bytes(state)))
            body["v"] = FOLD_VERSION - 1
            conn.execute(
                text("UPDATE fold_snapshots SET fold_version = :v, state = :b WHERE session_id = :s AND seq = :q"),
                {"v": FOLD_VERSION - 1, "b": zlib.compress(jsonvalue.dumps_bytes(body), 1), "s": session_id, "q": seq},
            )
    engine.dispose()
    return len(rows)


def current_snapshots(db: str) -> int:
    """Snapshots of this fold version stored for the session."""
    engine = create_engine(normalise_url(db))
    with engine.connect() as conn:
        query = text("SELECT count(*) FROM fold_snapshots WHERE session_id = :s AND fold_version = :v")
        count = int(conn.execute(query, {"s": SID, "v": FOLD_VERSION}).scalar_one())
    engine.dispose()
    return count


def measure(db: str, events: int) -> dict[str, Any]:
    loader = BulkLoader(db)
    policy = SnapshotPolicy(Settings().snapshot_every_events, Settings().snapshot_every_bytes)
    count = loader.long_session(SID, session_log(events, HALF_KB, True, seed=7), 1_800_000_000_000, snapshots=policy)
    loader.close()
    out: dict[str, Any] = {"events": count.events, "stale_snapshots": make_stale(db), "reads": []}
    last = count.events - 1
    plan = [("middle", last // 2), ("middle again", last // 2), ("quarter", last // 4), ("3/4", 3 * last // 4)]
    with info_server(db, log_level="warning") as (_server, client):
        next(iter(client.list_sessions(page_size=1)), None)  # connected, nothing loaded
        for label, seq in [*plan, ("head", None)]:
            start = time.perf_counter()
            messages = len(client.model_history(SID, at_seq=seq))
            took = time.perf_counter() - start
            out["reads"].append({"read": label, "at_seq": seq, "ms": round(took * 1000, 1), "messages": messages})
    out["current_snapshots"] = current_snapshots(db)
    return out


def render(results: dict[str, Any]) -> str:
    lines = ["| backend | events | stale snapshots | read | at_seq | ms |", "|---|---|---|---|---|---|"]
    for backend, figures in results.items():
        if "reads" not in figures:
            lines.append(f"| {backend} | unavailable | | | | |")
            continue
        for read in figures["reads"]:
            lines.append(
                f"| {backend} | {figures['events']} | {figures['stale_snapshots']} | {read['read']} "
                f"| {read['at_seq']} | {read['ms']} |"
            )
        lines.append(f"| {backend} | snapshots of this fold version afterwards: {figures['current_snapshots']} |||||")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--events", type=int, default=200_000)

    def run(args: argparse.Namespace, backends: list[str]) -> dict[str, Any]:
        return each_backend(backends, "fold_upgrade", lambda db: measure(db, args.events))

    return section_main(argv, "python -m bench.fold_upgrade", __doc__ or "", options, run, render)


if __name__ == "__main__":
    raise SystemExit(main())
