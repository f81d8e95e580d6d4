"""The session page's data read back from its HTML, joined as the page's script joins it
(app.js `assemble`): the parts' lists appended in order, turns, steps and tool calls placed by
index, and the rows a replace took off marked with the first replace that named them."""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import fields
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


Watch = tuple[int, int]
"""A watched copy of an event: its address and its seq."""


def watched(events: Iterable[Event], watches: list[Watch]) -> Iterator[Event]:
    """The events as copies, each noted in `watches` as it is read: how many of them are alive
    later (`alive`) is how many the reader still holds. Noted by address and seq, not by weak
    reference: an event has no slot for one, and in the compiled build (mypyc) no subclass of
    it can add one."""
    for event in events:
        copy = Event(**{field.name: getattr(event, field.name) for field in fields(Event)})
        watches.append((id(copy), copy.seq))
        yield copy


def alive(watches: list[Watch]) -> int:
    """How many watched copies are still alive: an event at the same address with the same seq
    (an address freed and reused holds another event, of another seq)."""
    gc.collect()
    live = {(id(obj), obj.seq) for obj in gc.get_objects() if type(obj) is Event}
    return sum(1 for watch in watches if watch in live)
