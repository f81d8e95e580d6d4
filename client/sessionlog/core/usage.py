"""Usage and cost: the one rule for reading a usage object and the one way to add costs up.

Stats (`projections.stats`), the Pi replay (`formats.pi.metrics`) and the export replay
(`formats.sessionlog_file`) all read usage through these functions and sum cost with `CostSum`,
so the same session reports the same cost, to the last digit, whatever path computed it.

A usage object has Pi's shape `{input, output, cacheRead, cacheWrite, totalTokens,
cost:{input, output, cacheRead, cacheWrite, total}}`. A number below zero in it is refused at
the door (`negative_field`, checked by `validate.check_usage`): it would lower a session's cost.
The offline replay refuses it by the same check (`validate.check_usage_at`): an export's events
pass the door's rules, and the Pi replay checks each usage it sums.
Non-numbers, and numbers past `USAGE_LIMIT`, count as 0. Costs are summed exactly (Shewchuk's
algorithm, as `math.fsum`, but incrementally: a live fold adds one event at a time) and reported
rounded to `COST_DECIMALS`, so neither the order of the events nor float rounding can change the
reported figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

JsonObject = dict[str, Any]

TOKEN_KEYS: tuple[str, ...] = ("input", "output", "cacheRead", "cacheWrite")
COST_DECIMALS = 12

USAGE_LIMIT = 2**53
"""The largest usage number that counts, either sign: the integers a double holds exactly (and a
JavaScript reader of the stats too). The door accepts any lossless JSON number, but a running
total must stay a number: `1e308` twice sums to infinity, which no JSON can carry (the session's
stats and fold snapshots could not be written again), and an integer past a double's range
added to a float raises OverflowError (the session could not be folded again). Below this
limit neither can happen in any session's lifetime."""


COST_KEYS: tuple[str, ...] = (*TOKEN_KEYS, "total")
"""The numbers of a usage's `cost` object."""


def negative_field(usage: JsonObject) -> tuple[str, int | float] | None:
    """The first of a usage's counts and costs (`TOKEN_KEYS`, `totalTokens`, `cost.COST_KEYS`)
    that is a number below zero: its dotted path (`cost.total`) and value; None when none is.

    Tokens and prices are never negative: a negative one would silently lower the cost and
    token totals `stats` and `costs` report, so the door refuses it. Only numbers are looked
    at: anything else counts as 0 (`number`), lowering nothing. (Every appended event with
    usage passes here: the numbers are told by their exact type, inline, as decoded JSON holds
    no subclass of int or float but bool, which is no number here.)"""
    for key in _COUNT_KEYS:
        value = usage.get(key)
        if (type(value) is int or type(value) is float) and value < 0:
            return key, value
    cost = usage.get("cost")
    if type(cost) is dict:
        for key in COST_KEYS:
            value = cost.get(key)
            if (type(value) is int or type(value) is float) and value < 0:
                return f"cost.{key}", value
    return None


_COUNT_KEYS = (*TOKEN_KEYS, "totalTokens")


def number(value: Any) -> int | float:
    """A usage count or cost as a number; anything else (bools included, and a number past
    `USAGE_LIMIT`) counts as 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return value if -USAGE_LIMIT <= value <= USAGE_LIMIT else 0


def usage_price(usage: JsonObject) -> int | float | None:
    """`cost.total`, else the sum of the cost parts; None when the usage names no cost that
    counts (no cost object, no number in it, a total past `USAGE_LIMIT`): the harness had no
    pricing for its model, which a cost of 0 (a free model) is not."""
    cost = usage.get("cost")
    if not isinstance(cost, dict):
        return None
    total = cost.get("total")
    if _is_number(total):
        return total if number(total) == total else None
    parts = [cost.get(key) for key in TOKEN_KEYS if _is_number(cost.get(key))]
    if not any(number(part) == part for part in parts):
        return None
    return sum(number(part) for part in parts)


def usage_cost(usage: JsonObject) -> int | float:
    """What the usage adds to a cost: its price (`usage_price`), 0 when it has none."""
    price = usage_price(usage)
    return 0 if price is None else price


def is_unpriced(usage: JsonObject) -> bool:
    """Tokens with no price (`usage_price` None): a cost that is not known, not a cost of 0. A
    usage of no tokens cost nothing, priced or not."""
    return usage_price(usage) is None and usage_total_tokens(usage) != 0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def usage_total_tokens(usage: JsonObject) -> int | float:
    """`totalTokens`, or (when missing or 0, as Pi computes it) the sum of the four counts."""
    total = number(usage.get("totalTokens"))
    if total:
        return total
    return sum(number(usage.get(key)) for key in TOKEN_KEYS)


@dataclass(slots=True, init=False)
class CostSum:
    """An exact running sum of costs: `value()` equals `round(math.fsum(all added), 12)`.

    `partials` are non-overlapping floats whose exact sum is the total (a handful in practice),
    so the state stays small and plain (a list of floats) however many costs were added. `add`
    updates the list in place, so a structure that must stay plain data (a fold's stats, which
    snapshots store as JSON) can keep the list and wrap it: `CostSum(stats.cost_partials)`.
    """

    partials: list[float] = field(default_factory=list)

    def __init__(self, partials: list[float] | None = None) -> None:
        # Written out (compiled, a generated one stays interpreted): see `core.events.NewEvent`.
        self.partials = [] if partials is None else partials

    def add(self, cost: int | float) -> None:
        """Add one cost exactly (a cost past `USAGE_LIMIT` is no price: it counts as 0, as
        `number` says, so the partials stay finite)."""
        x = float(number(cost))
        kept: list[float] = []
        for y in self.partials:
            if abs(x) < abs(y):
                x, y = y, x
            high = x + y
            low = y - (high - x)
            if low:
                kept.append(low)
            x = high
        kept.append(x)
        self.partials[:] = kept

    def copy(self) -> CostSum:
        """An independent copy (a fold's checkpoint)."""
        return CostSum(list(self.partials))

    def value(self) -> float:
        """The total, rounded to `COST_DECIMALS`."""
        return round_cost(math.fsum(self.partials))


def round_cost(cost: int | float) -> int | float:
    """A cost as every figure reports it: rounded to `COST_DECIMALS` (a sum's total, and a single
    call's cost summed from its parts, whose float noise would show otherwise)."""
    return round(cost, COST_DECIMALS)


def total_cost(costs: list[int | float]) -> float:
    """The exact sum of `costs`, rounded as `CostSum.value` rounds it."""
    total = CostSum()
    for cost in costs:
        total.add(cost)
    return total.value()


def cost_difference(cost: int | float, less: int | float) -> float:
    """`cost - less`, exact, rounded as `CostSum.value` rounds it: what a fork's own events cost
    is its `costUsd` less its source's at the cut (docs/repair.md#fork), and `0.3 - 0.1` in
    floats is 0.19999999999999998, not the 0.2 a sum of the same events reports."""
    return total_cost([cost, -less])
