"""`pi --mode json` streams (seed 002): both wire formats, messages rebuilt, incomplete ones kept."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sessionlog.core.errors import ValidationError
from sessionlog.core.formats.pi.stream import (
    AgentEnd,
    AgentStart,
    IncompleteMessage,
    MessageCompleted,
    OtherEvent,
    PiStreamParser,
    SessionHeader,
    StreamItem,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnEnd,
    TurnStart,
    parse_stream,
    parse_stream_chunks,
    parse_stream_file,
)
from tests.support.fixtures import STREAM_STDOUT, delta_only, fixture, stream_events

STDOUT = fixture(STREAM_STDOUT)


def kinds(items: list[StreamItem]) -> list[str]:
    return [item.kind for item in items]


# --- the real 0.73.1 capture ---------------------------------------------------------------


def test_real_snapshot_stream() -> None:
    items = list(parse_stream_file(STDOUT))
    assert kinds(items) == [
        "session_header",
        "agent_start",
        "turn_start",
        "message_completed",
        "message_completed",
        "turn_end",
        "agent_end",
    ]
    header, _, turn, user, assistant, turn_end, agent_end = items
    assert isinstance(header, SessionHeader) and header.header["id"] == "019e7434-08a3-772a-ba93-08265b85f937"
    assert isinstance(turn, TurnStart) and turn.turn == 1
    assert isinstance(user, MessageCompleted) and user.role == "user" and user.turn == 1
    assert isinstance(assistant, MessageCompleted) and assistant.role == "assistant"
    final = stream_events()[-3]["message"]
    assert assistant.message == final
    assert assistant.rebuilt is not None
    assert assistant.rebuilt["content"][0]["text"] == "Hi!"
    assert isinstance(turn_end, TurnEnd) and turn_end.message == final and turn_end.tool_results == []
    assert isinstance(agent_end, AgentEnd) and len(agent_end.messages) == 2 and agent_end.will_retry is None


def test_real_stream_rewritten_as_delta_only_rebuilds_the_same_text() -> None:
    items = list(parse_stream(delta_only(stream_events())))
    assistant = next(i for i in items if isinstance(i, MessageCompleted) and i.role == "assistant")
    assert assistant.rebuilt is not None
    assert assistant.rebuilt["content"] == [{"type": "text", "text": "Hi!"}]
    assert assistant.message["content"][0]["textSignature"]  # message_end is authoritative


def test_snapshots_replace_and_are_not_accumulated() -> None:
    base = {"role": "assistant", "content": []}
    events = [
        {"type": "message_start", "message": base},
        {"type": "message_update", "message": {**base, "content": [{"type": "text", "text": "H"}]},
         "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": "H"}},
        {"type": "message_update", "message": {**base, "content": [{"type": "text", "text": "Hi"}]},
         "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": "i"}},
    ]  # fmt: skip
    (item,) = list(parse_stream(events))
    assert isinstance(item, IncompleteMessage)
    assert item.message["content"] == [{"type": "text", "text": "Hi"}]


# --- a hand-made delta-only stream (≥0.84) ------------------------------------------------

USAGE = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15, "cost": {"total": 0.01}}
CALL = {"type": "toolCall", "id": "call_1", "name": "bash", "arguments": {"command": "ls -la"}}
FINAL = {
    "role": "assistant",
    "content": [
        {"type": "thinking", "thinking": "look first", "thinkingSignature": "sig"},
        {"type": "text", "text": "好的 😀 listing"},
        CALL,
    ],
    "provider": "anthropic",
    "model": "claude",
    "usage": USAGE,
    "stopReason": "toolUse",
}
RESULT = {"role": "toolResult", "toolCallId": "call_1", "toolName": "bash", "content": [], "isError": False}


def update(kind: str, index: int, **fields: Any) -> dict[str, Any]:
    return {"type": "message_update", "assistantMessageEvent": {"type": kind, "contentIndex": index, **fields}}


def handmade_stream() -> list[dict[str, Any]]:
    start = {"role": "assistant", "content": [], "provider": "anthropic", "model": "claude", "usage": {}}
    user = {"role": "user", "content": [{"type": "text", "text": "list files"}]}
    return [
        {"type": "session", "version": 3, "id": "sess", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"},
        {"type": "agent_start"},
        {"type": "turn_start"},
        {"type": "message_start", "message": user},
        {"type": "message_end", "message": user},
        {"type": "message_start", "message": start},
        update("thinking_start", 0),
        update("thinking_delta", 0, delta="look "),
        update("thinking_delta", 0, delta="first"),
        update("thinking_end", 0, content="look first"),
        update("text_start", 1),
        update("text_delta", 1, delta="好的 "),
        update("text_delta", 1, delta="😀 listing"),
        update("toolcall_start", 2, id="call_1", toolName="bash"),
        update("toolcall_delta", 2, delta='{"command":'),
        update("toolcall_delta", 2, delta='"ls -la"}'),
        update("toolcall_end", 2, toolCall=CALL),
        update("text_end", 1, content="好的 😀 listing"),
        {"type": "message_update", "usage": USAGE, "assistantMessageEvent": {"type": "future_event"}},
        {"type": "message_end", "message": FINAL},
        {"type": "tool_execution_start", "toolCallId": "call_1", "toolName": "bash", "args": CALL["arguments"]},
        {"type": "tool_execution_update", "toolCallId": "call_1", "toolName": "bash", "partialResult": {}},
        {"type": "tool_execution_end", "toolCallId": "call_1", "toolName": "bash", "result": {"content": []},
         "isError": False, "durationMs": 12},
        {"type": "message_start", "message": RESULT},
        {"type": "message_end", "message": RESULT},
        {"type": "turn_end", "message": FINAL, "toolResults": [RESULT]},
        {"type": "turn_start"},
        {"type": "message_start", "message": start},
        update("text_start", 0),
        update("text_delta", 0, delta="Now I will "),
        update("toolcall_start", 1, id="call_2", toolName="write"),
        update("toolcall_delta", 1, delta='{"path":"a.txt","con'),
    ]  # fmt: skip


def test_handmade_delta_stream() -> None:
    items = list(parse_stream(handmade_stream()))
    assert kinds(items) == [
        "session_header",
        "agent_start",
        "turn_start",
        "message_completed",
        "message_completed",
        "tool_execution_start",
        "other",
        "tool_execution_end",
        "message_completed",
        "turn_end",
        "turn_start",
        "incomplete_message",
    ]
    assistant = items[4]
    assert isinstance(assistant, MessageCompleted)
    assert assistant.message == FINAL
    assert assistant.rebuilt is not None
    rebuilt = assistant.rebuilt
    assert rebuilt["content"] == [
        {"type": "thinking", "thinking": "look first"},  # the signature only comes with message_end
        {"type": "text", "text": "好的 😀 listing"},
        CALL,
    ]
    assert rebuilt["usage"] == USAGE  # the top-level usage of 0.84.2+
    start, other, end = items[5], items[6], items[7]
    assert isinstance(start, ToolExecutionStart) and (start.tool_call_id, start.tool_name) == ("call_1", "bash")
    assert isinstance(other, OtherEvent) and other.type == "tool_execution_update"
    assert isinstance(end, ToolExecutionEnd) and not end.is_error and end.duration_ms == 12 and end.turn == 1
    assert isinstance(items[8], MessageCompleted) and items[8].role == "toolResult"
    turn_end = items[9]
    assert isinstance(turn_end, TurnEnd) and turn_end.tool_results == [RESULT]
    cut = items[11]
    assert isinstance(cut, IncompleteMessage)
    assert cut.turn == 2 and cut.role == "assistant"
    assert cut.reason == "the stream ended before message_end"
    assert cut.message["content"] == [
        {"type": "text", "text": "Now I will "},
        {"type": "toolCall", "id": "call_2", "name": "write", "arguments": {}},
    ]
    assert cut.partial_tool_arguments == {1: '{"path":"a.txt","con'}


def test_complete_raw_arguments_are_parsed_when_toolcall_end_never_came() -> None:
    events = [
        {"type": "message_start", "message": {"role": "assistant", "content": []}},
        update("toolcall_start", 0, id="c", toolName="ls"),
        update("toolcall_delta", 0, delta='{"path":"."}'),
    ]
    (item,) = list(parse_stream(events))
    assert isinstance(item, IncompleteMessage)
    assert item.message["content"] == [{"type": "toolCall", "id": "c", "name": "ls", "arguments": {"path": "."}}]


def test_a_new_message_or_turn_end_closes_an_unfinished_one_as_incomplete() -> None:
    parser = PiStreamParser()
    assert parser.feed({"type": "message_start", "message": {"role": "assistant", "content": []}}) == []
    parser.feed(update("text_delta", 0, delta="par"))
    items = parser.feed({"type": "message_start", "message": {"role": "user", "content": "x"}})
    assert kinds(items) == ["incomplete_message"]
    assert isinstance(items[0], IncompleteMessage)
    assert items[0].reason == "a new message started before message_end"
    assert items[0].message["content"] == [{"type": "text", "text": "par"}]
    items = parser.feed({"type": "agent_end", "messages": [], "willRetry": True})
    assert kinds(items) == ["incomplete_message", "agent_end"]
    assert isinstance(items[1], AgentEnd) and items[1].will_retry is True
    assert parser.close() == []


def test_message_end_without_start_has_no_rebuilt_form() -> None:
    (item,) = list(parse_stream([{"type": "message_end", "message": {"role": "custom", "content": "c"}}]))
    assert isinstance(item, MessageCompleted) and item.rebuilt is None and item.turn is None


def test_header_only_counts_as_first_line_and_other_events_pass_through() -> None:
    events = [{"type": "agent_start"}, {"type": "session", "id": "late"}, {"type": "compaction_end", "reason": "x"}]
    items = list(parse_stream(events))
    assert isinstance(items[0], AgentStart)
    assert [i.type for i in items[1:] if isinstance(i, OtherEvent)] == ["session", "compaction_end"]


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"kind": "x"}, "BAD_STREAM_EVENT"),
        ({"type": "message_start"}, "BAD_STREAM_EVENT"),
        ({"type": "message_end", "message": "hi"}, "BAD_STREAM_EVENT"),
        # a message without a string role became a role-less user/message, whose Pi export no
        # reader opens (BAD_PI_ENTRY), or (role 5) an event the service refused without a line
        ({"type": "message_end", "message": {"content": "hi"}}, "BAD_STREAM_EVENT"),
        ({"type": "message_end", "message": {"role": 5, "content": "hi"}}, "BAD_STREAM_EVENT"),
        ({"type": "message_start", "message": {"role": None, "content": []}}, "BAD_STREAM_EVENT"),
        (update("text_delta", -1, delta="x"), "BAD_STREAM_EVENT"),
        ({"type": "message_update", "assistantMessageEvent": "x"}, "BAD_STREAM_EVENT"),
    ],
)
def test_malformed_events_name_the_line(event: dict[str, Any], reason: str) -> None:
    data = b'{"type":"agent_start"}\n' + json.dumps(event).encode() + b"\n"
    with pytest.raises(ValidationError) as caught:
        list(parse_stream_chunks([data]))
    assert caught.value.reason == reason
    assert caught.value.metadata["line"] == "2"


def test_cut_off_stdout_strict_and_lenient() -> None:
    data = STDOUT.read_bytes()
    cut = data[: data.index(b'"type":"message_end","message":{"role":"assistant"') + 30]
    with pytest.raises(ValidationError) as caught:
        list(parse_stream_chunks([cut]))
    assert caught.value.reason == "TRUNCATED_LAST_LINE"
    items = list(parse_stream_chunks([cut[i : i + 7] for i in range(0, len(cut), 7)], lenient=True))
    assert kinds(items)[-1] == "incomplete_message"
    last = items[-1]
    assert isinstance(last, IncompleteMessage) and last.message["content"][0]["text"] == "Hi!"
