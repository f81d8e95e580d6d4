"""Unit tests of the pure core pieces: projection rule, structure allowances, headers, repair,
checkpoints, transcript and request shapes, stats rules."""

from __future__ import annotations

import pytest

from sessionlog.core.errors import ValidationError
from sessionlog.core.events import APPEND, Event, NewEvent, Replace
from sessionlog.core.fold import SessionFold
from sessionlog.core.headers import HeaderState, check_header, decide_header, fold_headers
from sessionlog.core.messages import empty_system_head, project_message
from sessionlog.core.projections.model_history import model_history
from sessionlog.core.projections.request import request
from sessionlog.core.projections.stats import stats
from sessionlog.core.projections.transcript import transcript
from sessionlog.core.repair import check_writer_turn_end, commit_closers, open_turn_closers, repair_event_id
from sessionlog.core.snapshot import decode_snapshot, encode_snapshot
from sessionlog.core.structure import fold_structure
from sessionlog.core.surface import fold_surface

from .builders import Log, assistant, fold_state, result, user

# --------------------------------------------------------------- projection rule


def _event(type: str, data: dict[str, object], op: object = APPEND) -> Event:
    return Event(seq=0, time=0, type=type, data=data, surface_op=op)  # type: ignore[arg-type]


@pytest.mark.parametrize("content", ["", []])
def test_empty_system_message_projects_to_nothing(content: object) -> None:
    assert project_message(_event("system/message", {"message": {"role": "system", "content": content}})) is None


def test_surface_events_project_their_message() -> None:
    message = {"role": "user", "content": "hi"}
    assert project_message(_event("user/message", {"message": message, "source": {"kind": "user"}})) is message
    assert project_message(_event("system/message", {"message": {"role": "system", "content": "p"}})) is not None
    empty_assistant = {"role": "assistant", "content": []}
    assert project_message(_event("assistant/message", {"turn": 1, "step": 1, "message": empty_assistant})) is not None
    assert project_message(_event("turn/start", {"turn": 1}, None)) is None


def test_empty_system_head_is_fresh_and_projects_to_nothing() -> None:
    a, b = empty_system_head(), empty_system_head()
    assert a.data is not b.data
    assert project_message(a.committed(0, 0)) is None


# --------------------------------------------------------------- structure allowances


def test_prompts_may_sit_outside_turns_and_before_steps() -> None:
    log = Log()
    log.head()
    log.say("before the turn")
    log.turn(1)
    log.say("after turn/start, before step/start")
    log.add("user/message", user("named", turn=1), op=APPEND)
    log.step(1, 1)
    log.add("user/message", user("in step", turn=1, step=1), op=APPEND)
    log.reply(1, 1)
    log.end_step(1, 1)
    log.end_turn(1)
    log.add("pi/label", {"turn": 99, "label": "x"}, ignorable=True)  # unknown types are not checked
    log.add("request/context", {"provider": "p", "model": "m", "turn": 42})  # request/* anywhere
    log.say("between turns")
    assert log.fold.open_turn is None


def test_replacements_are_not_checked_against_the_open_turn() -> None:
    log = Log()
    log.in_step(("c1", "tool"))
    log.result(1, 1, "c1", "a very long output")
    log.end_step(1, 1)
    log.end_turn(1)
    log.turn(2)
    trimmed = result(1, 1, "c1", "[trimmed]")
    log.add("tool/result", trimmed, op=Replace(5, 5), sources=(5,))
    assert log.fold.model_history()[-1]["content"] == [{"type": "text", "text": "[trimmed]"}]


def test_step_end_with_unrun_calls_is_allowed_and_forgets_them() -> None:
    log = Log()
    log.in_step(("c1", "tool"))
    log.end_step(1, 1)
    assert log.fold.pending_calls == []
    log.end_turn(1, "aborted")
    assert log.fold.closers("interrupted") == []


def test_reserved_turn_end_kinds_are_for_repair_only() -> None:
    for kind in ("interrupted", "forked"):
        with pytest.raises(ValidationError) as info:
            check_writer_turn_end(NewEvent("turn/end", {"turn": 1, "reason": {"kind": kind}}, event_id="mine"))
        assert info.value.reason == "RESERVED_TURN_END_KIND"
    check_writer_turn_end(NewEvent("turn/end", {"turn": 1, "reason": {"kind": "completed"}}))
    # a re-imported log carries repair's own eventIds: written by repair once, so accepted
    check_writer_turn_end(NewEvent("turn/end", {"turn": 1, "reason": {"kind": "forked"}}, event_id="repair-forked-1"))
    forked = {"turn": 1, "reason": {"kind": "forked"}}
    with pytest.raises(ValidationError):  # repair's id for another kind is no pass
        check_writer_turn_end(NewEvent("turn/end", forked, event_id="repair-interrupted-1"))


def test_first_surface_needs_system_head() -> None:
    fold = SessionFold()
    prompt = NewEvent("user/message", user("hi"), surface_op=APPEND)
    assert fold.first_surface_needs_system_head(prompt)
    assert not fold.first_surface_needs_system_head(NewEvent("turn/start", {"turn": 1}))
    assert not fold.first_surface_needs_system_head(empty_system_head())
    turn = NewEvent("turn/start", {"turn": 1})
    assert fold.batch_needs_system_head([turn, prompt])  # the batch's first surface event decides
    assert not fold.batch_needs_system_head([turn, empty_system_head(), prompt])
    assert not fold.batch_needs_system_head([turn])
    fold.apply(empty_system_head().committed(0, 1))
    assert fold.has_system_head
    assert not fold.first_surface_needs_system_head(prompt)
    assert not fold.batch_needs_system_head([prompt])


# --------------------------------------------------------------- headers


def _state(header: dict[str, object], generation: int = 0) -> HeaderState:
    from sessionlog.core import jsonvalue

    return HeaderState(3, header, generation, "initial", False, jsonvalue.canonical(header))


H1 = {"config": {"model": "m1", "maxTokens": 10}, "tools": [{"name": "ls"}]}
H2 = {"config": {"model": "m2", "maxTokens": 10}, "tools": [{"name": "ls"}], "adapterDefaults": {"maxTokens": True}}


def test_decide_header_branches() -> None:
    initial = decide_header(None, H1, first_of_lease=False, generation=4)
    assert (initial.reason, initial.starts_series, initial.data_to_append) == (
        "initial",
        False,
        {"header": H1, "reason": "initial"},
    )
    latest = _state(H1, generation=0)
    resume = decide_header(latest, H1, first_of_lease=True, generation=0)
    assert (resume.reason, resume.changed_fields, resume.starts_series) == ("resume", [], False)
    resume_moved = decide_header(latest, H2, first_of_lease=True, generation=1)
    assert resume_moved.reason == "resume"
    assert resume_moved.changed_fields == ["model", "adapterDefaults"]
    assert resume_moved.data_to_append == {"header": H2, "reason": "resume", "startsSeries": True}
    change = decide_header(latest, H2, first_of_lease=False, generation=0)
    assert (change.reason, change.data_to_append) == ("change", {"header": H2, "reason": "change"})
    series = decide_header(latest, dict(H1), first_of_lease=False, generation=2)
    assert (series.reason, series.starts_series, series.data_to_append) == (
        "series",
        True,
        {"header": H1, "reason": "series"},
    )
    nothing = decide_header(latest, H1, first_of_lease=False, generation=0)
    assert (nothing.reason, nothing.data_to_append) == (None, None)


def test_header_equality_is_canonical() -> None:
    reordered = {"tools": [{"name": "ls"}], "config": {"maxTokens": 10, "model": "m1"}}
    assert decide_header(_state(H1), reordered, first_of_lease=False, generation=0).reason is None
    check_header(reordered)


def test_fold_decisions_round_trip_through_the_log() -> None:
    log = Log()
    log.head()
    for first, header in [(True, H1), (False, H1), (False, H2), (True, H2)]:
        decision = log.fold.decide_header(header, first_of_lease=first)
        if decision.data_to_append is not None:
            log.add("request/header", decision.data_to_append)
    reasons = [e.data["reason"] for e in log.events if e.type == "request/header"]
    assert reasons == ["initial", "change", "resume"]
    latest = fold_headers(log.events)
    assert latest is not None and latest == log.fold.latest_header


# --------------------------------------------------------------- repair


def test_repair_closes_calls_in_transcript_order() -> None:
    log = Log()
    log.in_step(("a", "read"), ("b", "write"), ("c", "ls"))
    log.call(1, 1, "b", "write")
    log.result(1, 1, "c")
    closers = log.fold.closers("interrupted")
    assert [e.type for e in closers] == ["tool/result", "tool/result", "step/end", "turn/end"]
    first, second = closers[0], closers[1]
    assert first.data["error"]["code"] == "TOOL_NOT_STARTED" and first.source_event_seqs == ()
    assert second.data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN" and second.source_event_seqs == (5,)
    assert "Do not retry blindly." in second.data["message"]["content"][0]["text"]
    assert "Retry it if it is still needed." in first.data["message"]["content"][0]["text"]
    assert first.data["message"]["timestamp"] == log.fold.repair_time == log.events[-1].time
    assert closers[-1].data == {"turn": 1, "reason": {"kind": "interrupted"}}
    assert [e.event_id for e in closers] == [
        "repair-interrupted-1-1-result-a",
        "repair-interrupted-1-1-result-b",
        "repair-interrupted-1-1-step-end",
        "repair-interrupted-1-turn-end",
    ]
    assert open_turn_closers(log.events, "interrupted") == closers
    assert open_turn_closers(log.events[2:], "interrupted") == closers  # a window from turn/start
    for event in commit_closers(closers, log.fold.next_seq, log.fold.repair_time):
        log.fold.apply(event)
    assert log.fold.open_turn is None and log.fold.closers("interrupted") == []


def test_repair_follows_the_calls_a_replace_restates_or_drops() -> None:
    # A voice answer cut to what was heard keeps call a and drops b; a compaction from before
    # the turn then takes the cut answer too, keeping a again. Only what the model still sees
    # is answered, by the fold, by a whole-log scan, by a window from turn/start (a fork's),
    # and after a snapshot round trip.
    log = Log()
    log.in_step(("a", "read"), ("b", "write"))
    log.call(1, 1, "a", "read")
    heard = assistant(1, 1, ("a", "read"), text="I'll", interrupted=True)
    log.add("assistant/message", heard, op=Replace(4, 4), sources=(4,))
    assert [c.call_id for c in log.fold.pending_calls] == ["a"]
    summary = assistant(1, 1, ("a", "read"), text="[summary]")
    log.add("assistant/message", summary, op=Replace(1, 6), sources=(1, 6))
    closers = log.fold.closers("interrupted")
    assert [(e.type, e.data.get("message", {}).get("toolCallId")) for e in closers] == [
        ("tool/result", "a"),
        ("step/end", None),
        ("turn/end", None),
    ]
    assert open_turn_closers(log.events, "interrupted") == closers
    assert open_turn_closers(log.events[2:], "interrupted") == closers  # a window from turn/start
    restored = SessionFold.from_snapshot(decode_snapshot(encode_snapshot(log.fold.snapshot())))
    assert restored.closers("interrupted") == closers
    log.add("user/message", user("[gone]"), op=Replace(7, 7), sources=(7,))  # drops a as well
    assert [e.type for e in log.fold.closers("interrupted")] == ["step/end", "turn/end"]
    assert open_turn_closers(log.events[2:], "interrupted") == log.fold.closers("interrupted")
    # a model-only copy of the first answer (as after a compaction) shows a and b again
    copy = assistant(1, 1, ("a", "read"), ("b", "write"), source={"kind": "copy"})
    log.add("assistant/message", copy, op=APPEND, sources=(4,))
    closers = log.fold.closers("interrupted")
    assert [e.data.get("message", {}).get("toolCallId") for e in closers] == ["a", "b", None, None]
    assert open_turn_closers(log.events[2:], "interrupted") == closers


def test_fork_closers_say_the_parent_may_have_finished() -> None:
    log = Log()
    log.in_step(("a", "deploy"))
    log.call(1, 1, "a", "deploy")
    (tool_error, _, turn_end) = log.fold.closers("forked")
    assert "parent session may have completed it" in tool_error.data["message"]["content"][0]["text"]
    assert turn_end.data["reason"] == {"kind": "forked"}


def test_open_turn_without_step_gets_only_turn_end() -> None:
    log = Log()
    log.head()
    log.turn(1)
    assert [e.type for e in log.fold.closers("interrupted")] == ["turn/end"]
    assert open_turn_closers([], "interrupted") == []


def test_long_call_ids_are_hashed_into_event_ids() -> None:
    event_id = repair_event_id("interrupted", 1, "1", "result", "x" * 200)
    assert len(event_id) <= 128 and event_id.startswith("repair-interrupted-1-1-result-sha256-")


# --------------------------------------------------------------- checkpoints


def test_first_changed_message_follows_replaces_and_their_rollback() -> None:
    log = Log()
    log.head()  # node 0 is empty: message indexes are one less than surface positions
    for n in range(1, 6):
        log.say(f"u{n}")
    assert log.fold.first_changed_message(0) is None  # no replace since
    log.add("user/message", user("u4 heard"), op=Replace(4, 4), sources=(4,))
    log.add("user/message", user("u2 heard"), op=Replace(2, 2), sources=(2,))
    assert (log.fold.first_changed_message(1), log.fold.first_changed_message(0)) == (1, 1)
    mark = log.fold.checkpoint()
    log.fold.apply(log.make("user/message", user("u1 heard"), op=Replace(1, 1), sources=(1,)))
    assert log.fold.first_changed_message(2) == 0
    log.fold.rollback(mark)
    assert log.fold.first_changed_message(1) == 1 and log.fold.first_changed_message(2) is None
    restored = SessionFold.from_snapshot(decode_snapshot(encode_snapshot(log.fold.snapshot())))
    assert [restored.first_changed_message(g) for g in range(3)] == [1, 1, None]  # kept in the snapshot


def test_nested_checkpoints_roll_back_and_release() -> None:
    log = Log()
    log.in_step(("a", "t"))
    before = fold_state(log.fold)
    outer = log.fold.checkpoint()
    log.call(1, 1, "a", "t")
    log.result(1, 1, "a")
    middle = fold_state(log.fold)
    inner = log.fold.checkpoint()
    log.add("user/message", user("summary", source={"kind": "compaction"}), op=Replace(1, 6), sources=(1, 4, 6))
    log.end_step()
    log.fold.rollback(inner)
    assert fold_state(log.fold) == middle
    log.fold.rollback(outer)
    assert fold_state(log.fold) == before
    with pytest.raises(ValueError):
        log.fold.rollback(inner)
    mark = log.fold.checkpoint()
    log.fold.release(mark)
    assert log.fold._journal == []


def test_rollback_to_an_older_mark_undoes_newer_batches() -> None:
    log = Log()
    log.head()
    before = fold_state(log.fold)
    first = log.fold.checkpoint()
    log.say("a")
    second = log.fold.checkpoint()
    log.say("b")
    log.fold.rollback(first)
    assert fold_state(log.fold) == before
    with pytest.raises(ValueError):
        log.fold.release(second)


# --------------------------------------------------------------- projections


def _compacted_log() -> Log:
    log = Log()
    log.head("prompt")  # 0
    log.say("one")  # 1
    log.turn(1)  # 2
    log.step(1, 1)  # 3
    log.reply(1, 1, ("a", "t"))  # 4
    log.result(1, 1, "a")  # 5
    log.end_step()  # 6
    log.end_turn()  # 7
    log.add("compaction/summary", {"summary": "s", "usage": {"input": 7, "output": 3, "cost": {"total": 0.5}}})  # 8
    log.add("user/message", user("summary", source={"kind": "compaction"}), op=Replace(1, 5), sources=(1, 4, 5))  # 9
    log.add("user/message", user("one", source={"kind": "copy"}), op=APPEND, sources=(1,))  # 10
    return log


def test_transcript_rows() -> None:
    log = _compacted_log()
    rows = transcript(log.events)
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5, 6, 7, 8, 9]  # no system/message, no copy
    by_seq = {r["seq"]: r for r in rows}
    assert by_seq[1] == {
        "seq": 1,
        "time": 1001,
        "kind": "message",
        "type": "user/message",
        "data": {"role": "user", "content": "one"},
        "replacedBy": 9,
    }
    assert by_seq[2]["kind"] == "event" and by_seq[2]["replacedBy"] is None
    marker = by_seq[9]
    assert (marker["kind"], marker["type"], marker["eventType"], marker["replaces"]) == (
        "replace",
        "surface/replace",
        "user/message",
        [1, 4, 5],
    )


def test_model_history_request_and_stats_of_a_compacted_log() -> None:
    log = _compacted_log()
    history = model_history(log.events)
    assert [m["content"] for m in history] == ["prompt", "summary", "one"]
    assert history == log.fold.model_history()
    assert fold_surface(log.events).nodes == [0, 9, 10]
    view = request(log.events)
    assert view["request"] == {"messages": history} and view["headerSeq"] is None
    assert view == log.fold.request()
    s = stats(log.events)
    assert s == log.fold.stats()
    assert (s["compactions"], s["replaces"], s["messages"], s["toolCalls"], s["costUsd"]) == (1, 1, 3, 1, 0.5)


def test_request_includes_header_config_and_tools() -> None:
    log = Log()
    log.head("prompt")
    log.add("request/header", {"header": H1, "reason": "initial"})
    body = request(log.events)["request"]
    assert body == {
        "model": "m1",
        "maxTokens": 10,
        "messages": [{"role": "system", "content": "prompt"}],
        "tools": H1["tools"],
    }


def test_stats_sources() -> None:
    log = Log()
    log.head()
    log.add("pi/model_change", {"provider": "anthropic", "modelId": "claude"}, ignorable=True)
    log.add("pi/thinking_level_change", {"thinkingLevel": "high"}, ignorable=True)
    log.add(
        "pi/usage",
        {"usage": {"input": 1, "output": 2, "cacheRead": 3, "cacheWrite": 4, "cost": {"input": 0.25}}},
        ignorable=True,
    )
    s = log.fold.stats()
    assert (s["provider"], s["model"], s["thinkingLevel"]) == ("anthropic", "claude", "high")
    assert (s["inputTokens"], s["outputTokens"], s["cacheReadTokens"], s["cacheWriteTokens"], s["costUsd"]) == (
        1,
        2,
        3,
        4,
        0.25,
    )
    log.add("request/header", {"header": {"config": {"model": "m1", "reasoningEffort": "low"}}, "reason": "initial"})
    log.turn(1)
    log.step(1, 1)
    message = {"role": "assistant", "content": [], "provider": "openai", "model": "gpt", "usage": {"input": 10}}
    log.add("assistant/message", {"turn": 1, "step": 1, "message": message}, op=APPEND)
    log.add("assistant/attempt", {"turn": 1, "step": 1, "usage": {"output": 5}})
    s = log.fold.stats()
    assert (s["provider"], s["model"], s["thinkingLevel"], s["inputTokens"], s["outputTokens"]) == (
        "openai",
        "gpt",
        "low",
        11,
        7,
    )
    assert s == stats(log.events)
    assert list(s) == [
        "events", "model", "provider", "thinkingLevel", "messages", "turns", "modelCalls", "steps", "toolCalls",
        "toolErrors", "compactions", "replaces", "inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens",
        "costUsd", "unpricedEvents",
    ]  # fmt: skip
    assert s["unpricedEvents"] == 2  # the message's and the attempt's usage name no cost


def test_replay_trusting_equals_validating() -> None:
    log = _compacted_log()
    trusted = SessionFold.replay(log.events, validate=False)
    checked = SessionFold.replay(log.events)
    assert fold_state(trusted) == fold_state(checked) == fold_state(log.fold)


def test_pi_style_copies_are_exempt_from_turn_structure() -> None:
    """Pi import: replace everything after node 0 by a summary, then re-append model-only copies
    of kept entries (assistant messages with tool calls, tool results) outside any turn."""
    log = Log()
    log.in_step(("a", "t"))  # 0 head, 1 prompt, 2 turn, 3 step, 4 assistant
    log.result(1, 1, "a")  # 5
    log.end_step()  # 6
    log.end_turn()  # 7
    summary = user("summary", source={"kind": "compaction"})
    log.add("user/message", summary, op=Replace(1, 5), sources=(1, 4, 5))  # 8
    for original in (log.events[4], log.events[5]):
        log.add(original.type, dict(original.data, source={"kind": "copy"}), op=APPEND, sources=(original.seq,))
    assert [m["role"] for m in log.fold.model_history()] == ["user", "assistant", "toolResult"]
    s = log.fold.stats()
    assert (s["toolCalls"], s["messages"], s["compactions"]) == (1, 3, 1)
    assert [r["seq"] for r in transcript(log.events)] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_release_trims_the_journal_and_end_seed_is_tracked() -> None:
    log = Log()
    log.head()
    first = log.fold.checkpoint()
    log.say("a")
    second = log.fold.checkpoint()
    log.say("b")
    log.add("session/end-seed", {})
    assert log.fold.ends_with_end_seed and log.fold.last_event_type == "session/end-seed"
    log.fold.release(first)
    assert len(log.fold._journal) == 1  # only the second batch's surface change is journalled
    log.fold.rollback(second)
    assert not log.fold.ends_with_end_seed and log.fold.next_seq == 2
    assert log.fold._journal == [] and log.fold._marks == []


def test_every_known_type_is_a_well_formed_name() -> None:
    # check_type lets vocabulary names through without matching the pattern; that holds only
    # while every one of them matches it.
    from sessionlog.core.validate import _TYPE_PATTERN
    from sessionlog.core.vocabulary import KNOWN_TYPES

    assert all(_TYPE_PATTERN.fullmatch(name) for name in KNOWN_TYPES)


@pytest.mark.parametrize("name", ["test/x\n", "x\n", "pi/message\n"])
def test_a_type_name_with_a_trailing_line_break_is_refused(name: str) -> None:
    # `$` matches before a final line break: `test/x\n` went in as a type of its own, shown
    # as `test/x` by every reader that prints it. An importer's type names follow the same rule.
    from sessionlog.core.formats.pi.importer import FALLBACK_ENTRY_TYPE, pi_event_type
    from sessionlog.core.limits import DEFAULT_LIMITS
    from sessionlog.core.validate import check_type

    with pytest.raises(ValidationError) as refused:
        check_type(NewEvent(name, ignorable=True), DEFAULT_LIMITS)
    assert refused.value.reason == "BAD_TYPE"
    assert pi_event_type(name.rpartition("/")[2]) == FALLBACK_ENTRY_TYPE


def test_a_call_two_copies_restate_stays_until_both_are_replaced() -> None:
    # The answer is cut to nothing heard (call a dropped), then two model-only copies restate it
    # (as a compaction's kept entries re-appended twice). A replace of the first copy leaves the
    # second on the surface: the model still sees a, so repair answers it and so may the writer,
    # in the fold, in a scan of the log, and after a snapshot round trip.
    log = Log()
    log.in_step(("a", "ls"))
    log.add("assistant/message", assistant(1, 1, text="I'll", interrupted=True), op=Replace(4, 4), sources=(4,))
    copy = assistant(1, 1, ("a", "ls"), source={"kind": "copy"})
    log.add("assistant/message", copy, op=APPEND, sources=(4,))
    log.add("assistant/message", copy, op=APPEND, sources=(4,))
    log.add("user/message", user("[gone]"), op=Replace(6, 6), sources=(6,))
    assert [c.call_id for c in log.fold.pending_calls] == ["a"]
    assert open_turn_closers(log.events[2:], "interrupted") == log.fold.closers("interrupted")
    restored = SessionFold.from_snapshot(decode_snapshot(encode_snapshot(log.fold.snapshot())))
    assert restored.closers("interrupted") == log.fold.closers("interrupted")
    # the replace of the second copy drops a at last: a result would stand without its call
    log.add("user/message", user("[gone too]"), op=Replace(7, 7), sources=(7,))
    assert log.fold.pending_calls == []
    error = log.reject("TOOL_RESULT_CALL_DROPPED", "tool/result", result(1, 1, "a"), op=APPEND)
    assert error.metadata["replaced_by"] == "9"


def test_a_fold_from_a_snapshot_still_refuses_to_leave_a_result_without_its_call() -> None:
    # The snapshot keeps which calls the nodes carry and answer (fold version 7).
    log = Log()
    log.in_step(("a", "ls"))
    log.result(1, 1, "a")
    restored = SessionFold.from_snapshot(decode_snapshot(encode_snapshot(log.fold.snapshot())))
    cut = log.make("assistant/message", assistant(1, 1, interrupted=True), op=Replace(4, 4), sources=(4,))
    with pytest.raises(ValidationError) as refused:
        restored.check(cut)
    assert refused.value.reason == "REPLACE_ORPHANS_TOOL_RESULT"


def _two_steps_reusing_a(log: Log, *, first_answered: bool = True) -> None:
    """Step 1 calls a (answered or not), step 2 calls a again and answers it: seqs 4 (step 1's
    message), [5 its result], then step 2's message and its result at the last two seqs."""
    log.in_step(("a", "ls"))
    if first_answered:
        log.result(1, 1, "a")
    log.end_step(1, 1)
    log.step(1, 2)
    log.reply(1, 2, ("a", "ls"))
    log.result(1, 2, "a")


@pytest.mark.parametrize("first_answered", [True, False])
def test_a_replace_dropping_a_later_steps_call_is_refused_while_an_earlier_a_stands(first_answered: bool) -> None:
    # Call ids are unique within a step only. Step 2's call a is cut from its message while
    # step 1's a stays on the surface: step 2's result would stand with no call of its own (or
    # answer step 1's unanswered a), which the id alone did not tell apart. Nothing changes.
    log = Log()
    _two_steps_reusing_a(log, first_answered=first_answered)
    second, its_result = log.events[-2].seq, log.events[-1].seq
    cut = assistant(1, 2, text="I'll", interrupted=True)
    error = log.reject(
        "REPLACE_ORPHANS_TOOL_RESULT", "assistant/message", cut, op=Replace(second, second), sources=(second,)
    )
    assert error.metadata["result_seq"] == str(its_result)
    # restating the block, or covering the result too, still goes in
    kept = assistant(1, 2, ("a", "ls"), interrupted=True)
    restated = log.add("assistant/message", kept, op=Replace(second, second), sources=(second,)).seq
    log.add("assistant/message", cut, op=Replace(restated, its_result), sources=(restated, its_result))


def test_a_restated_earlier_call_does_not_keep_a_later_call_of_the_same_id() -> None:
    # Step 1's answer is replaced keeping its call a; step 2's a is then cut from its message.
    # The restatement of step 1's a does not carry step 2's a: that call is dropped, and a
    # result for it is refused (it would answer step 1's a in the model history).
    log = Log()
    log.in_step(("a", "ls"))
    log.result(1, 1, "a")
    log.end_step(1, 1)
    log.step(1, 2)
    log.reply(1, 2, ("a", "ls"))  # seq 8
    log.add("assistant/message", assistant(1, 1, ("a", "ls"), interrupted=True), op=Replace(4, 4), sources=(4,))
    log.add("assistant/message", assistant(1, 2, text="I'll", interrupted=True), op=Replace(8, 8), sources=(8,))
    assert log.fold.pending_calls == []
    error = log.reject("TOOL_RESULT_CALL_DROPPED", "tool/result", result(1, 2, "a"), op=APPEND)
    assert error.metadata["replaced_by"] == "10"
    assert fold_structure(log.events, validate=False).pending_calls == []


def test_a_summary_of_a_later_steps_result_is_refused_while_an_earlier_a_is_answered() -> None:
    # Step 1's a and its result stay; step 2's result alone is summarised: step 2's a would
    # stand with no result, though a result of id a (step 1's) is still on the surface.
    log = Log()
    _two_steps_reusing_a(log)
    its_result = log.events[-1].seq
    summary = user("a listed the files")
    error = log.reject(
        "REPLACE_DROPS_TOOL_RESULT", "user/message", summary, op=Replace(its_result, its_result), sources=(its_result,)
    )
    assert error.metadata["result_seq"] == str(its_result) and f"opened at seq {its_result - 1}" in error.message


def test_a_copy_of_an_earlier_steps_message_does_not_carry_a_later_call_of_the_same_id() -> None:
    # A model-only copy of step 1's message (citing seq 4) is appended while step 2's a is
    # open; step 2's a is then cut from its message. The copy restates step 1's a, not step
    # 2's: step 2's a is dropped, so crash repair leaves it alone and a result for it is refused.
    log = Log()
    log.in_step(("a", "ls"))
    log.result(1, 1, "a")
    log.end_step(1, 1)
    log.step(1, 2)
    log.reply(1, 2, ("a", "ls"))  # seq 8
    log.add("assistant/message", assistant(1, 1, ("a", "ls"), source={"kind": "copy"}), op=APPEND, sources=(4,))
    log.add("assistant/message", assistant(1, 2, text="I'll", interrupted=True), op=Replace(8, 8), sources=(8,))
    assert log.fold.pending_calls == []
    log.reject("TOOL_RESULT_CALL_DROPPED", "tool/result", result(1, 2, "a"), op=APPEND)
    assert open_turn_closers(log.events[2:], "interrupted") == log.fold.closers("interrupted")
    restored = SessionFold.from_snapshot(decode_snapshot(encode_snapshot(log.fold.snapshot())))
    assert restored.pending_calls == []


def _step_two_reusing_a(log: Log) -> int:
    """Step 1 calls a and answers it (seqs 4, 5); step 2 calls a again (seq 8), still open.
    Returns step 2's message seq."""
    log.in_step(("a", "ls"))
    log.result(1, 1, "a")
    log.end_step(1, 1)
    log.step(1, 2)
    return log.reply(1, 2, ("a", "ls")).seq


def _copy_of(log: Log, *sources: int) -> int:
    """Append a model-only copy of an assistant message calling a, citing `sources`."""
    copy = assistant(1, 2, ("a", "ls"), source={"kind": "copy"})
    return log.add("assistant/message", copy, op=APPEND, sources=sources).seq


@pytest.mark.parametrize("cited", [(8,), (4, 8)], ids=["step-2", "both-steps"])
def test_a_copy_citing_the_later_steps_message_carries_its_call(cited: tuple[int, ...]) -> None:
    # A copy that cites step 2's message (alone, or with step 1's) restates step 2's a: when step
    # 2's message is cut, the copy still shows the call, so repair answers it and so may the writer.
    log = Log()
    second = _step_two_reusing_a(log)
    _copy_of(log, *cited)
    log.add(
        "assistant/message",
        assistant(1, 2, text="I'll", interrupted=True),
        op=Replace(second, second),
        sources=(second,),
    )
    assert [(c.call_id, c.on_surface) for c in log.fold.pending_calls] == [("a", True)]
    closers = log.fold.closers("interrupted")
    assert [e.data.get("message", {}).get("toolCallId") for e in closers] == ["a", None, None]
    assert open_turn_closers(log.events[2:], "interrupted") == closers
    log.add("tool/result", result(1, 2, "a"), op=APPEND)
    assert log.fold.pending_calls == []


def test_a_copy_citing_nothing_is_refused_while_a_call_of_its_id_is_open() -> None:
    # A copy restates only what it cites; one that cites nothing is refused at the door
    # (COPY_SOURCES_EMPTY), so no copy restates a call by its id alone. Nothing changes.
    log = Log()
    _step_two_reusing_a(log)
    log.reject(
        "COPY_SOURCES_EMPTY", "assistant/message", assistant(1, 2, ("a", "ls"), source={"kind": "copy"}), op=APPEND
    )
    assert [(c.call_id, c.block_seq) for c in log.fold.pending_calls] == [("a", 8)]


def test_a_copy_of_a_call_whose_message_a_replace_restated_survives_a_snapshot() -> None:
    # Step 2's a is restated by a replace (seq 9) and then copied from its original message (seq
    # 8, off the surface now): the copy carries the call because 8 once carried it, which a fold
    # restored from a snapshot must still know. Cutting the replace then leaves the copy's block.
    log = Log()
    second = _step_two_reusing_a(log)
    kept = assistant(1, 2, ("a", "ls"), text="kept")
    restated = log.add("assistant/message", kept, op=Replace(second, second), sources=(second,)).seq
    restored = SessionFold.from_snapshot(decode_snapshot(encode_snapshot(log.fold.snapshot())))
    assert restored.pending_calls == log.fold.pending_calls
    for fold in (log.fold, restored):
        copy = log.make(
            "assistant/message", assistant(1, 2, ("a", "ls"), source={"kind": "copy"}), op=APPEND, sources=(second,)
        )
        fold.apply(copy)
        cut = log.make(
            "assistant/message",
            assistant(1, 2, text="I'll", interrupted=True),
            op=Replace(restated, restated),
            sources=(restated,),
            seq=copy.seq + 1,
        )
        fold.apply(cut)
        assert [(c.call_id, c.block_seq, c.on_surface) for c in fold.pending_calls] == [("a", copy.seq, True)]
    assert decode_snapshot(encode_snapshot(restored.snapshot())) == decode_snapshot(
        encode_snapshot(log.fold.snapshot())
    )


def test_a_replace_may_not_leave_a_later_steps_result_after_a_copy_of_an_earlier_call() -> None:
    # A copy of step 1's message (a, already answered) lands while step 2's a is open, and step 2's
    # result follows it. Cutting step 2's a from its message would leave that result after only
    # step 1's restated call, which it does not answer: refused, as when step 1's a stands alone.
    log = Log()
    second = _step_two_reusing_a(log)
    _copy_of(log, 4)
    its_result = log.result(1, 2, "a").seq
    cut = assistant(1, 2, text="I'll", interrupted=True)
    error = log.reject(
        "REPLACE_ORPHANS_TOOL_RESULT", "assistant/message", cut, op=Replace(second, second), sources=(second,)
    )
    assert error.metadata["result_seq"] == str(its_result)
    # the copy of step 1's message may go: step 2's a and its result still pair
    log.add("user/message", user("[gone]"), op=Replace(its_result - 1, its_result - 1), sources=(its_result - 1,))


def test_two_copies_of_a_cut_message_stand_for_one_call_that_a_later_result_answers() -> None:
    # The answer is cut (a dropped), two copies cite it (off the surface now) and a result follows
    # them. The copies restate one call, so a replace of the second copy leaves the result paired
    # with the first: accepted, where naming each copy's call apart would orphan the result.
    log = Log()
    log.in_step(("a", "ls"))
    log.add("assistant/message", assistant(1, 1, text="I'll", interrupted=True), op=Replace(4, 4), sources=(4,))
    copy = assistant(1, 1, ("a", "ls"), source={"kind": "copy"})
    log.add("assistant/message", copy, op=APPEND, sources=(4,))
    second = log.add("assistant/message", copy, op=APPEND, sources=(4,)).seq
    log.result(1, 1, "a")
    log.add("user/message", user("[gone]"), op=Replace(second, second), sources=(second,))
    roles = [m["role"] for m in log.fold.model_history()]
    assert log.fold.pending_calls == [] and roles[-3:] == ["assistant", "user", "toolResult"]


def _step_two_cut(log: Log) -> int:
    """Step 1 calls a and answers it (seqs 4, 5); step 2 calls a again (seq 8) and a replace cuts
    that call from its message (seq 9), dropping step 2's a. Returns the cut's seq."""
    second = _step_two_reusing_a(log)
    cut = assistant(1, 2, text="I'll", interrupted=True)
    return log.add("assistant/message", cut, op=Replace(second, second), sources=(second,)).seq


def test_a_replace_restating_an_earlier_steps_call_does_not_put_back_a_later_dropped_call() -> None:
    # Step 2's a is dropped; then step 1's message is trimmed, keeping its call a (it cites seq 4,
    # which carried step 1's a only). It restates step 1's a: step 2's stays dropped, so crash
    # repair leaves it alone and a result for it is refused, in the fold, in a scan of the log
    # and after a snapshot round trip.
    log = Log()
    cut = _step_two_cut(log)
    trimmed = assistant(1, 1, ("a", "ls"), text="trimmed")
    log.add("assistant/message", trimmed, op=Replace(4, 4), sources=(4,))
    assert log.fold.pending_calls == []
    error = log.reject("TOOL_RESULT_CALL_DROPPED", "tool/result", result(1, 2, "a"), op=APPEND)
    assert error.metadata["replaced_by"] == str(cut)
    assert open_turn_closers(log.events[2:], "interrupted") == log.fold.closers("interrupted")
    restored = SessionFold.from_snapshot(decode_snapshot(encode_snapshot(log.fold.snapshot())))
    assert restored.pending_calls == []


@pytest.mark.parametrize("cited", [(), (8,), (4, 8)], ids=["the-cut", "step-2", "both-steps"])
def test_a_replace_citing_the_dropped_calls_message_puts_it_back(cited: tuple[int, ...]) -> None:
    # A replace of the cut that dropped step 2's a (the replace a refused result names, which
    # stands for the message it cut), or one citing step 2's message (with step 1's too), that
    # keeps a block of id a restates step 2's a: the call is back, so repair answers it and so
    # may the writer.
    log = Log()
    cut = _step_two_cut(log)
    assert log.reject("TOOL_RESULT_CALL_DROPPED", "tool/result", result(1, 2, "a"), op=APPEND).metadata[
        "replaced_by"
    ] == str(cut)
    back = assistant(1, 2, ("a", "ls"), text="I'll list")
    restated = log.add("assistant/message", back, op=Replace(cut, cut), sources=(cut, *cited)).seq
    assert [(c.call_id, c.block_seq, c.on_surface) for c in log.fold.pending_calls] == [("a", restated, True)]
    assert open_turn_closers(log.events[2:], "interrupted") == log.fold.closers("interrupted")
    log.add("tool/result", result(1, 2, "a"), op=APPEND)
    assert log.fold.pending_calls == []


def test_a_replace_keeping_both_calls_of_a_message_may_not_drop_one_result() -> None:
    # One message opens a and b; b's result comes first, then a's. A replace of the message and
    # b's result that keeps both blocks (b's result folded into the text) would leave b's block
    # with no result after it, though a's result, for a call of the same message, stays.
    log = Log()
    log.in_step(("a", "ls"), ("b", "cat"))
    b_result = log.result(1, 1, "b").seq
    log.result(1, 1, "a")
    both = assistant(1, 1, ("a", "ls"), ("b", "cat"), text="b printed the file")
    error = log.reject(
        "REPLACE_DROPS_TOOL_RESULT", "assistant/message", both, op=Replace(4, b_result), sources=(4, b_result)
    )
    assert error.metadata["result_seq"] == str(b_result) and "call 'b'" in error.message


def test_a_replace_cutting_one_call_and_its_result_keeps_the_other_call_of_the_message() -> None:
    # One message opens a and b; b is answered, a is still running. A replace of the message and
    # b's result keeping only a's block takes b and its result together: accepted, a stays
    # pending (b's block kept by a's message does not count as b's).
    log = Log()
    log.in_step(("a", "ls"), ("b", "cat"))
    b_result = log.result(1, 1, "b").seq
    kept = assistant(1, 1, ("a", "ls"), text="only a")
    log.add("assistant/message", kept, op=Replace(4, b_result), sources=(4, b_result))
    assert [(c.call_id, c.on_surface) for c in log.fold.pending_calls] == [("a", True)]
    log.result(1, 1, "a")
    assert [m["role"] for m in log.fold.model_history()][-2:] == ["assistant", "toolResult"]
