"""The timeline projection and the request diff (issue 14) on the scripted session."""

from __future__ import annotations

import pytest

from sessionlog.core.errors import ValidationError
from sessionlog.core.events import Event, NewEvent, Replace
from sessionlog.core.projections.request import request
from sessionlog.core.projections.stats import stats
from sessionlog.core.projections.timeline import TimelineFold, timeline
from sessionlog.core.projections.transcript import transcript
from sessionlog.core.repair import commit_closers, open_turn_closers
from sessionlog.core.request_diff import SurfaceDelta, request_diff
from tests.support.events import priced_and_unpriced
from tests.support.scripted import COMPACTION_REPLACE_SEQ, DROPS, REQUEST_SEQS, SUMMARY_SEQ, committed

from .builders import Log, assistant


def repaired() -> list[Event]:
    events = committed()
    return events + commit_closers(open_turn_closers(events, "interrupted"), len(events), events[-1].time)


def test_stats_and_counts_agree_with_the_stats_projection() -> None:
    events = repaired()
    view = timeline(events)
    assert view["stats"] == stats(events)
    counts = view["counts"]
    assert counts["turns"] == view["stats"]["turns"] == 4
    assert counts["steps"] == view["stats"]["steps"] == 8
    assert counts["toolCalls"] == view["stats"]["toolCalls"] == 6
    assert counts["toolErrors"] == view["stats"]["toolErrors"] == 3
    assert counts["requests"] == view["stats"]["modelCalls"] == len(REQUEST_SEQS)
    assert [r["seq"] for r in view["requests"] if r["kind"] != "summary"] == REQUEST_SEQS
    assert [r["seq"] for r in view["requests"] if r["kind"] == "summary"] == [SUMMARY_SEQ]


def test_usage_context_share_and_cumulative_cost() -> None:
    events = repaired()
    view = timeline(events)
    second = view["requests"][1]["usage"]
    assert second["context"] == 1200 and second["cacheShare"] == pytest.approx(1000 / 1200)
    for req in view["requests"]:
        # The cumulative cost at a request is the stats cost of the prefix ending with it.
        assert req["cumulativeCost"] == pytest.approx(stats(events[: req["seq"] + 1])["costUsd"])
    # The compaction's summariser call has a row too, so every token and cent paid is on one.
    assert sum(r["usage"]["output"] for r in view["requests"]) == view["stats"]["outputTokens"]
    assert sum(r["usage"]["cost"] for r in view["requests"]) == pytest.approx(view["stats"]["costUsd"])
    summary = next(r for r in view["requests"] if r["kind"] == "summary")
    assert summary["drop"] is None and summary["usage"]["output"] == 60


def test_a_request_without_a_price_has_no_cost() -> None:
    """A request whose usage has tokens but no cost (no pricing for the model) has cost None, not
    0: the page shows it as unpriced, where it showed $0.000000, a free model's cost. The
    cumulative cost leaves it out, as `costUsd` does, and the stats count it in `unpricedEvents`."""
    events = [NewEvent.from_json(e).committed(n, 1000 + n) for n, e in enumerate(priced_and_unpriced())]
    view = timeline(events)
    assert [r["usage"]["cost"] for r in view["requests"]] == [0.25, None]
    assert [r["cumulativeCost"] for r in view["requests"]] == [0.25, 0.25]
    assert [r["cumulativeUnpriced"] for r in view["requests"]] == [0, 1]  # a lower bound from the second
    assert (view["stats"]["costUsd"], view["stats"]["unpricedEvents"]) == (0.25, 1)


def test_a_cost_summed_from_its_parts_is_rounded_as_stats_round_it() -> None:
    """A call priced by its parts (no `total`) showed their float sum on the page and in the
    export (0.30000000000000004 for 0.1 + 0.2), where stats round to `COST_DECIMALS`."""
    usage = {"input": 10, "output": 5, "cost": {"input": 0.1, "output": 0.2}}
    message = {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "usage": usage}
    raw = [{"type": "assistant/message", "surfaceOp": "append", "data": {"message": message}}]
    events = [NewEvent.from_json(e).committed(n, 1000 + n) for n, e in enumerate(raw)]
    view = timeline(events)
    assert [r["usage"]["cost"] for r in view["requests"]] == [0.3] == [view["stats"]["costUsd"]]


def test_each_cache_drop_names_its_cause() -> None:
    view = timeline(repaired())
    drops = {r["seq"]: r["drop"] for r in view["requests"] if r["drop"] is not None}
    assert {seq: drop["causes"] for seq, drop in drops.items()} == DROPS
    assert drops[22]["diff"]["header"]["fields"] == ["tools"]
    landing = drops[38]["diff"]["messages"]["replaces"]
    assert [(r["seq"], r["startSeq"], r["endSeq"], r["sourceKind"]) for r in landing] == [
        (COMPACTION_REPLACE_SEQ, 2, 27, "compaction")
    ]
    assert drops[38]["diff"]["header"]["fields"] == []  # the series header changed nothing
    assert drops[49]["diff"]["prefixKept"] is True and drops[49]["gapMs"] == 6000


def test_turns_steps_tool_outcomes_and_markers() -> None:
    view = timeline(repaired())
    assert [t["endKind"] for t in view["turns"]] == ["completed", "completed", "completed", "interrupted"]
    outcomes = {c["callId"]: (c["outcome"], c["errorCode"]) for c in view["toolCalls"]}
    assert outcomes == {
        "c1": ("ok", None),
        "c2": ("error", None),
        "c3": ("ok", None),
        "c4": ("ok", None),
        "c5": ("repaired", "TOOL_OUTCOME_UNKNOWN"),
        "c6": ("repaired", "TOOL_NOT_STARTED"),
    }
    assert view["toolCalls"][0]["durationMs"] == 1000  # from tool/call (seq 6) to the result (seq 7)
    kinds = [(m["seq"], m["kind"]) for m in view["markers"]]
    assert kinds == [(0, "header"), (19, "header"), (31, "compaction"), (32, "replace"), (34, "header"), (54, "repair")]
    assert [m.get("reason") for m in view["markers"] if m["kind"] == "header"] == ["initial", "change", "series"]


def test_request_diff_between_two_steps() -> None:
    events = repaired()
    diff = request_diff(events, 14, 37)
    assert diff["header"]["fields"] == ["tools"]
    assert diff["header"]["logged"] == [19, 34]
    # Nodes 2..12 were on the surface at seq 14; the compaction (32) took them off, and the
    # messages added after 14 but before the compaction (15, 18, 22, 24, 27) never count.
    assert diff["messages"]["replaced"] == [2, 5, 7, 10, 12]
    assert diff["messages"]["added"] == [32, 35]
    assert diff["messages"]["firstChanged"] == 1
    assert diff["prefixKept"] is False
    same = request_diff(events, 40, 46)
    assert same["prefixKept"] is True and same["messages"]["added"] == [43, 46]
    # Appends only: the later request's messages extend the earlier one's.
    early, late = request(events[:41])["request"], request(events[:47])["request"]
    assert late["messages"][: len(early["messages"])] == early["messages"]


def test_composed_deltas_equal_the_direct_diff() -> None:
    events = repaired()
    requests = timeline(events)["requests"]
    for i, a in enumerate(requests):
        for b in requests[i + 1 :]:
            composed = SurfaceDelta()
            for r in requests:
                if a["seq"] < r["seq"] <= b["seq"]:
                    d = r["delta"]
                    composed = composed.merge(
                        SurfaceDelta(d["added"], dict(map(tuple, d["replaced"])), d["firstChanged"], d["headers"])
                    )
            direct = request_diff(events, a["atSeq"], b["atSeq"])["messages"]
            assert composed.added == direct["added"]
            assert sorted(composed.replaced) == direct["replaced"]
            assert composed.first_changed == direct["firstChanged"]


def test_request_diff_refuses_seqs_out_of_order() -> None:
    with pytest.raises(ValidationError, match="request diff"):
        request_diff(repaired(), 20, 10)


def test_a_fold_that_keeps_no_event_gives_the_same_timeline() -> None:
    """`keep_events=False` (the session page's fold) keeps no event and counts what `result`
    reports as it goes: the same timeline, even when its record lists were taken out and
    cleared along the way (the counts do not come from the lists)."""
    events = repaired()
    whole = timeline(events)
    fold = TimelineFold(keep_events=False)
    taken: dict[str, list[object]] = {"requests": [], "markers": []}
    for event in events:
        fold.add(event)
        for name in taken:
            records = getattr(fold, name)
            taken[name] += records
            records.clear()
    out = fold.result()
    assert fold.events == [] and not fold.replacers  # the last request with usage came after the replace
    assert out["stats"] == whole["stats"] and out["counts"] == whole["counts"]
    assert taken == {"requests": whole["requests"], "markers": whole["markers"]}
    assert out["turns"] == whole["turns"] and out["toolCalls"] == whole["toolCalls"]


def _voice_log() -> list[Event]:
    """A voice turn: the answer asks for a, b and c; the user barges in and the answer is cut to
    what was heard, keeping a and dropping b (seq 7); a is answered; the step ends with c never
    answered; repair is not needed (the step ended)."""
    log = Log()
    log.in_step(("a", "ls"), ("b", "rm"), ("c", "cat"))  # 0 .. 4
    log.call(1, 1, "a", "ls")  # 5
    log.result(1, 1, "a")  # 6
    heard = assistant(1, 1, ("a", "ls"), ("c", "cat"), text="I'll", interrupted=True)
    log.add("assistant/message", heard, op=Replace(4, 4), sources=(4,))  # 7
    log.end_step()  # 8
    log.end_turn(kind="aborted")  # 9
    return log.events


def test_tool_calls_a_replace_dropped_or_no_result_answered_are_not_pending() -> None:
    fold = TimelineFold(keep_events=False)
    for event in _voice_log()[:8]:
        fold.add(event)
    # While the step is open, b is dropped (a copy could still bring it back), c pending.
    assert {c["callId"]: c["outcome"] for c in fold.tool_calls} == {"a": "ok", "b": "dropped", "c": "pending"}
    view = timeline(_voice_log())
    outcomes = {c["callId"]: c["outcome"] for c in view["toolCalls"]}
    assert outcomes == {"a": "ok", "b": "dropped", "c": "unanswered"}
    assert view["counts"]["toolCalls"] == 3 and view["counts"]["toolErrors"] == 0


def test_a_replace_interrupted_answer_is_marked_in_the_transcript() -> None:
    rows = {row["seq"]: row for row in transcript(_voice_log())}
    assert rows[7]["kind"] == "replace" and rows[7]["interrupted"] is True
    assert rows[4]["replacedBy"] == 7 and "interrupted" not in rows[4]
    assert all("interrupted" not in row for seq, row in rows.items() if seq != 7)


def test_what_repair_closed_has_no_known_duration() -> None:
    """Repair's closers commit when the repair runs (a resume, a lapse, a fork), not when what
    they close ended, which nobody knows: the page showed a crashed turn and its calls as
    "0.00 s" (the repair ran at once), or as the time until a resume hours later."""
    view = timeline(repaired())
    turn = next(t for t in view["turns"] if t["turn"] == 4)
    assert (turn["endKind"], turn["durationMs"]) == ("interrupted", None)
    assert [s["durationMs"] for s in view["steps"] if s["turn"] == 4] == [None]
    calls = {c["callId"]: (c["outcome"], c["durationMs"]) for c in view["toolCalls"] if c["turn"] == 4}
    assert calls == {"c5": ("repaired", None), "c6": ("repaired", None)}
    assert all(t["durationMs"] is not None for t in view["turns"] if t["turn"] != 4)
