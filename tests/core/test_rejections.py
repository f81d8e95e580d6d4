"""One test per rejection reason of the fold (surface, structure, headers, seq/time).

Each case builds a valid prefix, then offers one bad event; `Log.reject` asserts the reason and
that neither `check` nor `apply` changed the fold. `test_every_reason_has_a_case` keeps the
table complete: every reason raised in the fold's modules must appear here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from sessionlog.core.events import APPEND, Replace

from .builders import Log, assistant, result, system, user

HEADER = {"config": {"model": "m1"}}


def _seq_gap(log: Log) -> None:
    log.head()
    log.reject("SEQ_NOT_CONTIGUOUS", "session/end-seed", {}, seq=5)


def _time_back(log: Log) -> None:
    log.head()
    log.reject("TIME_DECREASING", "session/end-seed", {}, time=10)


def _surface_op_missing(log: Log) -> None:
    log.reject("SURFACE_OP_MISSING", "system/message", system())


def _surface_op_not_allowed(log: Log) -> None:
    log.reject("SURFACE_OP_NOT_ALLOWED", "turn/start", {"turn": 1}, op=APPEND)


def _sources_not_allowed(log: Log) -> None:
    log.head()
    log.reject("SOURCES_NOT_ALLOWED", "turn/start", {"turn": 1}, sources=(0,))


def _message_missing(log: Log) -> None:
    log.reject("MESSAGE_MISSING", "system/message", {"message": "text"}, op=APPEND)


def _sources_duplicate(log: Log) -> None:
    log.head()
    log.say()
    log.reject("SOURCES_DUPLICATE", "user/message", user("copy"), op=APPEND, sources=(1, 1))


def _sources_not_earlier(log: Log) -> None:
    log.head()
    log.reject("SOURCES_NOT_EARLIER", "user/message", user("x"), op=APPEND, sources=(1,))


def _head_not_system(log: Log) -> None:
    log.reject("SURFACE_HEAD_NOT_SYSTEM", "user/message", user("first"), op=APPEND)


def _copy_sources_empty(log: Log) -> None:
    log.head()
    log.say()
    log.reject("COPY_SOURCES_EMPTY", "user/message", user("hi", source={"kind": "copy"}), op=APPEND)


def _replace_not_earlier(log: Log) -> None:
    log.head()
    log.say()
    log.reject("SURFACE_REPLACE_NOT_EARLIER", "user/message", user("s"), op=Replace(1, 2), sources=(1,))


def _range_not_found(log: Log) -> None:
    log.head()
    log.turn()
    log.say()
    log.reject("SURFACE_RANGE_NOT_FOUND", "user/message", user("s"), op=Replace(1, 2), sources=(1, 2))


def _range_reversed(log: Log) -> None:
    log.head()
    log.say("a")
    log.say("b")
    log.reject("SURFACE_RANGE_REVERSED", "user/message", user("s"), op=Replace(2, 1), sources=(1, 2))


def _replace_sources_empty(log: Log) -> None:
    log.head()
    log.say()
    log.reject("REPLACE_SOURCES_EMPTY", "user/message", user("s"), op=Replace(1, 1))


def _replace_sources_not_covering(log: Log) -> None:
    log.head()
    log.say("a")
    log.say("b")
    log.reject("REPLACE_SOURCES_NOT_COVERING", "user/message", user("s"), op=Replace(1, 2), sources=(1,))


def _tool_result_replace_not_single(log: Log) -> None:
    log.in_step(("c1", "tool"))
    log.result(1, 1, "c1")
    log.reject(
        "TOOL_RESULT_REPLACE_NOT_SINGLE", "tool/result", result(1, 1, "c1", "x"), op=Replace(4, 5), sources=(4, 5)
    )


def _tool_result_replace_target(log: Log) -> None:
    log.in_step(("c1", "tool"))
    log.reject("TOOL_RESULT_REPLACE_TARGET", "tool/result", result(1, 1, "c1", "x"), op=Replace(4, 4), sources=(4,))


def _tool_result_replace_changes_more(log: Log) -> None:
    log.in_step(("c1", "tool"))
    log.result(1, 1, "c1", "long output")
    bad = result(1, 1, "c1", "short", is_error=True)
    log.reject("TOOL_RESULT_REPLACE_CHANGES_MORE", "tool/result", bad, op=Replace(5, 5), sources=(5,))


def _system_head_protected(log: Log) -> None:
    log.head("prompt")
    log.say()
    log.reject("SYSTEM_HEAD_PROTECTED", "user/message", user("summary"), op=Replace(0, 1), sources=(0, 1))


def _bad_turn_number(log: Log) -> None:
    log.reject("BAD_TURN_NUMBER", "turn/start", {"turn": "1"})


def _bad_step_number(log: Log) -> None:
    log.turn()
    log.reject("BAD_STEP_NUMBER", "step/start", {"turn": 1, "step": 0})


def _structure_field_missing(log: Log) -> None:
    log.reject("STRUCTURE_FIELD_MISSING", "turn/start", {})


def _no_open_turn(log: Log) -> None:
    log.reject("NO_OPEN_TURN", "step/start", {"turn": 1, "step": 1})


def _turn_mismatch(log: Log) -> None:
    log.head()
    log.turn()
    log.reject("TURN_MISMATCH", "user/message", user("x", turn=2), op=APPEND)


def _no_open_step(log: Log) -> None:
    log.head()
    log.turn()
    log.reject("NO_OPEN_STEP", "assistant/message", assistant(1, 1), op=APPEND)


def _step_mismatch(log: Log) -> None:
    log.turn()
    log.step()
    log.reject("STEP_MISMATCH", "step/end", {"turn": 1, "step": 2})


def _step_without_turn(log: Log) -> None:
    log.head()
    log.turn()
    log.step()
    log.reject("STEP_WITHOUT_TURN", "user/message", user("x", step=1), op=APPEND)


def _turn_already_open(log: Log) -> None:
    log.turn()
    log.reject("TURN_ALREADY_OPEN", "turn/start", {"turn": 2})


def _turn_not_contiguous(log: Log) -> None:
    log.turn()
    log.end_turn()
    log.reject("TURN_NOT_CONTIGUOUS", "turn/start", {"turn": 3})


def _bad_turn_end_reason(log: Log) -> None:
    log.turn()
    log.reject("BAD_TURN_END_REASON", "turn/end", {"turn": 1, "reason": {"kind": "done"}})


def _turn_end_with_open_step(log: Log) -> None:
    log.turn()
    log.step()
    log.reject("TURN_END_WITH_OPEN_STEP", "turn/end", {"turn": 1, "reason": {"kind": "completed"}})


def _step_already_open(log: Log) -> None:
    log.turn()
    log.step()
    log.reject("STEP_ALREADY_OPEN", "step/start", {"turn": 1, "step": 2})


def _step_not_contiguous(log: Log) -> None:
    log.turn()
    log.step()
    log.end_step()
    log.reject("STEP_NOT_CONTIGUOUS", "step/start", {"turn": 1, "step": 3})


def _bad_tool_call_block(log: Log) -> None:
    log.head()
    log.turn()
    log.step()
    data = assistant(1, 1)
    data["message"]["content"].append({"type": "toolCall", "id": 7, "name": "x"})
    log.reject("BAD_TOOL_CALL_BLOCK", "assistant/message", data, op=APPEND)


def _tool_call_id_duplicate(log: Log) -> None:
    log.in_step(("c1", "tool"))
    log.reject("TOOL_CALL_ID_DUPLICATE", "assistant/message", assistant(1, 1, ("c1", "tool")), op=APPEND)


def _bad_tool_call(log: Log) -> None:
    log.in_step(("c1", "tool"))
    log.reject("BAD_TOOL_CALL", "tool/call", {"turn": 1, "step": 1, "callId": "", "name": "tool"})


def _tool_call_unknown(log: Log) -> None:
    log.in_step(("c1", "tool"))
    log.reject("TOOL_CALL_UNKNOWN", "tool/call", {"turn": 1, "step": 1, "callId": "c9", "name": "tool"})


def _tool_call_name_mismatch(log: Log) -> None:
    log.in_step(("c1", "tool"))
    log.reject("TOOL_CALL_NAME_MISMATCH", "tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "rm"})


def _tool_call_after_result(log: Log) -> None:
    log.in_step(("c1", "tool"))
    log.result(1, 1, "c1")
    log.reject("TOOL_CALL_AFTER_RESULT", "tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "tool"})


def _tool_call_duplicate(log: Log) -> None:
    log.in_step(("c1", "tool"))
    log.call(1, 1, "c1")
    log.reject("TOOL_CALL_DUPLICATE", "tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "tool"})


def _tool_error_without_is_error(log: Log) -> None:
    log.in_step(("c1", "tool"))
    bad = result(1, 1, "c1", error={"code": "X"})
    log.reject("TOOL_ERROR_WITHOUT_IS_ERROR", "tool/result", bad, op=APPEND)


def _tool_result_call_id_missing(log: Log) -> None:
    log.in_step(("c1", "tool"))
    bad = result(1, 1, "c1")
    del bad["message"]["toolCallId"]
    log.reject("TOOL_RESULT_CALL_ID_MISSING", "tool/result", bad, op=APPEND)


def _tool_result_unknown_call(log: Log) -> None:
    log.in_step(("c1", "tool"))
    log.reject("TOOL_RESULT_UNKNOWN_CALL", "tool/result", result(1, 1, "c2"), op=APPEND)


def _tool_result_call_dropped(log: Log) -> None:
    # The answer cut to what was heard keeps c1 and drops c2; a later compaction of the cut
    # answer keeps dropping it: the refusal names the replace that dropped it, seq 5.
    log.in_step(("c1", "tool"), ("c2", "tool"))
    log.add("assistant/message", assistant(1, 1, ("c1", "tool"), interrupted=True), op=Replace(4, 4), sources=(4,))
    log.add("assistant/message", assistant(1, 1, ("c1", "tool"), text="[cut]"), op=Replace(5, 5), sources=(5,))
    error = log.reject("TOOL_RESULT_CALL_DROPPED", "tool/result", result(1, 1, "c2"), op=APPEND)
    assert error.metadata["replaced_by"] == "5" and "seq 5" in error.message
    log.result(1, 1, "c1")  # the call the model still sees is answered
    # a model-only copy that restates c2 (as after a compaction) puts it back: it may be answered
    copy = assistant(1, 1, ("c1", "tool"), ("c2", "tool"), source={"kind": "copy"})
    log.add("assistant/message", copy, op=APPEND, sources=(4,))
    log.result(1, 1, "c2")


def _replace_orphans_tool_result(log: Log) -> None:
    # The answer is cut to what was heard, without its call a, whose result is already in the
    # history: the result would stand there with no call before it. Nothing changes.
    log.in_step(("a", "ls"))
    log.result(1, 1, "a")
    cut = assistant(1, 1, text="I'll", interrupted=True)
    error = log.reject("REPLACE_ORPHANS_TOOL_RESULT", "assistant/message", cut, op=Replace(4, 4), sources=(4,))
    assert error.metadata["result_seq"] == "5" and "'a'" in error.message and "seq 5" in error.message
    # a replace that restates the block, or covers the result too, leaves no result behind
    log.add("assistant/message", assistant(1, 1, ("a", "ls"), interrupted=True), op=Replace(4, 4), sources=(4,))
    log.add("assistant/message", cut, op=Replace(6, 5), sources=(5, 6))
    assert [m["role"] for m in log.fold.model_history()] == ["user", "assistant"]


def _replace_drops_tool_result(log: Log) -> None:
    # The result of call a is summarised into a user message while a's block stays: the model
    # history would hold call a with no result after it. Nor may a summary restating a cover
    # both. Nothing changes.
    log.in_step(("a", "ls"))
    log.result(1, 1, "a")
    error = log.reject("REPLACE_DROPS_TOOL_RESULT", "user/message", user("summary"), op=Replace(5, 5), sources=(5,))
    assert error.metadata["result_seq"] == "5" and "'a'" in error.message and "seq 4" in error.message
    restated = assistant(1, 1, ("a", "ls"), text="[summary]")
    log.reject("REPLACE_DROPS_TOOL_RESULT", "assistant/message", restated, op=Replace(4, 5), sources=(4, 5))
    # a trim keeps the result; a summary covering call and result takes both
    log.add("tool/result", result(1, 1, "a", "[trimmed]"), op=Replace(5, 5), sources=(5,))
    log.add("user/message", user("summary"), op=Replace(4, 6), sources=(4, 6))
    assert [m["role"] for m in log.fold.model_history()] == ["user", "user"]


def _tool_result_duplicate(log: Log) -> None:
    log.in_step(("c1", "tool"))
    log.result(1, 1, "c1")
    log.reject("TOOL_RESULT_DUPLICATE", "tool/result", result(1, 1, "c1"), op=APPEND)


def _header(log: Log, reason: str, header: object, **extra: object) -> None:
    log.reject(reason, "request/header", {"header": header, "reason": "initial", **extra})


def _header_not_object(log: Log) -> None:
    _header(log, "HEADER_NOT_OBJECT", [])


def _header_system_forbidden(log: Log) -> None:
    _header(log, "HEADER_SYSTEM_FORBIDDEN", {**HEADER, "system": "be nice"})


def _header_unknown_key(log: Log) -> None:
    _header(log, "HEADER_UNKNOWN_KEY", {**HEADER, "model": "m"})


def _header_config_missing(log: Log) -> None:
    _header(log, "HEADER_CONFIG_MISSING", {"tools": [{"name": "t"}]})


def _header_config_reserved_key(log: Log) -> None:
    _header(log, "HEADER_CONFIG_RESERVED_KEY", {"config": {"model": "m1", "tools": [{"name": "t"}]}})


def _header_bad_tools(log: Log) -> None:
    _header(log, "HEADER_BAD_TOOLS", {**HEADER, "tools": {"name": "t"}})


def _header_empty_tools(log: Log) -> None:
    _header(log, "HEADER_EMPTY_TOOLS", {**HEADER, "tools": []})


def _header_bad_adapter_defaults(log: Log) -> None:
    _header(log, "HEADER_BAD_ADAPTER_DEFAULTS", {**HEADER, "adapterDefaults": True})


def _header_empty_adapter_defaults(log: Log) -> None:
    _header(log, "HEADER_EMPTY_ADAPTER_DEFAULTS", {**HEADER, "adapterDefaults": {}})


def _header_event_unknown_key(log: Log) -> None:
    _header(log, "HEADER_EVENT_UNKNOWN_KEY", HEADER, seqHint=3)


def _header_reason_unknown(log: Log) -> None:
    log.reject("HEADER_REASON_UNKNOWN", "request/header", {"header": HEADER, "reason": "because"})


def _header_reason_wrong(log: Log) -> None:
    log.add("request/header", {"header": HEADER, "reason": "initial"})
    log.reject("HEADER_REASON_WRONG", "request/header", {"header": HEADER, "reason": "change"})


def _header_starts_series_wrong(log: Log) -> None:
    log.add("request/header", {"header": HEADER, "reason": "initial"})
    log.reject(
        "HEADER_STARTS_SERIES_WRONG", "request/header", {"header": HEADER, "reason": "resume", "startsSeries": True}
    )


CASES: dict[str, Callable[[Log], None]] = {
    "SEQ_NOT_CONTIGUOUS": _seq_gap,
    "TIME_DECREASING": _time_back,
    "SURFACE_OP_MISSING": _surface_op_missing,
    "SURFACE_OP_NOT_ALLOWED": _surface_op_not_allowed,
    "SOURCES_NOT_ALLOWED": _sources_not_allowed,
    "MESSAGE_MISSING": _message_missing,
    "SOURCES_DUPLICATE": _sources_duplicate,
    "SOURCES_NOT_EARLIER": _sources_not_earlier,
    "SURFACE_HEAD_NOT_SYSTEM": _head_not_system,
    "COPY_SOURCES_EMPTY": _copy_sources_empty,
    "SURFACE_REPLACE_NOT_EARLIER": _replace_not_earlier,
    "SURFACE_RANGE_NOT_FOUND": _range_not_found,
    "SURFACE_RANGE_REVERSED": _range_reversed,
    "REPLACE_SOURCES_EMPTY": _replace_sources_empty,
    "REPLACE_SOURCES_NOT_COVERING": _replace_sources_not_covering,
    "TOOL_RESULT_REPLACE_NOT_SINGLE": _tool_result_replace_not_single,
    "TOOL_RESULT_REPLACE_TARGET": _tool_result_replace_target,
    "TOOL_RESULT_REPLACE_CHANGES_MORE": _tool_result_replace_changes_more,
    "SYSTEM_HEAD_PROTECTED": _system_head_protected,
    "BAD_TURN_NUMBER": _bad_turn_number,
    "BAD_STEP_NUMBER": _bad_step_number,
    "STRUCTURE_FIELD_MISSING": _structure_field_missing,
    "NO_OPEN_TURN": _no_open_turn,
    "TURN_MISMATCH": _turn_mismatch,
    "NO_OPEN_STEP": _no_open_step,
    "STEP_MISMATCH": _step_mismatch,
    "STEP_WITHOUT_TURN": _step_without_turn,
    "TURN_ALREADY_OPEN": _turn_already_open,
    "TURN_NOT_CONTIGUOUS": _turn_not_contiguous,
    "BAD_TURN_END_REASON": _bad_turn_end_reason,
    "TURN_END_WITH_OPEN_STEP": _turn_end_with_open_step,
    "STEP_ALREADY_OPEN": _step_already_open,
    "STEP_NOT_CONTIGUOUS": _step_not_contiguous,
    "BAD_TOOL_CALL_BLOCK": _bad_tool_call_block,
    "TOOL_CALL_ID_DUPLICATE": _tool_call_id_duplicate,
    "BAD_TOOL_CALL": _bad_tool_call,
    "TOOL_CALL_UNKNOWN": _tool_call_unknown,
    "TOOL_CALL_NAME_MISMATCH": _tool_call_name_mismatch,
    "TOOL_CALL_AFTER_RESULT": _tool_call_after_result,
    "TOOL_CALL_DUPLICATE": _tool_call_duplicate,
    "TOOL_ERROR_WITHOUT_IS_ERROR": _tool_error_without_is_error,
    "TOOL_RESULT_CALL_ID_MISSING": _tool_result_call_id_missing,
    "TOOL_RESULT_UNKNOWN_CALL": _tool_result_unknown_call,
    "TOOL_RESULT_CALL_DROPPED": _tool_result_call_dropped,
    "TOOL_RESULT_DUPLICATE": _tool_result_duplicate,
    "REPLACE_ORPHANS_TOOL_RESULT": _replace_orphans_tool_result,
    "REPLACE_DROPS_TOOL_RESULT": _replace_drops_tool_result,
    "HEADER_NOT_OBJECT": _header_not_object,
    "HEADER_SYSTEM_FORBIDDEN": _header_system_forbidden,
    "HEADER_UNKNOWN_KEY": _header_unknown_key,
    "HEADER_CONFIG_MISSING": _header_config_missing,
    "HEADER_CONFIG_RESERVED_KEY": _header_config_reserved_key,
    "HEADER_BAD_TOOLS": _header_bad_tools,
    "HEADER_EMPTY_TOOLS": _header_empty_tools,
    "HEADER_BAD_ADAPTER_DEFAULTS": _header_bad_adapter_defaults,
    "HEADER_EMPTY_ADAPTER_DEFAULTS": _header_empty_adapter_defaults,
    "HEADER_EVENT_UNKNOWN_KEY": _header_event_unknown_key,
    "HEADER_REASON_UNKNOWN": _header_reason_unknown,
    "HEADER_REASON_WRONG": _header_reason_wrong,
    "HEADER_STARTS_SERIES_WRONG": _header_starts_series_wrong,
}

# Raised outside the fold's append path: tested in their own modules.
ELSEWHERE = {"RESERVED_TURN_END_KIND"}


@pytest.mark.parametrize("reason", sorted(CASES))
def test_rejection(reason: str) -> None:
    CASES[reason](Log())


def test_every_reason_has_a_case() -> None:
    core = Path(__file__).resolve().parents[2] / "client" / "sessionlog" / "core"
    raised: set[str] = set()
    for name in ("surface.py", "structure.py", "tool_calls.py", "headers.py", "fold.py", "messages.py"):
        text = (core / name).read_text()
        raised |= set(re.findall(r'ValidationError\(\s*"([A-Z][A-Z0-9_]+)"', text))
    raised |= {"BAD_TURN_NUMBER", "BAD_STEP_NUMBER"}  # built as f"BAD_{name}_NUMBER"
    raised |= {"SURFACE_OP_MISSING", "SURFACE_OP_NOT_ALLOWED", "SOURCES_NOT_ALLOWED"}  # validate.py
    assert raised - set(CASES) - ELSEWHERE == set()
    assert set(CASES) - raised == set()


def test_a_wrong_starts_series_names_the_latest_header_by_its_seq() -> None:
    """The message ended "at the latest header 0": a generation that read as the header's seq."""
    log = Log()
    log.head()
    log.add("request/header", {"header": HEADER, "reason": "initial"})
    error = log.reject(
        "HEADER_STARTS_SERIES_WRONG", "request/header", {"header": HEADER, "reason": "resume", "startsSeries": True}
    )
    assert error.message.endswith(
        "(the surface's replaceGeneration is 0, and was 0 at the latest header, seq 1: it has not moved since)"
    ), error.message
