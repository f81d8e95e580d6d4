"""The session page's data read back from its HTML, joined as the page's script joins it
(app.js `assemble`): the parts' lists appended in order, turns, steps and tool calls placed by
index, and the rows a replace took off marked with the first replace that named them."""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

from sessionlog.core.events import Event

PART = re.compile(r'<script type="application/json" (?:class="sessionlog-part"|id="sessionlog-data")>(.*?)</script>')


def page_parts(html: str) -> list[dict[str, Any]]:
    """Every data element of the page, in document order (the summary last)."""
    return [json.loads(text) for text in PART.findall(html)]


def page_data(html: str) -> dict[str, Any]:
    """Everything the page shows, as one JSON object."""
    parts = page_parts(html)
    data: dict[str, Any] = {key: value for key, value in parts[-1].items() if key != "replacedBy"}
    data.update(requests=[], markers=[], transcript=[], turns={}, steps={}, toolCalls={}, headerPairs={})
    replaced: list[list[int]] = []
    listed = dict.fromkeys(("turns", "steps", "toolCalls"), 0)
    for part in parts:
        for key in ("requests", "markers", "transcript"):
            data[key] += part[key]
        for key in ("turns", "steps", "toolCalls"):
            data[key].update((index, record) for index, record in part[key])
            listed[key] += len(part[key])
        data["headerPairs"].update(part["headerPairs"])
        replaced += part["replacedBy"]
    for key in ("turns", "steps", "toolCalls"):
        assert sorted(data[key]) == list(range(listed[key])), key  # every index exactly once
        data[key] = [data[key][index] for index in range(len(data[key]))]
    rows = {row["seq"]: row for row in data["transcript"]}
    for seq, by in replaced:
        if seq in rows and rows[seq]["replacedBy"] is None:
            rows[seq]["replacedBy"] = by
    return data


class Tracked(Event):
    """An event a weak reference can watch (the log's own events have no slot for one)."""

    __slots__ = ("__weakref__",)


def watched(events: Iterable[Event], refs: list[weakref.ref[Event]]) -> Iterator[Event]:
    """The events as copies whose weak references go into `refs` as they are read: how many of
    them are alive later is how many the reader still holds."""
    for event in events:
        copy = Tracked(**{name: getattr(event, name) for name in Event.__slots__})
        refs.append(weakref.ref(copy))
        yield copy
