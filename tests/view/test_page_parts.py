"""The session page is rendered in parts (`render_parts`): what it shows is what the whole log
shows at once, and a render holds a bounded number of the log's events whatever its length."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from bench.view_paint import SyntheticSession
from sessionlog.core.events import Event
from sessionlog.core.headers import header_state
from sessionlog.core.projections.stats import STATS_KEYS, figure_label
from sessionlog.core.projections.timeline import timeline
from sessionlog.core.projections.transcript import transcript
from sessionlog.core.request_diff import header_change
from sessionlog.view import page, windows
from tests.support.pages import Watch, alive, page_data, watched
from tests.support.scripted import committed

SESSION = page.SessionRef("s1", "s0", 3, (("s1-a", 10), ("s1-b", None)))


def whole_log(events: Sequence[Event], session: page.SessionRef) -> dict[str, Any]:
    """What the page showed when it was built from the whole log at once (the projections of
    the whole prefix, cut to the page's fields): the reference the parts must join into."""
    view = timeline(events)
    for name in page.PAGE_FIELDS:
        view[name] = [page._shown(name, record) for record in view[name]]
    states = [header_state(events[m["seq"]], generation=0) for m in view["markers"] if m["kind"] == "header"]
    pairs = {}
    for i, before in enumerate(states):
        later = states[i + 1 :] if len(states) <= page.MAX_HEADER_PAIRS else states[i + 1 : i + 2]
        for after in later:
            pairs[f"{before.seq}:{after.seq}"] = header_change(before, after)
    return {
        "session": {
            "id": session.session_id,
            "parent": session.parent_session_id,
            "forkSeq": session.fork_seq,
            "parentHref": f"{session.parent_session_id}.html",
            "children": [{"id": child, "forkSeq": seq, "href": f"{child}.html"} for child, seq in session.children],
            "events": len(events),
            "atSeq": events[-1].seq,
        },
        **view,
        "labels": {key: figure_label(key) for key in STATS_KEYS},
        "headerPairs": pairs,
        "headerPairsComplete": len(states) <= page.MAX_HEADER_PAIRS,
        "pageRows": windows.PAGE_ROWS,
        "pageTurns": windows.PAGE_TURNS,
        "transcript": [page.row_shown(row) for row in transcript(events)],
    }


def headers_and_compactions(turns: int) -> list[Event]:
    """A valid log with a header change every turn (past MAX_HEADER_PAIRS of them), a
    compaction every 25 turns, tool errors, three requests a turn."""
    session = SyntheticSession()
    session.header(0, "initial")
    session.add("system/message", {"message": {"role": "system", "content": "You are a coding agent."}}, "append")
    for turn in range(1, turns + 1):
        session.header(turn * 1000, "change")
        session.turn(turn)
        if turn % 25 == 0:
            session.compaction()
            session.header(turn * 1000, "series")
    return session.events


@pytest.mark.parametrize("part_events", [1, 7, 2000])
@pytest.mark.parametrize("log", ["scripted", "many-headers"])
def test_the_parts_join_into_the_whole_logs_page(log: str, part_events: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Turns, steps and tool calls left open across parts (the script's turn 4 never ends),
    rows replaced parts after they were listed, header pairs past MAX_HEADER_PAIRS: the page
    shows what the whole log's projections say, however the log is cut into parts."""
    events = committed() if log == "scripted" else headers_and_compactions(90)
    monkeypatch.setattr(page, "PART_EVENTS", part_events)
    html = page.render_page(iter(events), SESSION)
    want = whole_log(events, SESSION)
    assert page_data(html) == want
    assert any(row["replacedBy"] is not None for row in want["transcript"])
    assert want["headerPairsComplete"] is (log == "scripted")
    assert html.count('class="sessionlog-part"') == -(-len(events) // part_events)


def test_a_render_holds_a_bounded_part_of_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between two parts the renderer holds no more than one part's events, whatever the
    log's length: the page of a 200,000-event session was built from the whole log at once
    (about 1.2 GB in the server) where its parts can be written out as they come."""
    monkeypatch.setattr(page, "PART_EVENTS", 100)
    events = headers_and_compactions(120)
    watches: list[Watch] = []
    held = []
    for _ in page.render_parts(watched(events, watches), SESSION):
        held.append(alive(watches))
    assert len(events) > 2000 and len(held) > 20
    # The part's last event is still the loop's; a replace may wait for the next request's
    # cache-drop diff; nothing else stays.
    assert max(held) <= 3, held


def test_bidirectional_controls_are_shown_as_code_points_not_obeyed() -> None:
    """U+202E and its kind reorder what is shown after them: an agent's `evil\\u202etxt.exe`
    reads as `evilexe.txt` in an audit view (Trojan Source). The page shows them by code point;
    the rest of the text is as written."""
    shown = page.preview({"role": "assistant", "content": "wrote evil\u202etxt.exe and \u2067x\u2069"})
    assert shown == "wrote evil⟨U+202E⟩txt.exe and ⟨U+2067⟩x⟨U+2069⟩"
    assert page.preview({"role": "user", "content": "مرحبا hello"}) == "مرحبا hello"  # RTL text itself stays
