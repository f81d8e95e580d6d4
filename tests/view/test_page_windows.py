"""A long session's page is windowed: it embeds the summary, the first window of each list and
the chart bucketed per N seqs, and the lists are read back a window at a time from its
`WindowStore`, showing what the whole log's projections show."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from sessionlog.view import page
from sessionlog.view.chart import MAX_BUCKETS
from sessionlog.view.windows import PAGE_ROWS, PAGE_TURNS, BadWindow, StoreClosed, WindowStore
from tests.support.scripted import committed
from tests.view.test_page_parts import SESSION, headers_and_compactions, whole_log

DATA = re.compile(r'<script type="application/json"[^>]*>(.*?)</script>', re.DOTALL)


@pytest.fixture
def store() -> Iterator[WindowStore]:
    windows = WindowStore()
    yield windows
    windows.close()


def embedded_bytes(html: str) -> int:
    """Bytes of JSON in the page's data elements: what the browser parses before it draws."""
    return sum(len(text.encode("utf-8")) for text in DATA.findall(html))


def every(store: WindowStore, name: str) -> list[Any]:
    return [item for number in range(store.pages(name)) for item in store.window(name, number)["items"]]


@pytest.mark.parametrize("part_events", [7, 2000])
@pytest.mark.parametrize("log", ["scripted", "many-headers"])
def test_the_windows_join_into_the_whole_logs_lists(
    log: str, part_events: int, store: WindowStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows replaced parts after they were stored, turns left open across parts, a page of
    turns with its steps and tool calls: every window shows what the whole log's page shows."""
    events = committed() if log == "scripted" else headers_and_compactions(90)
    monkeypatch.setattr(page, "PART_EVENTS", part_events)
    html = page.render_page(iter(events), SESSION, store=store)
    want = whole_log(events, SESSION)
    assert every(store, "transcript") == want["transcript"]
    assert every(store, "requests") == want["requests"]
    assert every(store, "drops") == [r for r in want["requests"] if r["drop"] is not None]
    turns = every(store, "turns")
    assert turns == want["turns"]
    steps = [s for n in range(store.pages("turns")) for s in store.window("turns", n)["steps"]]
    calls = [c for n in range(store.pages("turns")) for c in store.window("turns", n)["toolCalls"]]
    assert steps == want["steps"] and calls == want["toolCalls"]
    # The page embeds the first window of each list and the counts the script pages by.
    (summary,) = [json.loads(text) for text in DATA.findall(html)]
    assert summary["transcript"] == want["transcript"][:PAGE_ROWS]
    assert summary["turns"] == want["turns"][:PAGE_TURNS]
    assert summary["windows"] == {
        "transcript": len(want["transcript"]),
        "requests": len(want["requests"]),
        "drops": len([r for r in want["requests"] if r["drop"] is not None]),
        "turns": len(want["turns"]),
    }
    assert summary["stats"] == want["stats"] and summary["session"] == want["session"]


def test_a_long_pages_embedded_data_does_not_grow_with_the_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """A windowed page embeds about the same bytes of JSON for 5,000 events as for 20,000
    (before, every event's row, request and turn: 66 MB for 200,000 events)."""
    sizes = {}
    for turns in (300, 1200):
        events = headers_and_compactions(turns)
        with WindowStore() as store:
            sizes[len(events)] = embedded_bytes(page.render_page(iter(events), SESSION, store=store))
    (short, short_bytes), (long, long_bytes) = sorted(sizes.items())
    assert long > 3.5 * short > 3.5 * 5000
    assert long_bytes < 1.2 * short_bytes and long_bytes < 300_000, sizes
    # What the long page embedded before it was windowed (and a short page still does).
    assert embedded_bytes(page.render_page(iter(events), SESSION)) > 10 * long_bytes


def test_the_chart_keeps_at_most_max_buckets_of_a_long_session(store: WindowStore) -> None:
    events = headers_and_compactions(600)
    html = page.render_page(iter(events), SESSION, store=store)
    chart = json.loads(DATA.findall(html)[0])["chart"]
    points = chart["points"]
    assert len(points) <= MAX_BUCKETS and chart["width"] * MAX_BUCKETS > len(events)
    requests = every(store, "requests")
    assert sum(p["requests"] for p in points) == sum(1 for r in requests if r["usage"] is not None)
    # Each point covers its width of seqs: the largest context, the smallest cache read, the
    # cumulative cost at its end.
    for point in points:
        inside = [r for r in requests if r["usage"] and point["seq"] <= r["seq"] < point["seq"] + chart["width"]]
        assert point["usage"]["context"] == max(r["usage"]["context"] for r in inside)
        assert point["usage"]["cacheRead"] == min(r["usage"]["cacheRead"] for r in inside)
        assert point["cumulativeCost"] == inside[-1]["cumulativeCost"]
    assert {m["kind"] for m in chart["markers"]} >= {"header", "replace"}


def test_a_window_that_is_not_there_is_a_clear_error(store: WindowStore) -> None:
    page.render_page(iter(committed()), SESSION, store=store)
    with pytest.raises(BadWindow, match=r"page 1 is past the last page of transcript, page 0 \(pages count from 0\)"):
        store.window("transcript", 1)
    with pytest.raises(BadWindow, match="list must be one of"):
        store.window("events", 0)
    with pytest.raises(BadWindow, match="must not be past"):
        store.diff(9, 3)
    assert store.find(10**6)["page"] is None and store.find(7)["page"] == 0


def test_a_closed_store_says_so_to_its_readers(store: WindowStore) -> None:
    """A store evicted (closed) while a window was about to be read from it says so, which the
    server answers from a rebuilt store, where the closed database's own error was a 500."""
    page.render_page(iter(committed()), SESSION, store=store)
    store.close()
    for read in (lambda: store.window("transcript", 0), lambda: store.find(7), lambda: store.diff(3, 9)):
        with pytest.raises(StoreClosed):
            read()


def test_a_diff_window_holds_what_the_page_composes_a_diff_from(store: WindowStore) -> None:
    events = committed()
    page.render_page(iter(events), SESSION, store=store)
    want = whole_log(events, SESSION)
    got = store.diff(15, 43)
    assert got["requests"] == [r for r in want["requests"] if 15 <= r["seq"] <= 43]
    named = {seq for r in got["requests"] for seq in r["delta"]["added"]}
    named |= {seq for r in got["requests"] for seq, _ in r["delta"]["replaced"]}
    assert got["rows"] == [row for row in want["transcript"] if row["seq"] in named] and got["rows"]
    ends = [r["headerSeq"] for r in got["requests"] if r["seq"] in (15, 43)]
    assert got["headerPairs"] == {f"{ends[0]}:{ends[1]}": want["headerPairs"][f"{ends[0]}:{ends[1]}"]}
