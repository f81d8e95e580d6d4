"""The bench's target table: every target is judged, including counts that must be zero."""

from __future__ import annotations

from typing import Any

from bench.report import targets


def _rate(events_per_s: float) -> dict[str, Any]:
    return {"events_per_s": events_per_s, "server_us_per_event": 120.0}


def test_targets_are_ratios_to_the_raw_driver_and_zero_counts_are_judged() -> None:
    figures = {"stream_16": _rate(6_000), "stream_16_batch16": _rate(9_000), "unary_sequential": _rate(700)}
    report: dict[str, Any] = {
        "sessionlog": {"sqlite": figures},
        "peers": {"sqlite3_x16": {"events_per_s": 20_000}, "sqlite3_x1": {"events_per_s": 1_000}},
        "transport_floor": {"unary": {"server_us_per_call": 350.0}, "streams": {"server_us_per_message": 65.0}},
        "slow_writers": {"sqlite": {"streams": 2000, "setups_failed": 3, "ack_p99_ms": 4.0, "stall_seconds": 0}},
    }
    found = {t["name"]: t for t in targets(report)}
    streaming = found["16 streaming sessions, 1 event/batch, sqlite vs raw sqlite3 16/commit"]
    assert streaming["status"] == "MISSED" and "grpc.aio alone takes 65 µs" in streaming["measured"]
    assert found["1 session, unary, sequential, sqlite vs raw sqlite3 1/commit"]["status"] == "met"  # 0.7x >= 0.5x
    assert found["2,000 slow writers, sqlite: set-ups failed"]["gap"] == "missed: 3 instead of none"
    assert found["2,000 slow writers, sqlite: stall seconds"]["status"] == "met"
    assert found["2,000 slow writers, sqlite: ack p99"]["status"] == "met"
