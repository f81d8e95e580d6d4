"""Render the bench report as a plain-text table, and check the issue's targets.

Peers are printed as ratios to sessionlog on the same database: `peer ÷ sessionlog`, so a
ratio below 1.00 means sessionlog is faster. Two ratios are given: against sessionlog's
one-session unary figure (like for like: one writer, one event per durable commit, waiting
for each) and against its 16-session streaming figure (what the service is built for).
"""

from __future__ import annotations

from typing import Any

BACKENDS = ("sqlite", "postgresql")


def _get(tree: dict[str, Any], *path: str) -> Any:
    node: Any = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _num(value: Any, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}"
    return str(value)


def _cell(figure: Any, kind: str) -> str:
    if figure is None:
        return "n/a"
    if isinstance(figure, dict) and "unavailable" in figure:
        return "unavailable"
    if kind == "rate":
        cpu = f"srv {figure['server_cpu_pct']:.0f}% / cli {figure['client_cpu_pct']:.0f}% CPU"
        if "server_us_per_event" in figure:
            cpu += f", {figure['server_us_per_event']:.0f} µs/ev"
        if "workers" in figure:
            shares = " + ".join(f"{pct:.0f}%" for pct in figure.get("worker_cpu_pct", []))
            cpu = f"{figure['workers']} workers{f' ({shares})' if shares else ''}, {cpu}"
        return f"{_num(figure['events_per_s'])}  ({cpu})"
    if kind == "latency":
        cell = f"{figure['p50_ms']:.2f} / {figure['p99_ms']:.2f} / {figure['p999_ms']:.2f}"
        late = figure.get("sends_late_over_1ms")
        if late:  # the client could not keep the pace: its own lag is in these figures too
            cell += f"  ({_num(late)} of {_num(figure['events'])} sent > 1 ms late)"
        return cell
    if kind == "history":
        times = f"{_num(figure['cold_ms'], 1)} / {_num(figure['after_append_ms'], 1)}"
        return f"{times} / {_num(figure.get('after_append_full_ms'), 1)}  ({_num(figure['events'])} ev)"
    if kind == "rss":
        base = _num(figure["baseline_rss_mb"], 1)
        return f"{_num(figure['peak_rss_mb'], 1)}  (base {base}, {figure['streams']} streams)"
    return str(figure)


ROWS = (
    ("unary_sequential", "1 session, unary, sequential (ev/s)", "rate"),
    ("stream_1", "1 session, streaming, pipelined (ev/s)", "rate"),
    ("stream_16", "16 sessions, streaming (ev/s)", "rate"),
    ("stream_16_long", "16 long sessions, streaming (ev/s)", "rate"),
    ("stream_64", "64 sessions, streaming (ev/s)", "rate"),
    ("stream_16_batch16", "16 sessions, 16 events/batch (ev/s)", "rate"),
    ("stream_16_workers", "16 sessions, streaming, all cores (ev/s)", "rate"),
    ("stream_16_batch16_workers", "16 sessions, 16 ev/batch, all cores", "rate"),
    ("latency_at_rate", "ack ms p50/p99/p99.9 @1,000 ev/s", "latency"),
    ("latency_at_rate_workers", "ack ms @1,000 ev/s, all cores", "latency"),
    ("latency_at_high_rate", "ack ms p50/p99/p99.9 @5,000 ev/s", "latency"),
    ("raw_commit_latency_at_rate", "raw driver commit ms, 1,000/s", "latency"),
    ("history_1k", "history ms: cold / +1 append / full", "history"),
    ("history_10k", "history ms: cold / +1 append / full", "history"),
    ("history_100k", "history ms: cold / +1 append / full", "history"),
    ("rss_streams", "server peak RSS MB, open writers", "rss"),
)


def render(report: dict[str, Any]) -> str:
    """The whole report as text: sessionlog figures, peers with ratios, targets."""
    lines: list[str] = []
    meta = report["meta"]
    machine = meta["machine"]
    lines.append(
        f"sessionlog bench ({meta['mode']}) @ {meta['sessionlog_commit']} - {machine['cores']} cores, "
        f"{machine['memory_gib']} GiB, Python {machine['python']}; mean event data "
        f"{meta['workload']['mean_event_data_bytes']} B, 1 event per batch, acked when durable"
    )
    lines.append(f"durability: SQLite {meta['durability']['sqlite']}; PostgreSQL {meta['durability']['postgresql']}")
    if "server_event_loop" in meta:  # reports written before the setting existed ran on asyncio's
        lines.append(f"server event loop: {meta['server_event_loop']} (SESSIONLOG_EVENT_LOOP)")
    if "server_build" in meta:  # reports written before the compiled build ran the source tree
        lines.append(f"server build: {meta['server_build']} (SESSIONLOG_BENCH_SERVER_PYTHON)")
    load = meta.get("loadavg_at_start"), meta.get("loadavg_at_end")
    lines.append(f"load average (1/5/15 min) at start {load[0]}, at end {load[1]} (2 cores; other work shares them)")
    lines.append("")
    width = 40
    col = 52
    lines.append(f"{'sessionlog':<{width}} {'SQLite':<{col}} {'PostgreSQL':<{col}}")
    lines.append("-" * (width + 2 * col + 2))
    for key, label, kind in ROWS:
        cells = []
        for backend in BACKENDS:
            tree = report["sessionlog"].get(backend)
            if isinstance(tree, dict) and "unavailable" in tree:
                cells.append("unavailable")
            else:
                cells.append(_cell(_get(report, "sessionlog", backend, key), kind))
        lines.append(f"{label:<{width}} {cells[0]:<{col}} {cells[1]:<{col}}")
    lines.append("")
    lines.append(
        f"{'peer (same events, commit per event)':<46} {'ev/s':>10} {'÷ sl unary':>11} {'÷ sl 16 str':>12}  notes"
    )
    lines.append("-" * 110)
    for name, peer in report.get("peers", {}).items():
        label = peer.get("label", name)
        backend = peer.get("backend", "sqlite")
        if "unavailable" in peer:
            lines.append(f"{label:<46} {'unavailable':>10}  {peer['unavailable']}")
            continue
        rate = peer["events_per_s"]
        unary = _get(report, "sessionlog", backend, "unary_sequential", "events_per_s")
        stream = _get(report, "sessionlog", backend, "stream_16", "events_per_s")
        r1 = f"{rate / unary:.2f}" if unary else "n/a"
        r16 = f"{rate / stream:.2f}" if stream else "n/a"
        note = f"{backend}; {peer['events']} events"
        if len(peer.get("runs", [])) > 1:
            note += f"; median of {len(peer['runs'])}"
        if peer.get("stopped_early"):
            note += " (time cap: cost per event grows with the session)"
        lines.append(f"{label:<46} {_num(rate):>10} {r1:>11} {r16:>12}  {note}")
    floor = report.get("transport_floor")
    if isinstance(floor, dict) and "unary" in floor:
        unary, streams = floor["unary"], floor["streams"]
        lines.append(
            f"{'grpc.aio echo server (no sessionlog code)':<46} unary {_num(unary['calls_per_s'])} calls/s, "
            f"{unary['server_us_per_call']:.0f} µs server CPU/call; {streams['streams']} streams "
            f"{_num(streams['messages_per_s'])} msg/s, {streams['server_us_per_message']:.0f} µs/msg"
        )
        slow = floor.get("slow_streams")
        if isinstance(slow, dict) and "p99_ms" in slow:
            lines.append(
                f"{'grpc.aio echo server, slow streams':<46} {slow['streams']:,} streams at 1 msg/s: ms p50/p99/p99.9 "
                f"{slow['p50_ms']:.1f} / {slow['p99_ms']:.1f} / {slow['p999_ms']:.1f}, {slow['streams_failed']} "
                f"streams failed, {_num(slow['server_us_per_message'])} µs/msg while writing"
            )
        paced = floor.get("latency_at_rate")
        if isinstance(paced, dict) and "p99_ms" in paced:
            lines.append(
                f"{'grpc.aio echo server, latency at a fixed rate':<46} {paced['streams']} streams, "
                f"{paced['offered_per_s']:,.0f} msg/s: ms p50/p99/p99.9 {paced['p50_ms']:.2f} / "
                f"{paced['p99_ms']:.2f} / {paced['p999_ms']:.2f}"
            )
    lines.append("")
    lines.append("targets")
    lines.append("-" * 110)
    for target in report.get("targets", []):
        lines.append(f"[{target['status']:<7}] {target['name']}: {target['measured']} (target {target['target']})")
    profile = report.get("profile")
    if isinstance(profile, dict) and "self" in profile:
        lines.append("")
        lines.append(
            f"server profile under 16 streaming sessions ({profile['samples']} py-spy samples), top self time:"
        )
        for row in profile["self"][:12]:
            lines.append(f"  {row['pct']:5.1f}%  {row['function']}")
        if str(meta.get("server_build", "")).startswith("mypyc"):
            lines.append(
                "  (compiled modules run as native code, which py-spy counts in the interpreted frame"
                " that called them: the writer stream's path shows as asyncio's and gRPC's frames)"
            )
    return "\n".join(lines)


def _check(
    name: str, target: str, measured: float | None, limit: float | None, higher_is_better: bool, unit: str
) -> dict[str, Any]:
    if measured is None or limit is None:
        return {"name": name, "target": target, "measured": "n/a", "status": "n/a", "gap": None}
    met = measured >= limit if higher_is_better else measured <= limit
    if met:
        gap = None
    elif higher_is_better:
        of, short = measured / limit, limit / max(measured, 1e-9)
        gap = f"missed: {of:.{_apart(of, 1.0)}f}x of target ({short:.{_apart(short, 1.0)}f}x short)"
    elif limit == 0:  # a count that must be zero: how many there were is the gap
        gap = f"missed: {measured:,.0f} instead of none"
    else:
        over = measured / limit
        gap = f"missed: {over:.{_apart(over, 1.0, least=1)}f}x over"
    # A ratio with at least two decimals: 0.96x rounds to 1.0 with one, beside a target of 1.0x it
    # missed, and 0.497x to 0.50 with two, beside 0.5x. Other figures with at least one.
    digits = _apart(measured, limit, least=2 if unit == "x" else 1)
    shown = f"{measured:,.{digits}f} {unit}" + (f" - {gap}" if gap else "")
    return {"name": name, "target": target, "measured": shown, "status": "met" if met else "MISSED", "gap": gap}


def _apart(value: float, other: float, least: int = 2) -> int:
    """The decimals (`least` to four) that show `value` apart from `other` when they differ: a
    figure that missed its target must not read as the target."""
    digits = least
    while digits < 4 and value != other and f"{value:.{digits}f}" == f"{other:.{digits}f}":
        digits += 1
    return digits


def _ratio(numerator: Any, denominator: Any) -> float | None:
    return numerator / denominator if numerator and denominator else None


def _floor_note(report: dict[str, Any], figure: dict[str, Any] | None, unary: bool, base: float | None) -> str:
    """Why a throughput target is missed, in numbers of the same run: the server's CPU per
    event beside what grpc.aio alone costs per message (`transport_floor`); for unary calls
    also the most calls a second one caller can make when each waits for an echo round trip
    and then for a commit at the raw driver's rate `base` (commits a second)."""
    floor = report.get("transport_floor") or {}
    per_message = (
        _get(floor, "unary", "server_us_per_call") if unary else _get(floor, "streams", "server_us_per_message")
    )
    if not figure or not per_message:  # 0: the echo's CPU clock saw nothing in a short run
        return ""
    spent = figure.get("server_us_per_event")
    if not spent:
        return ""
    kind = "unary call" if unary else "stream message"
    note = (
        f"; server {spent:.0f} µs CPU/event, of which grpc.aio alone takes {per_message:.0f} µs per {kind} "
        f"(echo server, same run: one core passes at most {1e6 / per_message:,.0f}/s)"
    )
    calls = _get(floor, "unary", "calls_per_s")
    if unary and calls:  # one call at a time: the echo's round trip bounds the rate before any commit
        note += f"; sequential echo calls alone, same run: {calls:,.0f}/s"
        if base:
            ceiling = 1 / (1 / calls + 1 / base)
            note += f", and with a raw commit after each at most {ceiling:,.0f}/s ({ceiling / base:.2f}x)"
    return note


def _slow_streams_note(report: dict[str, Any], figure: dict[str, Any]) -> str:
    """Why the slow-writers latency is missed, in numbers of the same run: grpc.aio's echo
    server under the same streams at the same pace (`transport_floor.slow_streams`), and the
    server's CPU per event while writing beside the echo's per message while its streams wrote."""
    echo = _get(report, "transport_floor", "slow_streams")
    if not isinstance(echo, dict) or "p99_ms" not in echo:
        return ""
    note = (
        f"; grpc.aio echo alone, {echo['streams']:,} streams at 1 msg/s, same run: p99 {echo['p99_ms']:.1f} ms, "
        f"{echo['streams_failed']} streams failed"
    )
    spent = figure.get("writes_server_us_per_event")
    if spent and echo.get("server_us_per_message"):
        note += (
            f"; server {spent:.0f} µs CPU/event while writing, the echo {echo['server_us_per_message']:.0f} µs "
            "per message"
        )
    return note


def _raw_commit_note(report: dict[str, Any], backend: str, key: str, label: str) -> str:
    """The disk's own tail, in numbers of the same run: the raw driver alone committing one
    event at a time at a fixed rate (`peers.commit_latency`). An acknowledgement waits for a
    durable commit, so no latency figure of sessionlog's can beat this one's."""
    raw = _get(report, "sessionlog", backend, "raw_commit_latency_at_rate")
    if not isinstance(raw, dict) or key not in raw:
        return ""
    driver = "raw sqlite3" if backend == "sqlite" else "raw psycopg"
    return (
        f"; {driver} alone, 1 event/commit at {raw['offered_per_s']:,.0f} commits/s, "
        f"same run: {label} {raw[key]:.1f} ms"
    )


def _echo_latency_note(report: dict[str, Any], key: str, label: str) -> str:
    """The transport's own share, in numbers of the same run: the grpc.aio echo server's answer
    latency under the same open-loop load (`transport_floor.latency_at_rate`). An acknowledgement
    takes a round trip like the echo's and a durable commit like the raw driver's, so the two
    notes together are the floor of sessionlog's figure."""
    echo = _get(report, "transport_floor", "latency_at_rate")
    if not isinstance(echo, dict) or key not in echo:
        return ""
    return (
        f"; grpc.aio echo alone, {echo['streams']} streams at {echo['offered_per_s']:,.0f} msg/s, "
        f"same run: {label} {echo[key]:.1f} ms"
    )


def _writes_cpu_note(figure: dict[str, Any]) -> str:
    """Which side had the cores while the slow writers wrote, and how long the server's
    threads waited for one (`slow_writers.writes_cpu`)."""
    if "writes_server_cpu_pct" not in figure:
        return ""
    return (
        f"; while writing: server {figure['writes_server_cpu_pct']:.0f}%, client processes "
        f"{figure['writes_client_cpu_pct']:.0f}% of a core, machine {figure['writes_machine_busy_pct']:.0f}% busy"
    ) + _waited_note(figure.get("writes_server_waited_ms_per_s"), ",")


def _waited_note(waited: Any, lead: str = ";") -> str:
    """How long the server's threads were runnable without a core, in ms per second (summed over
    its threads; `Server.waiting_seconds`), or nothing where the figure has no such reading."""
    if not isinstance(waited, (int, float)):
        return ""
    return f"{lead} server threads waited {waited:.0f} ms/s for a core"


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The throughput issue's targets (ratios to the raw driver of the same run) and the
    long-standing ones, each with the measured value and met / missed by how much."""
    sl = report["sessionlog"]
    pe = report.get("peers", {})
    raw = {
        "sqlite": ("raw sqlite3", "sqlite3_x1", "sqlite3_x16"),
        "postgresql": ("raw psycopg", "psycopg_x1", "psycopg_x16"),
    }
    out: list[dict[str, Any]] = []
    for backend in BACKENDS:
        driver, one, sixteen = raw[backend]
        raw16 = _get(pe, sixteen, "events_per_s")
        raw1 = _get(pe, one, "events_per_s")
        wanted_16 = 0.5 if backend == "sqlite" else 1.0
        workers = _get(sl, backend, "stream_16_workers", "workers")
        every_core = f"{workers or 'all'} workers (serve's default), a connection per session"
        for key, label, limit, base, unary in (
            ("stream_16", "16 streaming sessions, 1 event/batch, one worker", wanted_16, raw16, False),
            ("stream_16_workers", f"16 streaming sessions, 1 event/batch, {every_core}", wanted_16, raw16, False),
            ("stream_16_batch16", "16 sessions, 16 events/batch, one worker", 0.8, raw16, False),
            ("stream_16_batch16_workers", f"16 sessions, 16 events/batch, {every_core}", 0.8, raw16, False),
            ("unary_sequential", "1 session, unary, sequential", 0.5, raw1, True),
        ):
            figure = _get(sl, backend, key)
            per_commit = "1" if unary else "16"
            check = _check(
                f"{label}, {backend} vs {driver} {per_commit}/commit",
                f">= {limit}x",
                _ratio(_get(figure or {}, "events_per_s"), base),
                limit,
                True,
                "x",
            )
            if check["status"] == "MISSED":
                check["measured"] += _floor_note(report, figure, unary, base)
            out.append(check)
    for backend in BACKENDS:
        workers = _get(sl, backend, "latency_at_rate_workers", "workers")
        for figure_key, where in (
            ("latency_at_rate", ""),
            ("latency_at_rate_workers", f", {workers or 'all'} workers (serve's default), a connection per session"),
        ):
            for key, label in (("p99_ms", "p99"), ("p999_ms", "p99.9")):
                limit = 5.0 if key == "p99_ms" else 20.0
                check = _check(
                    f"ack {label} at 1,000 ev/s{where}, {backend}",
                    f"<= {limit:.0f} ms",
                    _get(sl, backend, figure_key, key),
                    limit,
                    False,
                    "ms",
                )
                if check["status"] == "MISSED":
                    check["measured"] += (
                        _raw_commit_note(report, backend, key, label)
                        + _echo_latency_note(report, key, label)
                        + _waited_note(_get(sl, backend, figure_key, "server_waited_ms_per_s"))
                    )
                out.append(check)
    slow = report.get("slow_writers", {})
    for backend in BACKENDS:
        figure = slow.get(backend)
        if not isinstance(figure, dict) or "streams" not in figure:
            continue
        streams = figure["streams"]
        out.append(
            _check(f"{streams:,} slow writers, {backend}: set-ups failed", "0", figure["setups_failed"], 0, False, "")
        )
        check = _check(
            f"{streams:,} slow writers, {backend}: ack p99", "<= 10 ms", figure["ack_p99_ms"], 10.0, False, "ms"
        )
        if check["status"] == "MISSED":
            check["measured"] += (
                _slow_streams_note(report, figure)
                + _raw_commit_note(report, backend, "p99_ms", "p99")
                + _writes_cpu_note(figure)
            )
        out.append(check)
        out.append(
            _check(f"{streams:,} slow writers, {backend}: stall seconds", "0", figure["stall_seconds"], 0, False, "s")
        )
    for backend in BACKENDS:
        events = _get(sl, backend, "history_100k", "events")
        out.append(
            _check(
                f"model history after one more append, {events or '100k'}-event session, {backend}",
                "<= 5 ms",
                _get(sl, backend, "history_100k", "after_append_ms"),
                5.0,
                False,
                "ms",
            )
        )
    for backend in BACKENDS:
        streams = _get(sl, backend, "rss_streams", "streams")
        out.append(
            _check(
                f"server peak RSS with {streams or 1000} open writer streams, {backend}",
                "<= 200 MB",
                _get(sl, backend, "rss_streams", "peak_rss_mb"),
                200.0,
                False,
                "MB",
            )
        )
    return out
