"""`pi --mode json` streams mapped to sessionlog events, without a server (the CLI test uses one)."""

from __future__ import annotations

from typing import Any

import pytest

from sessionlog.core.errors import LimitExceeded
from sessionlog.core.events import NewEvent
from sessionlog.core.fold import SessionFold
from sessionlog.core.formats.pi.ingest import StreamIngest
from sessionlog.core.formats.pi.stream import PiStreamParser, parse_stream
from sessionlog.core.limits import Limits
from tests.support.fixtures import delta_only, stream_events

ASSISTANT = {"role": "assistant", "provider": "p", "model": "m", "timestamp": 2}


def ingest(events: list[dict[str, Any]], fold: SessionFold | None = None) -> tuple[list[NewEvent], StreamIngest]:
    mapper = StreamIngest(fold or SessionFold())
    out: list[NewEvent] = []
    for item in parse_stream(events):
        out += mapper.map(item)
    return out, mapper


def assistant_end(*calls: str, stop: str = "stop") -> dict[str, Any]:
    content = [{"type": "toolCall", "id": c, "name": "ls", "arguments": {}} for c in calls]
    return {"type": "message_end", "message": {**ASSISTANT, "content": content, "stopReason": stop}}


def result_end(call: str) -> dict[str, Any]:
    return {
        "type": "message_end",
        "message": {"role": "toolResult", "toolCallId": call, "content": [], "isError": True},
    }


def test_both_wire_formats_give_the_same_events() -> None:
    snapshot, _ = ingest(stream_events())
    deltas, _ = ingest(delta_only(stream_events()))
    assert snapshot == deltas
    assert [e.type for e in snapshot] == ["pi/session", "turn/start", "step/start", "system/message",
                                          "user/message", "assistant/message", "step/end", "turn/end"]  # fmt: skip
    assert snapshot[-1].data == {"turn": 1, "reason": {"kind": "completed"}}


def test_appending_after_an_existing_log_continues_the_numbering() -> None:
    _, mapper = ingest(stream_events())
    second, again = ingest(stream_events(), mapper.fold)
    assert [e.type for e in second].count("system/message") == 0  # node 0 exists already
    assert second[1].data == {"turn": 2}
    assert again.fold.stats()["turns"] == 2 and again.fold.open_turn is None


def test_a_new_run_while_a_turn_is_open_closes_it_as_aborted() -> None:
    run = [{"type": "agent_start"}, {"type": "turn_start"}, assistant_end("c1", stop="toolUse")]
    events, mapper = ingest([*run, *run])
    ends = [e.data for e in events if e.type == "turn/end"]
    assert ends == [{"turn": 1, "reason": {"kind": "aborted"}}]
    assert mapper.fold.open_turn == 2


def test_tool_calls_results_and_fallbacks() -> None:
    stream = [
        {"type": "agent_start"},
        {"type": "turn_start"},
        assistant_end("c1", "c2", stop="toolUse"),
        {"type": "tool_execution_start", "toolCallId": "c1", "toolName": "ls", "args": {"a": 1}},
        {"type": "tool_execution_start", "toolCallId": "zz", "toolName": "ls", "args": {}},  # not a call: no event
        {"type": "tool_execution_start", "toolCallId": "c2", "toolName": "rm", "args": {}},  # wrong name: no event
        result_end("c1"),
        result_end("c1"),  # answered twice: the second is kept as a user-side message
        {"type": "turn_end"},
        {"type": "turn_start"},
        assistant_end(),
        {"type": "turn_end"},
        {"type": "agent_end", "messages": []},
    ]
    events, mapper = ingest(stream)
    calls = [e.data for e in events if e.type == "tool/call"]
    assert calls == [{"turn": 1, "step": 1, "callId": "c1", "name": "ls", "arguments": {"a": 1}}]
    fallbacks = [e.data["source"] for e in events if e.type == "user/message"]
    assert fallbacks == [{"kind": "pi-unpaired-tool-result"}]
    assert mapper.fold.open_turn is None and mapper.fold.stats()["steps"] == 2
    assert [m["role"] for m in mapper.fold.model_history()] == ["assistant", "toolResult", "toolResult", "assistant"]


def test_incomplete_messages_are_kept_never_dropped() -> None:
    stream = [
        {"type": "agent_start"},
        {"type": "turn_start"},
        {"type": "message_start", "message": {"role": "user", "content": "hi"}},
        {"type": "message_start", "message": {**ASSISTANT, "content": [], "usage": {"input": 7, "output": 1}}},
        {"type": "message_update", "assistantMessageEvent": {"type": "text_start", "contentIndex": 0}},
        {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": "par"}},
    ]
    events, mapper = ingest(stream)
    assert [i.role for i in mapper.incomplete] == ["user", "assistant"]
    note = next(e for e in events if e.type == "pi/incomplete_message")
    assert note.ignorable and note.data["message"] == {"role": "user", "content": "hi"}
    attempt = next(e for e in events if e.type == "assistant/attempt")
    assert attempt.data["partial"]["content"] == [{"type": "text", "text": "par"}]
    assert attempt.data["usage"] == {"input": 7, "output": 1}
    assert mapper.fold.stats()["inputTokens"] == 7  # the attempt's usage counts


def test_other_events_are_kept_except_tool_progress() -> None:
    stream = [
        {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 10, "errorMessage": "x"},
        {"type": "tool_execution_update", "toolCallId": "c", "toolName": "ls", "args": {}, "partialResult": {}},
        {"type": "weird type!"},
    ]
    events, _ = ingest(stream)
    assert [(e.type, e.ignorable) for e in events] == [("pi/stream/auto_retry_start", True), ("pi/stream/entry", True)]


def test_an_event_over_a_limit_is_refused_naming_the_streams_line_and_seq() -> None:
    """With `limits`, every event is checked as the service checks an append before it is sent:
    the refusal names the stream's line and the seq, where the service's named only 'event 0'."""
    stream = [
        {"type": "agent_start"},
        {"type": "turn_start"},
        {"type": "message_end", "message": {"role": "user", "content": "hi"}},
        {"type": "message_end", "message": {**ASSISTANT, "content": [{"type": "text", "text": "x" * 600}]}},
    ]
    mapper = StreamIngest(SessionFold(), Limits(max_event_bytes=500))
    parser = PiStreamParser()
    with pytest.raises(LimitExceeded) as caught:
        for line, event in enumerate(stream, start=1):
            for item in parser.feed(event, line):
                mapper.map(item, line)
    assert caught.value.reason == "EVENT_TOO_LARGE"
    assert caught.value.message.startswith("pi event stream: line 4 (seq 4): assistant/message: "), caught.value
    assert (caught.value.metadata["line"], caught.value.metadata["seq"]) == ("4", "4")
    assert mapper.fold.next_seq == 4  # the refused event is not folded
