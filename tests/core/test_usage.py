"""The one cost rule: an exact running sum, reported to 12 decimals, whatever the order."""

from __future__ import annotations

import math
from random import Random

from hypothesis import given
from hypothesis import strategies as st

from sessionlog.core.usage import CostSum, total_cost, usage_cost

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
