"""Spend across sessions (`sessionlog costs`): each session's own figures, and a total that
counts every shared prefix once.

A fork's stats cover its whole log, the prefix it inherits included (docs/repair.md#fork), so
adding a fork's stats to its source's counts that prefix twice. A fork's *own* figures are its
stats less its source's stats at the cut (`fork_seq`), key by key; a session that is no fork
owns all of its figures. The total adds the own figures of the sessions listed, so each event
counts once, in the session that wrote it; a fork listed without its source adds its own events
only. Every figure here is one the stats sum per event (`COST_KEYS`, named as stats name them),
which is what makes the subtraction exact; costs are subtracted and summed exactly and rounded
as stats round them (`usage`). Pure: the caller reads the stats (`client.stats`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sessionlog.core.usage import cost_difference, total_cost

JsonObject = dict[str, Any]
Figures = dict[str, int | float]

COST_KEYS: tuple[str, ...] = (
    "events",
    "modelCalls",
    "inputTokens",
    "outputTokens",
    "cacheReadTokens",
    "cacheWriteTokens",
    "costUsd",
    "unpricedEvents",
)
"""The stats figures a cost report shows per session and in its total, in order: each a sum over
events, so a fork's own part is a difference. `unpricedEvents` not 0 means `costUsd` leaves out
the cost of that many events (no pricing for their model): a lower bound, not the spend."""

COST_KEY = "costUsd"


def figures_of(stats: Mapping[str, Any]) -> Figures:
    """The `COST_KEYS` figures of a stats object. A figure that is missing or no number (stats of
    a server older than the figure) is refused by name, never read as 0."""
    figures: Figures = {}
    for key in COST_KEYS:
        value = stats.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"the stats have no number {key!r} (a server older than this client?)")
        figures[key] = value
    return figures


def own_figures(stats: Mapping[str, Any], inherited: Mapping[str, Any] | None) -> Figures:
    """A session's own figures: its `stats` less `inherited`, its source's stats at the fork's
    cut (None for a session that is no fork: all of its figures are its own)."""
    figures = figures_of(stats)
    if inherited is None:
        return figures
    base = figures_of(inherited)
    return {
        key: cost_difference(value, base[key]) if key == COST_KEY else value - base[key]
        for key, value in figures.items()
    }


def total_figures(rows: Iterable[SessionCost]) -> Figures:
    """The sum of the rows' own figures: every event once, in the session that wrote it."""
    owns = [row.own for row in rows]
    return {
        key: total_cost([own[key] for own in owns]) if key == COST_KEY else sum(own[key] for own in owns)
        for key in COST_KEYS
    }


@dataclass(frozen=True, slots=True)
class SessionCost:
    """One session's row: where it came from, the seq its stats were read at, its route (the
    latest `model` and `provider`, as stats name them), its whole log's figures (`stats`) and the
    part of them its own events make (`own`)."""

    session_id: str
    parent_session_id: str | None
    fork_seq: int | None
    at_seq: int | None
    model: str | None
    provider: str | None
    stats: Figures
    own: Figures

    @classmethod
    def of(
        cls,
        session_id: str,
        parent_session_id: str | None,
        fork_seq: int | None,
        stats: Mapping[str, Any],
        inherited: Mapping[str, Any] | None = None,
        at_seq: int | None = None,
    ) -> SessionCost:
        """The row of a session from its stats and, for a fork, its source's stats at `fork_seq`."""
        if (parent_session_id is None) != (inherited is None) or (parent_session_id is None) != (fork_seq is None):
            raise ValueError("a fork needs its parent, its fork seq and its source's stats at that seq; no other does")
        return cls(
            session_id,
            parent_session_id,
            fork_seq,
            at_seq,
            _text(stats.get("model")),
            _text(stats.get("provider")),
            figures_of(stats),
            own_figures(stats, inherited),
        )

    def to_json(self) -> JsonObject:
        """The row as `sessionlog costs` prints it; `parent` as the session listings show it."""
        parent = None
        if self.parent_session_id is not None:
            parent = {"sessionId": self.parent_session_id, "forkSeq": self.fork_seq}
        return {
            "id": self.session_id,
            "parent": parent,
            "atSeq": self.at_seq,
            "model": self.model,
            "provider": self.provider,
            "stats": self.stats,
            "own": self.own,
        }


def cost_report(rows: list[SessionCost]) -> JsonObject:
    """`{"sessions": [row, ...], "total": figures}`: what `sessionlog costs` prints."""
    return {"sessions": [row.to_json() for row in rows], "total": total_figures(rows)}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
