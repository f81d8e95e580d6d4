"""The one cost rule: an exact running sum, reported to 12 decimals, whatever the order; and the
one usage rule: a number past `USAGE_LIMIT` counts as 0, so running totals stay writable."""

from __future__ import annotations

import math
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionlog.core import jsonvalue
from sessionlog.core.fold import SessionFold
from sessionlog.core.projections.stats import stats
from sessionlog.core.snapshot import decode_snapshot, encode_snapshot
from sessionlog.core.usage import USAGE_LIMIT, CostSum, number, total_cost, usage_cost, usage_price
from tests.core.builders import Log

COSTS = st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False) | st.integers(-(10**9), 10**9))


@given(COSTS, st.randoms())
def test_running_sum_equals_fsum_in_any_order(costs: list[float], random: Random) -> None:
    running = CostSum()
    for cost in costs:
        running.add(cost)
    shuffled = list(costs)
    random.shuffle(shuffled)
    assert running.value() == round(math.fsum(costs), 12) == total_cost(shuffled)


def test_a_tenth_ten_times_is_one() -> None:
    assert total_cost([0.1] * 10) == 1.0
    assert sum([0.1] * 10) != 1.0  # what a naive running float sum reports


def test_copy_is_independent() -> None:
    first = CostSum()
    first.add(0.5)
    second = first.copy()
    second.add(0.25)
    assert (first.value(), second.value()) == (0.5, 0.75)


def test_cost_total_else_parts_else_zero() -> None:
    assert usage_cost({"cost": {"total": 0.3, "input": 9}}) == 0.3
    assert usage_cost({"cost": {"input": 0.1, "output": 0.2, "cacheRead": True}}) == 0.1 + 0.2
    assert usage_cost({"cost": "free"}) == 0
    assert usage_cost({}) == 0


def test_an_integer_too_large_for_a_float_is_no_price() -> None:
    running = CostSum()
    running.add(10**400)
    running.add(2)
    assert running.value() == 2


def test_a_number_past_the_usage_limit_counts_as_zero() -> None:
    assert number(USAGE_LIMIT) == USAGE_LIMIT and number(-USAGE_LIMIT) == -USAGE_LIMIT
    assert number(USAGE_LIMIT + 1) == number(1e308) == number(-(10**400)) == 0
    assert usage_cost({"cost": {"total": 1e308, "input": 1}}) == 0  # a total that does not count is still the total
    running = CostSum()
    for cost in (1e308, 1e308, 0.5):
        running.add(cost)
    assert running.value() == 0.5


@pytest.mark.parametrize(
    "inputs",
    [
        (1e308, 1e308, 3),  # a float sum that would overflow to infinity
        (10**400, 1.5, 3),  # an integer past a double's range meeting a float (OverflowError)
        (1.5, -(10**400), 3),
    ],
)
def test_usage_past_the_limit_leaves_stats_and_snapshots_writable(inputs: tuple[float, ...]) -> None:
    """Every stored number is lossless JSON, so each event is accepted; the running totals must
    stay numbers a snapshot and the stats projection can write, and the log must fold again."""
    log = Log()
    log.head()
    for value in inputs:
        log.add("pi/usage", {"usage": {"input": value, "output": 1, "cost": {"total": value}}}, ignorable=True)
    counted = sum(value for value in inputs if abs(value) <= USAGE_LIMIT)
    s = log.fold.stats()
    assert (s["inputTokens"], s["outputTokens"], s["costUsd"]) == (counted, len(inputs), counted)
    assert jsonvalue.loads(jsonvalue.dumps_bytes(s)) == s
    restored = SessionFold.from_snapshot(decode_snapshot(encode_snapshot(log.fold.snapshot())))
    assert restored.stats() == s == stats(log.events)
    assert SessionFold.replay(log.events, validate=False).stats() == s


def test_usage_price_is_none_when_the_usage_names_no_cost() -> None:
    assert usage_price({"input": 9, "cost": {"total": 0}}) == 0  # a free model is priced, at 0
    assert usage_price({"cost": {"total": "n/a", "output": 0.5}}) == 0.5  # a total that is no number: the parts
    assert usage_price({"input": 9}) is None
    assert usage_price({"input": 9, "cost": "unknown"}) is None
    assert usage_price({"input": 9, "cost": {"total": None, "input": True}}) is None
    assert usage_price({"input": 9, "cost": {"total": 1e308}}) is None  # past the limit: no price that counts
    assert usage_cost({"input": 9}) == 0  # what `costUsd` adds for it


def test_stats_count_the_events_whose_usage_has_tokens_but_no_price() -> None:
    """A harness with no pricing for its model logs usage without a cost: it added 0 to `costUsd`,
    and the stats could not tell that from a free model. `unpricedEvents` counts such events (with
    tokens: a usage of none cost nothing), in the fold, its snapshots and the reference alike."""
    log = Log()
    log.head()
    log.add("pi/usage", {"usage": {"input": 100, "output": 10}}, ignorable=True)  # no pricing for the model
    log.add("pi/usage", {"usage": {"input": 7, "cost": {"total": 0}}}, ignorable=True)  # a free model
    log.add("pi/usage", {"usage": {"input": 3, "cost": {"total": 0.25}}}, ignorable=True)
    log.add("pi/usage", {"usage": {"input": 0, "output": 0}}, ignorable=True)  # no tokens: nothing to price
    s = log.fold.stats()
    assert (s["inputTokens"], s["costUsd"], s["unpricedEvents"]) == (110, 0.25, 1)
    restored = SessionFold.from_snapshot(decode_snapshot(encode_snapshot(log.fold.snapshot())))
    assert restored.stats() == s == stats(log.events)
