"""`python -m bench.lifecycle`: fork, start-up repair, resume and model history, one command.

The lifecycle figures of issues 3 and 4, measured through real `sessionlog serve` processes on
loopback, on SQLite and/or PostgreSQL:

1. fork of a 10-event and a 1,000,000-event source (at the end, in the middle between turns,
   in the middle inside an open turn, and forks of a fork), with the rows and bytes each child
   stores: a fork must cost the same whatever the prefix length;
2. service start-up with 100,000 closed sessions and 100 open turns: process start to SERVING,
   and a check that exactly the 100 open turns were repaired, as SPEC §8 says;
3. resume of a 100,000-event session to a ready model history, cold (fresh process) and warm;
4. model history of 1k, 10k and 100k-event sessions: cold and after one more append (median of
   20, full and incremental), server-side and end to end, with the bytes returned.

The data is written straight into migrated databases (see `bench/lifecycle_data.py`: the
server's own row mapping, validated shapes), not appended through the server: only the
conditions above are timed.

    .venv/bin/python -m bench.lifecycle                   # full scale, both databases
    .venv/bin/python -m bench.lifecycle --quick --db sqlite --json out.json
    .venv/bin/python -m bench.lifecycle --profile         # + py-spy of the 100k history

SQLite files live in the temporary directory; PostgreSQL databases are named
`sessionlog_bench_life_<condition>_<pid>_*` (`procs.scratch_database`) and dropped at the end,
even after a failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import lifecycle_data as data
from bench import lifecycle_fork, lifecycle_history, procs
from bench import lifecycle_profile as profile
from bench import lifecycle_startup as startup
from bench.lifecycle_common import INFO, RPC_TIMEOUT
from bench.procs import ROOT, Server
from sessionlog.client import SessionLogClient
from sessionlog_server.storage.migrate import upgrade


@dataclass(frozen=True)
class Scale:
    """How big each condition is (full run vs --quick)."""

    name: str
    fork_small: int
    fork_medium: int
    fork_large: int
    fork_repeats: int
    startup_closed: int
    startup_open: int
    startup_repeats: int
    resume_events: int
    resume_cold: int
    resume_warm: int
    history: tuple[tuple[str, int, str], ...]
    """(label, events, kind): kind `workload` is bench.workload's agent sessions, `lean` short texts."""
    history_cold: int
    history_after: int
    shared_process: bool
    """--quick only: resume and history share one server process (each session's first call is
    still a cold fold of that session, but not in a fresh interpreter)."""


FULL = Scale(
    name="full",
    fork_small=10,
    fork_medium=10_000,
    fork_large=1_000_000,
    fork_repeats=7,
    startup_closed=100_000,
    startup_open=100,
    startup_repeats=3,
    resume_events=100_000,
    resume_cold=3,
    resume_warm=5,
    history=(
        ("1k", 1_000, "workload"),
        ("10k", 10_000, "workload"),
        ("100k", 100_000, "workload"),
        ("100k_lean", 100_000, "lean"),
    ),
    history_cold=3,
    history_after=20,
    shared_process=False,
)
QUICK = Scale(
    name="quick",
    fork_small=10,
    fork_medium=300,
    fork_large=2_000,
    fork_repeats=2,
    startup_closed=300,
    startup_open=5,
    startup_repeats=1,
    resume_events=300,
    resume_cold=1,
    resume_warm=1,
    history=(("1k", 60, "workload"), ("10k", 150, "workload"), ("100k", 300, "workload"), ("100k_lean", 300, "lean")),
    history_cold=1,
    history_after=2,
    shared_process=True,
)

HISTORY_LABELS = ("1k", "10k", "100k", "100k_lean")
FORK_SOURCES = ("small", "medium", "large")
FORK_KINDS = ("end", "closed_mid", "open_mid", "fork_of_fork_head", "fork_of_fork_mid")
#: Every key a report must have for each database (the smoke test checks them all).
FIGURE_KEYS: tuple[str, ...] = (
    *(f"fork.{src}.{kind}.rpc.median_ms" for src in FORK_SOURCES for kind in FORK_KINDS),
    *(f"fork.{src}.{kind}.child_event_rows" for src in FORK_SOURCES for kind in FORK_KINDS),
    *(f"fork.{src}.{kind}.child_payload_bytes" for src in FORK_SOURCES for kind in FORK_KINDS),
    *(f"fork.{src}.{kind}.reads_ok" for src in FORK_SOURCES for kind in FORK_KINDS),
    "fork.events_rows_added",
    "startup.empty.ready.median_ms",
    "startup.loaded.ready.median_ms",
    "startup.loaded.repair_median_ms",
    "startup.loaded_nothing_open.ready.median_ms",
    "startup.verification.all_ok",
    "startup.repair_query.uses_open_turn_index",
    "resume.cold.resume_ms.median_ms",
    "resume.cold.history_ms.median_ms",
    "resume.cold.total_ms.median_ms",
    "resume.cold.server_resume_ms.median_ms",
    "resume.warm.total_ms.median_ms",
    "resume.history_bytes",
    *(
        f"history.{label}.{phase}.{side}.median_ms"
        for label in HISTORY_LABELS
        for phase in ("cold", "after_append")
        for side in ("rpc", "server")
    ),
    *(f"history.{label}.after_append.e2e_median_ms" for label in HISTORY_LABELS),
    *(f"history.{label}.bytes" for label in HISTORY_LABELS),
    *(f"history.{label}.incremental_after_append.e2e.median_ms" for label in HISTORY_LABELS),
    *(f"history.{label}.incremental_after_append.server.median_ms" for label in HISTORY_LABELS),
    *(f"history.{label}.client_parse.median_ms" for label in HISTORY_LABELS),
    "history.breakdown.dumps_bytes_ms",
    "history.breakdown.suggested_cached_encoding.join_per_read_ms",
    "history.breakdown_lean.suggested_cached_encoding.join_per_read_ms",
)


def missing_keys(report: dict[str, Any]) -> list[str]:
    """`backend:key` for every figure key absent from a report's results (none when complete)."""
    missing = []
    for backend, results in report["results"].items():
        for key in FIGURE_KEYS:
            node: Any = results
            for part in key.split("."):
                if not isinstance(node, dict) or part not in node:
                    missing.append(f"{backend}:{key}")
                    break
                node = node[part]
    return missing


def _log(message: str) -> None:
    print(f"[lifecycle {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- databases ---------------------------------------------------------------------------------


# --- one backend ---------------------------------------------------------------------------------


class Databases:
    """The bench's databases of one backend (SQLite files or PostgreSQL databases), each removed
    when the run of that backend ends (`procs.scratch_database`)."""

    def __init__(self, backend: str, stack: contextlib.ExitStack) -> None:
        self.backend = backend
        self._stack = stack

    def new(self, purpose: str) -> str:
        """A fresh, empty database URL for `purpose` (migrated by the loader or by `upgrade`)."""
        return self._stack.enter_context(procs.scratch_database(self.backend, f"life_{purpose}"))


def run_backend(backend: str, scale: Scale, conditions: set[str], profile_dir: Path | None) -> dict[str, Any]:
    """Prepare the data of `backend` and run the chosen conditions on it."""
    results: dict[str, Any] = {"prep": {}}
    t0 = int(time.time() * 1000) - 50_000_000
    with contextlib.ExitStack() as stack:
        dbs = Databases(backend, stack)
        if "fork" in conditions:
            results["fork"] = _timed_prep(results, "fork", lambda: _fork(dbs, scale, t0))
        if "startup" in conditions:
            results["startup"] = _timed_prep(results, "startup", lambda: _startup(dbs, scale, t0))
        if conditions & {"resume", "history"}:
            both = _timed_prep(
                results, "history_and_resume", lambda: _history_and_resume(dbs, scale, conditions, t0, profile_dir)
            )
            results.update(both if "error" not in both else {c: both for c in ("resume", "history") if c in conditions})
    return results


def _timed_prep(results: dict[str, Any], name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one condition (data preparation included), recording its duration and the machine's
    load average before and after (other work on the machine shows up in the timings).

    A condition that fails is reported as `{"error": ...}` (the traceback goes to stderr) and
    the others still run, so one failure does not lose a long run's figures.
    """
    start, load = time.perf_counter(), os.getloadavg()
    try:
        out = fn()
    except Exception as exc:  # report it, keep measuring the other conditions
        traceback.print_exc()
        out = {"error": f"{type(exc).__name__}: {exc}"}
    results["prep"][name + "_and_run_s"] = round(time.perf_counter() - start, 1)
    results.setdefault("load_average", {})[name] = {"before": load, "after": os.getloadavg()}
    return out


def _fork(dbs: Databases, scale: Scale, t0: int) -> dict[str, Any]:
    url = dbs.new("fork")
    loader = data.BulkLoader(url)
    sources = []
    for label, n in (("small", scale.fork_small), ("medium", scale.fork_medium), ("large", scale.fork_large)):
        _log(f"{dbs.backend}: writing the {n:,}-event fork source")
        plan = data.lean_plan(n)
        loaded = loader.long_session(f"source-{label}", data.lean_events(plan), t0)
        sources.append(lifecycle_fork.ForkSource(label, loaded.session_id, loaded.events, data.lean_cuts(plan)))
    loader.close()
    _log(f"{dbs.backend}: forking")
    return lifecycle_fork.fork_condition(url, sources, scale.fork_repeats)


def _startup(dbs: Databases, scale: Scale, t0: int) -> dict[str, Any]:
    url, empty = dbs.new("startup"), dbs.new("empty")
    upgrade(empty)
    _log(f"{dbs.backend}: writing {scale.startup_closed:,} closed sessions and {scale.startup_open} open turns")
    loader = data.BulkLoader(url)
    closed = loader.sessions(
        ((f"closed-{i:06d}", data.startup_log(False), False) for i in range(scale.startup_closed)), t0
    )
    opened = loader.sessions(
        ((f"open-{i:04d}", data.startup_log(True), True) for i in range(scale.startup_open)), t0 + len(closed)
    )
    loader.close()
    events = sum(s.events for s in closed) + sum(s.events for s in opened)
    _log(f"{dbs.backend}: timing start-ups")
    prepared = startup.StartupData(url, len(closed), opened, events)
    return startup.startup_condition(prepared, empty, scale.startup_repeats)


def _history_and_resume(
    dbs: Databases,
    scale: Scale,
    conditions: set[str],
    t0: int,
    profile_dir: Path | None,
) -> dict[str, Any]:
    url = dbs.new("history")
    loader = data.BulkLoader(url)
    sessions: dict[str, tuple[str, int]] = {}
    if "history" in conditions:
        for label, n, kind in scale.history:
            _log(f"{dbs.backend}: writing the {label} history session ({n:,} {kind} events)")
            events = (
                data.workload_events(n, seed=n) if kind == "workload" else list(data.lean_events(data.lean_plan(n)))
            )
            loaded = loader.long_session(f"history-{label}", events, t0)
            sessions[label] = (loaded.session_id, loaded.events)
    resume_sid = None
    if "resume" in conditions:
        _log(f"{dbs.backend}: writing the {scale.resume_events:,}-event session to resume")
        loaded = loader.long_session("resume", data.workload_events(scale.resume_events, seed=7), t0)
        resume_sid = (loaded.session_id, loaded.events)
    loader.close()
    out: dict[str, Any] = {"history_rows_written": loader.rows_written}
    shared: Server | None = Server(url, env=INFO).start() if scale.shared_process else None
    client = SessionLogClient(shared.target, timeout=RPC_TIMEOUT) if shared is not None else None
    running = (shared, client) if shared is not None and client is not None else None
    try:
        if resume_sid is not None:
            _log(f"{dbs.backend}: resume")
            out["resume"] = lifecycle_history.resume_condition(
                url, resume_sid[0], resume_sid[1], scale.resume_cold, scale.resume_warm, shared=running
            )
        if sessions:
            out["history"] = {}
            for label, (sid, n) in sessions.items():
                _log(f"{dbs.backend}: model history {label}")
                out["history"][label] = lifecycle_history.history_condition(
                    url, sid, n, scale.history_cold, scale.history_after, shared=running
                )
    finally:
        if client is not None:
            client.close()
        if shared is not None:
            shared.stop()
    if sessions:
        largest = max(sessions.values(), key=lambda item: item[1] if "lean" not in item[0] else -1)
        for key, label in (("breakdown", largest[0]), ("breakdown_lean", sessions.get("100k_lean", ("", 0))[0])):
            if label:
                _log(f"{dbs.backend}: in-process breakdown of {label}")
                out["history"][key] = profile.history_breakdown(url, label)
        if profile_dir is not None:
            _log(f"{dbs.backend}: profiling {largest[0]} with py-spy")
            target = profile_dir / dbs.backend
            target.mkdir(parents=True, exist_ok=True)
            out["history"]["profile"] = profile.profile_history(url, largest[0], target, rounds=10, max_seconds=120)
    return out


# --- report ------------------------------------------------------------------------------------


def _fmt_ms(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    if value >= 10_000:
        return f"{value / 1000:.1f} s"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    if value >= 10:
        return f"{value:.0f} ms"
    return f"{value:.2f} ms"


def _fmt_bytes(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def table_rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    """(condition, figure) rows of one database's results, in the order of the issues."""
    rows: list[tuple[str, str]] = [
        (f"{name}: FAILED", results[name]["error"])
        for name in ("fork", "startup", "resume", "history")
        if isinstance(results.get(name), dict) and "error" in results[name]
    ]
    results = {k: v for k, v in results.items() if not (isinstance(v, dict) and "error" in v)}
    fork = results.get("fork")
    if fork:
        names = {
            "end": "fork at the end",
            "closed_mid": "fork in the middle, between turns",
            "open_mid": "fork in the middle, inside an open turn",
            "fork_of_fork_head": "fork of a fork, at its head",
            "fork_of_fork_mid": "fork of a fork, inside its inherited prefix",
        }
        sizes = " / ".join(f"{fork[label]['source_events']:,}" for label in FORK_SOURCES)
        for kind, name in names.items():
            entries = [fork[label][kind] for label in FORK_SOURCES]
            times = " / ".join(
                f"{_fmt_ms(e['rpc']['median_ms'])} ({_fmt_ms(e['server']['median_ms'])})" for e in entries
            )
            counts = "/".join(sorted({str(e["child_event_rows"]) for e in entries}))
            sizes_b = [e["child_payload_bytes"] for e in entries]
            span = _fmt_bytes(min(sizes_b)) + ("" if min(sizes_b) == max(sizes_b) else f"-{_fmt_bytes(max(sizes_b))}")
            figure = (
                f"{times}, n={entries[0]['rpc']['n']} each; child stores 1 session row + {counts} event rows, {span}"
            )
            if not all(e["reads_ok"] for e in entries):
                figure += "; READS OF THE CHILD ARE WRONG"
            rows.append((f"1. {name}; sources of {sizes} events: rpc (server)", figure))
        rows.append(
            ("1. events rows added by all forks", f"{fork['events_rows_added']} for {fork['forks_made']} forks")
        )
    start = results.get("startup")
    if start:
        label = f"{start['closed_sessions']:,} closed sessions + {start['open_turns']} open turns"
        rows.append(("2. start-up, empty database", f"{_fmt_ms(start['empty']['ready']['median_ms'])} to SERVING"))
        loaded = start["loaded"]
        rows.append(
            (
                f"2. start-up, {label} ({start['events']:,} events)",
                f"{_fmt_ms(loaded['ready']['median_ms'])} to SERVING (n={loaded['ready']['n']}); of which repair "
                f"{_fmt_ms(loaded['repair_median_ms'])}, boot {_fmt_ms(loaded['boot_median_ms'])}",
            )
        )
        rows.append(
            (
                "2. start-up, same data, nothing left open",
                f"{_fmt_ms(start['loaded_nothing_open']['ready']['median_ms'])} to SERVING",
            )
        )
        query = start["repair_query"]
        rows.append(
            (
                "2. start-up query for open turns (in-process)",
                f"{_fmt_ms(query['time']['median_ms'])}, finds {query['found']}; uses ix_sessions_open_turn: "
                f"{query['uses_open_turn_index']} ({' / '.join(query['plan'])[:90]})",
            )
        )
        runs = start["verification"]["runs"]
        repaired = "/".join(str(r["repaired_sessions"]) for r in runs)
        rows.append(
            (
                "2. open turns repaired exactly as specified",
                f"{repaired} of {start['open_turns']} per run; still open {runs[-1]['sessions_still_open']}; "
                f"events added {runs[-1]['events_added']}; all ok: {start['verification']['all_ok']}",
            )
        )
    resume = results.get("resume")
    if resume:
        for phase in ("cold", "warm"):
            entry = resume[phase]
            rows.append(
                (
                    f"3. resume {resume['events']:,}-event session to model history, {phase}",
                    f"{_fmt_ms(entry['total_ms']['median_ms'])} = resume {_fmt_ms(entry['resume_ms']['median_ms'])} "
                    f"(server {_fmt_ms(entry['server_resume_ms']['median_ms'])}) + history "
                    f"{_fmt_ms(entry['history_ms']['median_ms'])} (server "
                    f"{_fmt_ms(entry['server_history_ms']['median_ms'])}), n={entry['total_ms']['n']}; "
                    f"{_fmt_bytes(resume['history_bytes'])}",
                )
            )
    history = results.get("history") or {}
    for label in HISTORY_LABELS:
        entry = history.get(label)
        if not entry:
            continue
        kind = " (lean texts)" if "lean" in label else ""
        name = f"4. model history, {entry['events']:,} events{kind}, {entry['messages']:,} msgs, "
        name += _fmt_bytes(entry["bytes"])
        for phase, title in (("cold", "cold"), ("after_append", "after one more append")):
            part = entry[phase]
            figure = (
                f"rpc {_fmt_ms(part['rpc']['median_ms'])}, server {_fmt_ms(part['server']['median_ms'])}, "
                f"end to end {_fmt_ms(part['e2e_median_ms'])} (n={part['rpc']['n']})"
            )
            rows.append((f"{name}: {title}", figure))
        incremental = entry["incremental_after_append"]
        rows.append(
            (
                f"{name}: after one more append, incremental (refresh_history)",
                f"end to end {_fmt_ms(incremental['e2e']['median_ms'])}, server "
                f"{_fmt_ms(incremental['server']['median_ms'])} (n={incremental['e2e']['n']}); "
                f"copy correct: {incremental['copy_grew_by_the_appended_message']}",
            )
        )
    for key, kind in (("breakdown", ""), ("breakdown_lean", " (lean texts)")):
        breakdown = history.get(key)
        if not breakdown:
            continue
        after = breakdown["after_append"]
        rows.append(
            (
                f"4. in-process split, {breakdown['events']:,} events{kind}, {_fmt_bytes(breakdown['bytes'])}",
                f"read {_fmt_ms(breakdown['read_log_ms'])}, replay {_fmt_ms(breakdown['trusted_replay_ms'])}, "
                f"model_history {_fmt_ms(breakdown['model_history_ms'])}, "
                f"dumps {_fmt_ms(breakdown['dumps_bytes_ms'])}; "
                f"after append: apply {_fmt_ms(after['apply_ms'])}, model_history {_fmt_ms(after['project_ms'])}, "
                f"dumps {_fmt_ms(after['encode_ms'])}; client loads {_fmt_ms(breakdown['client_loads_ms'])}",
            )
        )
        cached = breakdown["suggested_cached_encoding"]
        rows.append(
            (
                f"4. proposal{kind}: per-message bytes cached when folded, joined per read",
                f"join {_fmt_ms(cached['join_per_read_ms'])} per read (one-off encode "
                f"{_fmt_ms(cached['encode_each_message_once_ms'])}); same bytes as today: {cached['same_bytes']}",
            )
        )
    return rows


def render(report: dict[str, Any]) -> str:
    """The report as a Markdown table per database."""
    out = []
    for backend, results in report["results"].items():
        loads = results.get("load_average", {})
        spread = [v for phase in loads.values() for v in (phase["before"][0], phase["after"][0])]
        load = f"; 1-min load average {min(spread):.1f}-{max(spread):.1f} on {os.cpu_count()} CPUs" if spread else ""
        out.append(f"\n### {backend} ({report['meta']['scale']} scale{load})\n")
        meta = report["meta"]
        moved = meta.get("commits_landed_during_run") or []
        code = f"commit {meta['commit']}" + (" + uncommitted changes" if meta["working_tree_dirty"] else "")
        if moved:
            code += f"; {len(moved)} commits landed during the run (see the JSON)"
        out.append(f"Code: {code}.\n")
        out.append("| condition | figure |")
        out.append("|---|---|")
        out += [f"| {name} | {figure} |" for name, figure in table_rows(results)]
    return "\n".join(out)


def _git(*cmd: str) -> str:
    done = subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def _meta(scale: Scale, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "scale": scale.name,
        "scale_detail": asdict(scale),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "working_tree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "command": " ".join(["python -m bench.lifecycle", *sys.argv[1:]]),
        "data": (
            "written straight into migrated databases with the server's own row mapping "
            "(bench/lifecycle_data.py): lean logs for fork sources and start-up sessions, "
            "bench.workload agent sessions (~2 KB of data per event) for history and resume, "
            "plus a lean 100k session; every shape checked by the validating fold first"
        ),
        "shapes_checked_events": args.shapes_checked,
    }


def _code_moved(start_commit: str) -> dict[str, Any]:
    """The commit at the end of the run and any commits that landed while it ran: the server
    is imported by each child process, so a change landing mid-run is measured from then on."""
    end = _git("rev-parse", "--short", "HEAD")
    landed = _git("log", "--format=%h %s", f"{start_commit}..{end}").splitlines() if end != start_commit else []
    return {"commit_at_end": end, "commits_landed_during_run": landed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lifecycle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CI scale (well under a minute)")
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--json", type=Path, help="write every figure as JSON here")
    parser.add_argument(
        "--only",
        default="fork,startup,resume,history",
        help="comma-separated conditions to run (fork, startup, resume, history)",
    )
    parser.add_argument("--profile", action="store_true", help="py-spy the 100k model history (full scale)")
    parser.add_argument("--profile-dir", type=Path, default=Path(tempfile.gettempdir()) / "sessionlog-lifebench-prof")
    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the bench's databases and temp files are still removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scale = QUICK if args.quick else FULL
    conditions = {c.strip() for c in args.only.split(",") if c.strip()}
    unknown = conditions - {"fork", "startup", "resume", "history"}
    if unknown:
        parser.error(f"unknown conditions: {sorted(unknown)}")
    backends = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    if "postgresql" in backends and not procs.pg_available():
        parser.error(f"PostgreSQL is not reachable at {procs.PG_ADMIN_URL}")
    args.shapes_checked = data.check_shapes([data.workload_events(300, seed=3)])
    report: dict[str, Any] = {"meta": _meta(scale, args), "results": {}}
    started = time.perf_counter()
    for backend in backends:
        report["results"][backend] = run_backend(backend, scale, conditions, args.profile_dir if args.profile else None)
    report["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    report["meta"].update(_code_moved(report["meta"]["commit"]))
    print(render(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        _log(f"wrote {args.json}")
    failed = [
        f"{b}:{c}" for b, r in report["results"].items() for c, v in r.items() if isinstance(v, dict) and "error" in v
    ]
    if failed:
        _log(f"FAILED conditions: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
