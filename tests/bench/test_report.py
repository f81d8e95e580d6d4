"""The bench's report: every target is judged, including counts that must be zero, and a cell
says what else is in its figure."""

from __future__ import annotations

from typing import Any

from bench.report import _cell, targets


def _rate(events_per_s: float) -> dict[str, Any]:
    return {"events_per_s": events_per_s, "server_us_per_event": 120.0}


def test_targets_are_ratios_to_the_raw_driver_and_zero_counts_are_judged() -> None:
    figures = {
        "stream_16": _rate(6_000),
        "stream_16_workers": {**_rate(10_500), "workers": 2},
        "stream_16_batch16": _rate(9_000),
        "unary_sequential": _rate(700),
    }
    report: dict[str, Any] = {
        "sessionlog": {"sqlite": figures},
        "peers": {"sqlite3_x16": {"events_per_s": 20_000}, "sqlite3_x1": {"events_per_s": 1_000}},
        "transport_floor": {"unary": {"server_us_per_call": 350.0}, "streams": {"server_us_per_message": 65.0}},
        "slow_writers": {"sqlite": {"streams": 2000, "setups_failed": 3, "ack_p99_ms": 4.0, "stall_seconds": 0}},
    }
    found = {t["name"]: t for t in targets(report)}
    streaming = found["16 streaming sessions, 1 event/batch, one worker, sqlite vs raw sqlite3 16/commit"]
    assert streaming["status"] == "MISSED" and "grpc.aio alone takes 65 µs" in streaming["measured"]
    every_core = "16 streaming sessions, 1 event/batch, 2 workers (serve's default), a connection per session"
    assert found[f"{every_core}, sqlite vs raw sqlite3 16/commit"]["status"] == "met"  # 0.525x >= 0.5x
    batch16 = "16 sessions, 16 events/batch, 2 workers (serve's default), a connection per session"
    assert found[f"{batch16}, sqlite vs raw sqlite3 16/commit"]["status"] == "n/a"  # not measured
    assert found["1 session, unary, sequential, sqlite vs raw sqlite3 1/commit"]["status"] == "met"  # 0.7x >= 0.5x
    assert found["2,000 slow writers, sqlite: set-ups failed"]["gap"] == "missed: 3 instead of none"
    assert found["2,000 slow writers, sqlite: stall seconds"]["status"] == "met"
    assert found["2,000 slow writers, sqlite: ack p99"]["status"] == "met"


def test_a_run_without_the_raw_drivers_still_names_each_targets_own_floor() -> None:
    """`--no-peers` measures no raw driver: every ratio is n/a, and the unary target still
    names the one-event commit it is a ratio to."""
    report: dict[str, Any] = {"sessionlog": {"sqlite": {"unary_sequential": _rate(700)}}}
    found = {t["name"]: t for t in targets(report)}
    assert found["1 session, unary, sequential, sqlite vs raw sqlite3 1/commit"]["status"] == "n/a"
    assert "1 session, unary, sequential, sqlite vs raw sqlite3 16/commit" not in found


def test_a_missed_target_names_the_floor_measured_in_the_same_run() -> None:
    """Latency beside the raw driver's own commit latency at the same rate; slow writers beside
    the grpc.aio echo server under the same streams and the raw driver's commit tail; unary beside
    sequential echo calls."""
    latency = {"p50_ms": 2.0, "p99_ms": 9.0, "p999_ms": 30.0, "server_waited_ms_per_s": 37.6}
    raw = {"offered_per_s": 1000.0, "p50_ms": 0.4, "p99_ms": 6.4, "p999_ms": 11.9}
    report: dict[str, Any] = {
        "sessionlog": {
            "postgresql": {
                "unary_sequential": _rate(300),
                "latency_at_rate": latency,
                "latency_at_rate_workers": {**latency, "p99_ms": 4.2, "workers": 2},
                "raw_commit_latency_at_rate": raw,
            }
        },
        "peers": {"psycopg_x1": {"events_per_s": 1_500}},
        "transport_floor": {
            "unary": {"server_us_per_call": 600.0, "calls_per_s": 1_200.0},
            "streams": {"server_us_per_message": 120.0},
            "slow_streams": {"streams": 2000, "p99_ms": 540.0, "streams_failed": 75, "server_us_per_message": 124.6},
        },
        "slow_writers": {
            "postgresql": {
                "streams": 2000,
                "setups_failed": 0,
                "ack_p99_ms": 800.0,
                "stall_seconds": 3,
                "writes_server_cpu_pct": 95.0,
                "writes_client_cpu_pct": 80.4,
                "writes_machine_busy_pct": 91.0,
                "writes_server_waited_ms_per_s": 412.3,
                "writes_server_us_per_event": 433.8,
            }
        },
    }
    found = {t["name"]: t for t in targets(report)}
    p99 = found["ack p99 at 1,000 ev/s, postgresql"]
    assert p99["status"] == "MISSED" and "raw psycopg alone" in p99["measured"] and "p99 6.4 ms" in p99["measured"]
    assert p99["measured"].endswith("p99 6.4 ms; server threads waited 38 ms/s for a core")
    assert "p99.9 11.9 ms" in found["ack p99.9 at 1,000 ev/s, postgresql"]["measured"]
    spread = "at 1,000 ev/s, 2 workers (serve's default), a connection per session, postgresql"
    assert found[f"ack p99 {spread}"]["status"] == "met"  # 4.2 ms, judged apart from the one worker's 9.0
    assert "p99.9 11.9 ms" in found[f"ack p99.9 {spread}"]["measured"]
    slow = found["2,000 slow writers, postgresql: ack p99"]["measured"]
    assert "grpc.aio echo alone, 2,000 streams at 1 msg/s, same run: p99 540.0 ms, 75 streams failed" in slow
    assert "server 434 µs CPU/event while writing, the echo 125 µs per message;" in slow
    assert "raw psycopg alone, 1 event/commit at 1,000 commits/s, same run: p99 6.4 ms" in slow
    assert (
        "while writing: server 95%, client processes 80% of a core, machine 91% busy, "
        "server threads waited 412 ms/s for a core"
    ) in slow
    unary = found["1 session, unary, sequential, postgresql vs raw psycopg 1/commit"]["measured"]
    assert "sequential echo calls alone, same run: 1,200/s" in unary
    # One echo round trip (1/1,200 s) and one raw commit (1/1,500 s) in series: 667 calls a second.
    assert unary.endswith("1,200/s, and with a raw commit after each at most 667/s (0.44x)")


def test_a_missed_latency_names_the_echos_latency_at_the_same_rate() -> None:
    """The floor of an acknowledgement is a round trip and a commit: beside the raw driver's
    commit latency, the grpc.aio echo server's under the same open loop, each percentile its own."""
    report: dict[str, Any] = {
        "sessionlog": {
            "sqlite": {
                "latency_at_rate": {"p50_ms": 1.7, "p99_ms": 8.3, "p999_ms": 21.0, "server_waited_ms_per_s": 300.0},
                "raw_commit_latency_at_rate": {"offered_per_s": 1000.0, "p99_ms": 1.9, "p999_ms": 4.1},
            }
        },
        "transport_floor": {
            "latency_at_rate": {"offered_per_s": 1000.0, "streams": 16, "p50_ms": 0.38, "p99_ms": 1.11, "p999_ms": 3.6}
        },
    }
    found = {t["name"]: t for t in targets(report)}
    p99 = found["ack p99 at 1,000 ev/s, sqlite"]["measured"]
    assert p99.endswith(
        "raw sqlite3 alone, 1 event/commit at 1,000 commits/s, same run: p99 1.9 ms; grpc.aio echo alone, "
        "16 streams at 1,000 msg/s, same run: p99 1.1 ms; server threads waited 300 ms/s for a core"
    )
    p999 = found["ack p99.9 at 1,000 ev/s, sqlite"]["measured"]
    assert "grpc.aio echo alone, 16 streams at 1,000 msg/s, same run: p99.9 3.6 ms" in p999


def test_a_ratio_just_under_its_target_does_not_read_as_the_target() -> None:
    """0.96x of a 1.0x target, shown with one decimal, read "1.0 x" beside MISSED."""
    report: dict[str, Any] = {
        "sessionlog": {"postgresql": {"stream_16": _rate(6_606)}},
        "peers": {"psycopg_x16": {"events_per_s": 6_889}},
    }
    found = {t["name"]: t for t in targets(report)}
    streaming = found["16 streaming sessions, 1 event/batch, one worker, postgresql vs raw psycopg 16/commit"]
    assert streaming["status"] == "MISSED"
    assert streaming["measured"].startswith("0.96 x - missed: 0.96x of target (1.04x short)")


def test_a_ratio_that_rounds_to_its_target_shows_the_decimals_that_tell_them_apart() -> None:
    """0.497x of a 0.5x target read "0.50 x - missed: 1.00x of target (1.00x short)"."""
    report: dict[str, Any] = {
        "sessionlog": {"sqlite": {"stream_16": _rate(12_126), "stream_16_batch16": _rate(40_000)}},
        "peers": {"sqlite3_x16": {"events_per_s": 24_400}},
    }
    found = {t["name"]: t for t in targets(report)}
    streaming = found["16 streaming sessions, 1 event/batch, one worker, sqlite vs raw sqlite3 16/commit"]
    assert streaming["status"] == "MISSED"
    assert streaming["measured"].startswith("0.497 x - missed: 0.99x of target (1.01x short)")
    met = found["16 sessions, 16 events/batch, one worker, sqlite vs raw sqlite3 16/commit"]
    assert met["status"] == "met" and met["measured"] == "1.64 x"  # two decimals when nothing is hidden


def test_a_latency_just_over_its_limit_does_not_read_as_the_limit() -> None:
    """5.04 ms against 5 ms read "5.0 ms - missed: 1.0x over"."""
    report: dict[str, Any] = {"sessionlog": {"postgresql": {"latency_at_rate": {"p99_ms": 5.04, "p999_ms": 9.0}}}}
    found = {t["name"]: t for t in targets(report)}
    p99 = found["ack p99 at 1,000 ev/s, postgresql"]
    assert p99["status"] == "MISSED"
    assert p99["measured"].startswith("5.04 ms - missed: 1.01x over")
    assert found["ack p99.9 at 1,000 ev/s, postgresql"]["measured"] == "9.0 ms"


def test_a_latency_cell_says_when_the_client_fell_behind_its_pace() -> None:
    """At 5,000 ev/s the one client process sent thousands of events late; the cell says so,
    since its lag is in the latency too. A client that kept the pace adds nothing."""
    kept = {"p50_ms": 1.08, "p99_ms": 4.02, "p999_ms": 7.32, "events": 15_000, "sends_late_over_1ms": 0}
    behind = {"p50_ms": 14.64, "p99_ms": 267.45, "p999_ms": 699.27, "events": 75_000, "sends_late_over_1ms": 9_691}
    assert _cell(kept, "latency") == "1.08 / 4.02 / 7.32"
    assert _cell(behind, "latency") == "14.64 / 267.45 / 699.27  (9,691 of 75,000 sent > 1 ms late)"


def test_an_echo_floor_measured_as_no_cpu_at_all_is_left_out_of_the_note() -> None:
    """A quick run's echo server can pass its few messages within one tick of the CPU clock, so
    its CPU per message reads 0: the report then names no floor, where it divided by zero and the
    whole bench failed after every figure was measured."""
    report: dict[str, Any] = {
        "sessionlog": {"sqlite": {"stream_16": _rate(6_000)}},
        "peers": {"sqlite3_x16": {"events_per_s": 20_000}},
        "transport_floor": {"unary": {"server_us_per_call": 0.0}, "streams": {"server_us_per_message": 0.0}},
    }
    found = {t["name"]: t for t in targets(report)}
    streaming = found["16 streaming sessions, 1 event/batch, one worker, sqlite vs raw sqlite3 16/commit"]
    assert streaming["status"] == "MISSED" and "grpc.aio alone" not in streaming["measured"]
