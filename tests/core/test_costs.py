"""Spend across sessions (`sessionlog.core.costs`): a fork owns its stats less its source's at
the cut, and a total of own figures counts every shared prefix once."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionlog.core.costs import COST_KEYS, SessionCost, cost_report, figures_of, own_figures, total_figures
from sessionlog.core.events import Event
from sessionlog.core.projections.stats import stats
from sessionlog.core.usage import cost_difference, total_cost, usage_cost


def _usage(cost: float | None, tokens: int = 10) -> dict[str, Any]:
    usage: dict[str, Any] = {"input": tokens, "output": 1, "cacheRead": 2, "cacheWrite": 3}
    if cost is not None:
        usage["cost"] = {"total": cost}
    return usage


def _events(first_seq: int, costs: list[float | None]) -> list[Event]:
    """One usage-carrying event per cost (None: no pricing for its model)."""
    return [
        Event(seq=first_seq + n, time=1000 + n, type="pi/usage", data={"usage": _usage(cost)}, ignorable=True)
        for n, cost in enumerate(costs)
    ]


def _row(session_id: str, events: list[Event], source: tuple[str, list[Event], int] | None = None) -> SessionCost:
    """The row of a session whose log is `events`; `source` is (parent id, its log, fork seq)."""
    if source is None:
        return SessionCost.of(session_id, None, None, stats(events))
    parent, parent_events, fork_seq = source
    return SessionCost.of(session_id, parent, fork_seq, stats(events), stats(parent_events[: fork_seq + 1]))


def test_a_session_that_is_no_fork_owns_all_its_figures() -> None:
    row = _row("root", _events(0, [0.1, 0.2]))
    assert row.own == row.stats == figures_of(stats(_events(0, [0.1, 0.2])))
    assert (row.own["events"], row.own["costUsd"], row.own["inputTokens"]) == (2, 0.3, 20)


def test_a_forks_own_figures_leave_the_inherited_prefix_out() -> None:
    root = _events(0, [0.1, 0.2, 1.0])
    fork = root[:2] + _events(2, [0.25, None])  # forked after seq 1, then a call with no price
    row = _row("fork", fork, ("root", root, 1))
    assert row.stats["costUsd"] == 0.55 and row.stats["unpricedEvents"] == 1
    assert row.own == {
        "events": 2,
        "modelCalls": 0,
        "inputTokens": 20,
        "outputTokens": 2,
        "cacheReadTokens": 4,
        "cacheWriteTokens": 6,
        "costUsd": 0.25,
        "unpricedEvents": 1,
    }
    assert row.to_json()["parent"] == {"sessionId": "root", "forkSeq": 1}


def test_a_total_counts_every_shared_prefix_once() -> None:
    """Parent, a fork of it, and a fork of the fork: added as stats, the parent's prefix counts
    three times and the first fork's twice; added as own figures, each event once."""
    root = _events(0, [0.1, 0.2, 1.0])
    first = root[:2] + _events(2, [0.3, 0.05])
    second = first[:4] + _events(4, [0.7, None])
    rows = [_row("root", root), _row("first", first, ("root", root, 1)), _row("second", second, ("first", first, 3))]
    distinct = root + first[2:] + second[4:]
    total = total_figures(rows)
    assert total["costUsd"] == total_cost([usage_cost(e.data["usage"]) for e in distinct]) == 2.35
    assert total["events"] == len(distinct) and total["unpricedEvents"] == 1
    assert total["inputTokens"] == 10 * len(distinct)
    assert total_cost([row.stats["costUsd"] for row in rows]) != total["costUsd"]  # what adding stats gave
    report = cost_report(rows)
    assert [r["id"] for r in report["sessions"]] == ["root", "first", "second"] and report["total"] == total


def test_own_cost_is_rounded_as_stats_round_it() -> None:
    assert 0.3 - 0.1 != 0.2 and cost_difference(0.3, 0.1) == 0.2
    assert total_figures([]) == dict.fromkeys(COST_KEYS, 0)


COSTS = st.lists(st.floats(0, 100) | st.none(), max_size=8)


@given(COSTS, COSTS)
def test_own_figures_are_those_of_the_forks_own_events(prefix: list[float | None], own: list[float | None]) -> None:
    """Every figure a cost report shows sums per event, so a fork's own figures are the stats of
    its own events alone (its cost to the last of 12 decimals, give or take the two roundings)."""
    root = _events(0, [0.5, *prefix])
    fork = root + _events(len(root), own)
    mine = own_figures(stats(fork), stats(root))
    alone = figures_of(stats(_events(0, own)))  # the same events, as a log of their own
    assert {k: v for k, v in mine.items() if k != "costUsd"} == {k: v for k, v in alone.items() if k != "costUsd"}
    assert mine["costUsd"] == pytest.approx(alone["costUsd"], abs=2e-12)


def test_stats_without_a_figure_are_refused_by_name() -> None:
    """Stats from a server older than the figure (no `unpricedEvents`) are not read as 0."""
    old = {key: value for key, value in stats(_events(0, [0.1])).items() if key != "unpricedEvents"}
    with pytest.raises(ValueError, match="unpricedEvents"):
        figures_of(old)
