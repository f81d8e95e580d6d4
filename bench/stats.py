"""Percentiles, one rule for every figure of the bench."""

from __future__ import annotations

from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile `q` (0-100) of already sorted values; NaN when there are none."""
    if not sorted_values:
        return float("nan")
    rank = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


def latency_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50 / p99 / p99.9 / max of latencies given in seconds, in milliseconds."""
    ordered = sorted(seconds)
    return {
        "p50_ms": round(1000 * percentile(ordered, 50), 3),
        "p99_ms": round(1000 * percentile(ordered, 99), 3),
        "p999_ms": round(1000 * percentile(ordered, 99.9), 3),
        "max_ms": round(1000 * ordered[-1], 3) if ordered else float("nan"),
    }


__all__ = ["latency_ms", "percentile"]
