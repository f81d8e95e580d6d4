"""The event loop's lock-free series read exactly as prometheus_client's own would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from sessionlog_server.service.loop_series import LoopSeries

BOUNDS = (0.0005, 0.001, 0.005, 0.1, 1.0, 2.5, 16.0)


def _without_created(exposition: bytes) -> list[str]:
    return [line for line in exposition.decode().splitlines() if "_created" not in line]


@given(
    increments=st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), max_size=20),
    observations=st.lists(
        st.one_of(st.sampled_from(BOUNDS), st.floats(min_value=-1, max_value=100, allow_nan=False)), max_size=40
    ),
)
def test_counters_and_histograms_expose_what_prometheus_client_exposes(
    increments: list[float], observations: list[float]
) -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    their_counter = Counter("x_done", "Things done.", registry=theirs)
    their_histogram = Histogram("x_seconds", "How long.", buckets=BOUNDS, registry=theirs)
    series = LoopSeries(ours)
    our_counter = series.counter("x_done", "Things done.")
    our_histogram = series.histogram("x_seconds", "How long.", BOUNDS)
    for amount in increments:
        their_counter.inc(amount)
        our_counter.inc(amount)
    for value in observations:  # a value on a bound counts in that bound's bucket (`le`)
        their_histogram.observe(value)
        our_histogram.observe(value)
    assert _without_created(generate_latest(ours)) == _without_created(generate_latest(theirs))


def test_a_counter_says_when_it_was_created() -> None:
    registry = CollectorRegistry()
    LoopSeries(registry).counter("x_done", "Things done.").inc()
    assert "x_done_created " in generate_latest(registry).decode()
