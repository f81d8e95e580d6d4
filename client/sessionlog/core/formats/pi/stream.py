"""The `pi --mode json` event stream (pi-format.md §10, seed 002), normalised to a few items.

Pi prints one JSON event per line: the session header first (0.45.0+), then agent, turn, message
and tool-execution events. Two wire formats exist for `message_update`:

- **≤ 0.83**: every update carries the whole `message` so far (and `assistantMessageEvent.partial`);
- **≥ 0.84**: updates carry only `assistantMessageEvent` deltas (plus a top-level `usage` from
  0.84.2); `toolcall_start` names the call's `id` and `toolName`.

`PiStreamParser` accepts both. A message is rebuilt from `message_start`: a snapshot replaces what
was rebuilt so far (snapshots are cumulative, so adding them up would repeat text); a delta is
applied at its `contentIndex` (`*_start` opens a block, `*_delta` appends, `*_end` sets the block's
final text or tool call). `message_end` is authoritative: its message is the completed one, and the
rebuilt version is kept beside it for comparison. A message that never gets `message_end` (the
process was killed, the stream cut) is reported as `IncompleteMessage`, never dropped, and is not a
completed message either: it has no authoritative form.

The items (all frozen dataclasses with a `kind`): `SessionHeader`, `AgentStart`, `AgentEnd`,
`TurnStart`, `TurnEnd`, `MessageCompleted`, `ToolExecutionStart`, `ToolExecutionEnd`,
`IncompleteMessage`, and `OtherEvent` for everything else (tool progress, compaction, retries,
queue updates, newer event types), passed through untouched. Nothing here does I/O beyond the
optional file helpers; mapping items to sessionlog events is the importer's job.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from sessionlog.core.errors import ValidationError
from sessionlog.core.events import JsonObject
from sessionlog.core.formats.jsonl import JsonlReader, read_chunks_numbered, read_file_numbered


@dataclass(frozen=True, slots=True)
class SessionHeader:
    """The first line of `--mode json` output: the session header (the only place its id is)."""

    header: JsonObject
    kind: Literal["session_header"] = "session_header"


@dataclass(frozen=True, slots=True)
class AgentStart:
    """One run of the agent loop began."""

    kind: Literal["agent_start"] = "agent_start"


@dataclass(frozen=True, slots=True)
class AgentEnd:
    """The run ended; `messages` are all it created, `will_retry` (1.x) says an auto-retry follows."""

    messages: list[Any]
    will_retry: bool | None = None
    kind: Literal["agent_end"] = "agent_end"


@dataclass(frozen=True, slots=True)
class TurnStart:
    """Turn `turn` (1, 2, … over the whole stream) began."""

    turn: int
    kind: Literal["turn_start"] = "turn_start"


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """Turn `turn` ended with its assistant `message` and the tool results it produced."""

    turn: int
    message: Any
    tool_results: list[Any]
    kind: Literal["turn_end"] = "turn_end"


@dataclass(frozen=True, slots=True)
class MessageCompleted:
    """A message got its `message_end`: `message` is Pi's final, authoritative form.

    `rebuilt` is what `message_start` plus the updates gave just before the end (None if the
    message had no `message_start`); a difference points at a lost or reordered update.
    """

    role: str
    message: JsonObject
    rebuilt: JsonObject | None
    turn: int | None
    kind: Literal["message_completed"] = "message_completed"


@dataclass(frozen=True, slots=True)
class ToolExecutionStart:
    """A tool call began executing."""

    tool_call_id: str | None
    tool_name: str | None
    args: Any
    turn: int | None
    kind: Literal["tool_execution_start"] = "tool_execution_start"


@dataclass(frozen=True, slots=True)
class ToolExecutionEnd:
    """A tool call finished (`is_error` for failed, blocked, unknown or invalid tools)."""

    tool_call_id: str | None
    tool_name: str | None
    result: Any
    is_error: bool
    duration_ms: int | float | None
    turn: int | None
    kind: Literal["tool_execution_end"] = "tool_execution_end"


@dataclass(frozen=True, slots=True)
class IncompleteMessage:
    """A message that started but never got `message_end`: what was rebuilt of it, and why.

    `partial_tool_arguments` holds, by content index, the raw argument JSON of tool calls whose
    `toolcall_end` never came (their `arguments` in `message` are parsed from it when it is
    complete JSON, else left as they were).
    """

    role: str | None
    message: JsonObject
    reason: str
    turn: int | None
    partial_tool_arguments: dict[int, str] = field(default_factory=dict)
    kind: Literal["incomplete_message"] = "incomplete_message"


@dataclass(frozen=True, slots=True)
class OtherEvent:
    """Any other event, untouched: tool progress, compaction, retries, queue updates, new types."""

    type: str
    event: JsonObject
    turn: int | None
    kind: Literal["other"] = "other"


StreamItem = (
    SessionHeader
    | AgentStart
    | AgentEnd
    | TurnStart
    | TurnEnd
    | MessageCompleted
    | ToolExecutionStart
    | ToolExecutionEnd
    | IncompleteMessage
    | OtherEvent
)

_BLOCK_FIELDS = {"text": "text", "thinking": "thinking"}


@dataclass(slots=True)
class _Open:
    message: JsonObject
    arguments: dict[int, str] = field(default_factory=dict)


class PiStreamParser:
    """Feed events (parsed JSON objects) in order; collect the items each one produces."""

    __slots__ = ("_events", "_open", "_turn")

    def __init__(self) -> None:
        self._open: _Open | None = None
        self._turn = 0
        self._events = 0

    @property
    def turn(self) -> int | None:
        """The current turn number (None before the first `turn_start`)."""
        return self._turn or None

    def feed(self, event: JsonObject, line: int | None = None) -> list[StreamItem]:
        """Take one event; `line` (if known) is named in errors."""
        where = f"line {line}: " if line is not None else ""
        first = self._events == 0
        self._events += 1
        kind = event.get("type")
        if not isinstance(kind, str):
            raise ValidationError("BAD_STREAM_EVENT", f"{where}event type must be a string", line=line)
        if first and kind == "session":
            return [SessionHeader(event)]
        handler = _HANDLERS.get(kind)
        if handler is None:
            if "id" in event and "parentId" in event:
                # A session file's entry: kept as an event of a kind this parser does not know,
                # the whole file went in as ignorable events, and the session held no message.
                raise ValidationError(
                    "BAD_STREAM_EVENT",
                    f"{where}a Pi session file's entry ({kind!r}, with an id and a parentId), not an event "
                    "of `pi --mode json`: a session file is imported with `sessionlog import`",
                    field="parentId",
                    line=line,
                )
            return [OtherEvent(kind, event, self.turn)]
        return handler(self, event, where, line)

    def close(self) -> list[StreamItem]:
        """End of stream: a message still open is reported as incomplete."""
        return self._flush("the stream ended before message_end")

    # --- handlers ---

    def _agent_start(self, event: JsonObject, where: str, line: int | None) -> list[StreamItem]:
        return [AgentStart()]

    def _agent_end(self, event: JsonObject, where: str, line: int | None) -> list[StreamItem]:
        out = self._flush("agent_end came before message_end")
        messages = event.get("messages")
        retry = event.get("willRetry")
        out.append(AgentEnd(messages if isinstance(messages, list) else [], retry if isinstance(retry, bool) else None))
        return out

    def _turn_start(self, event: JsonObject, where: str, line: int | None) -> list[StreamItem]:
        self._turn += 1
        return [TurnStart(self._turn)]

    def _turn_end(self, event: JsonObject, where: str, line: int | None) -> list[StreamItem]:
        out = self._flush("turn_end came before message_end")
        results = event.get("toolResults")
        out.append(TurnEnd(self._turn, event.get("message"), results if isinstance(results, list) else []))
        return out

    def _message_start(self, event: JsonObject, where: str, line: int | None) -> list[StreamItem]:
        out = self._flush("a new message started before message_end")
        self._open = _Open(copy.deepcopy(_message(event, "message", where, line)))
        return out

    def _message_update(self, event: JsonObject, where: str, line: int | None) -> list[StreamItem]:
        update = event.get("assistantMessageEvent")
        if update is not None and not isinstance(update, dict):
            raise ValidationError("BAD_STREAM_EVENT", f"{where}assistantMessageEvent must be an object", line=line)
        snapshot = event.get("message")
        if snapshot is not None:
            # pre-0.84: a cumulative snapshot replaces whatever was rebuilt so far
            snapshot = _message(event, "message", where, line)
            if self._open is None:
                self._open = _Open(copy.deepcopy(snapshot))
            else:
                self._open.message = copy.deepcopy(snapshot)
                self._open.arguments.clear()
        else:
            if self._open is None:
                self._open = _Open({"role": "assistant", "content": []})
            if update is not None:
                _apply_delta(self._open, update, where, line)
        usage = event.get("usage")
        if isinstance(usage, dict):
            self._open.message["usage"] = copy.deepcopy(usage)
        return []

    def _message_end(self, event: JsonObject, where: str, line: int | None) -> list[StreamItem]:
        message = _message(event, "message", where, line)
        rebuilt = None
        if self._open is not None:
            _parse_pending_arguments(self._open)
            rebuilt = self._open.message
            self._open = None
        return [MessageCompleted(message["role"], message, rebuilt, self.turn)]

    def _tool_start(self, event: JsonObject, where: str, line: int | None) -> list[StreamItem]:
        return [
            ToolExecutionStart(_str(event.get("toolCallId")), _str(event.get("toolName")), event.get("args"), self.turn)
        ]

    def _tool_end(self, event: JsonObject, where: str, line: int | None) -> list[StreamItem]:
        duration = event.get("durationMs")
        if isinstance(duration, bool) or not isinstance(duration, (int, float)):
            duration = None
        return [
            ToolExecutionEnd(
                _str(event.get("toolCallId")),
                _str(event.get("toolName")),
                event.get("result"),
                event.get("isError") is True,
                duration,
                self.turn,
            )
        ]

    def _flush(self, reason: str) -> list[StreamItem]:
        if self._open is None:
            return []
        opened, self._open = self._open, None
        pending = dict(opened.arguments)
        _parse_pending_arguments(opened)
        role = opened.message.get("role")
        return [IncompleteMessage(role if isinstance(role, str) else None, opened.message, reason, self.turn, pending)]


_HANDLERS = {
    "agent_start": PiStreamParser._agent_start,
    "agent_end": PiStreamParser._agent_end,
    "turn_start": PiStreamParser._turn_start,
    "turn_end": PiStreamParser._turn_end,
    "message_start": PiStreamParser._message_start,
    "message_update": PiStreamParser._message_update,
    "message_end": PiStreamParser._message_end,
    "tool_execution_start": PiStreamParser._tool_start,
    "tool_execution_end": PiStreamParser._tool_end,
}

STREAM_EVENT_TYPES: frozenset[str] = frozenset(_HANDLERS)
"""The event types of `pi --mode json` output the parser reads; none is a session file entry type,
so a line of one after a Pi header tells a stream from a session file (`entries.parse_pi_objects`)."""


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _message(event: JsonObject, name: str, where: str, line: int | None) -> JsonObject:
    """The event's message: an object with a string role, as every Pi message has and as the Pi
    file reader requires of a message entry (a role-less one would be exported as an entry no
    reader opens)."""
    message = event.get(name)
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ValidationError(
            "BAD_STREAM_EVENT",
            f"{where}{event.get('type')} needs a {name} object with a string role",
            line=line,
            field=name,
        )
    return message


def _apply_delta(opened: _Open, update: JsonObject, where: str, line: int | None) -> None:
    """Apply one ≥0.84 `assistantMessageEvent` to the message being rebuilt."""
    kind = update.get("type")
    if not isinstance(kind, str) or "_" not in kind:
        return  # start/done/error are not forwarded as updates; nothing to apply
    block_type, _, phase = kind.rpartition("_")
    index = update.get("contentIndex")
    if block_type not in ("text", "thinking", "toolcall") or phase not in ("start", "delta", "end"):
        return  # a newer update type: the final message_end will carry its effect
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValidationError("BAD_STREAM_EVENT", f"{where}{kind} needs a non-negative contentIndex", line=line)
    content = opened.message.get("content")
    if not isinstance(content, list):
        content = opened.message["content"] = []
    if block_type == "toolcall":
        _apply_tool_call(opened, content, index, phase, update)
        return
    name = _BLOCK_FIELDS[block_type]
    block = _block(content, index, block_type, {"type": block_type, name: ""})
    if phase == "delta":
        delta = update.get("delta")
        block[name] = str(block.get(name, "")) + (delta if isinstance(delta, str) else "")
    elif phase == "end" and isinstance(update.get("content"), str):
        block[name] = update["content"]


def _apply_tool_call(opened: _Open, content: list[Any], index: int, phase: str, update: JsonObject) -> None:
    if phase == "start":
        block: JsonObject = {"type": "toolCall"}
        if isinstance(update.get("id"), str):
            block["id"] = update["id"]
        if isinstance(update.get("toolName"), str):
            block["name"] = update["toolName"]
        block["arguments"] = {}
        _place(content, index, block)
        opened.arguments[index] = ""
    elif phase == "delta":
        _block(content, index, "toolCall", {"type": "toolCall", "arguments": {}})
        delta = update.get("delta")
        opened.arguments[index] = opened.arguments.get(index, "") + (delta if isinstance(delta, str) else "")
    else:
        call = update.get("toolCall")
        if isinstance(call, dict):
            _place(content, index, copy.deepcopy(call))
            opened.arguments.pop(index, None)


def _block(content: list[Any], index: int, block_type: str, template: JsonObject) -> JsonObject:
    """The block at `index`, created from `template` when missing or of another type."""
    existing = content[index] if index < len(content) else None
    if isinstance(existing, dict) and existing.get("type") == block_type:
        return existing
    fresh = dict(template)
    _place(content, index, fresh)
    return fresh


def _place(content: list[Any], index: int, block: JsonObject) -> None:
    while len(content) < index:
        content.append({"type": "text", "text": ""})  # a block whose start we never saw
    if index < len(content):
        content[index] = block
    else:
        content.append(block)


def _parse_pending_arguments(opened: _Open) -> None:
    """Tool calls without `toolcall_end`: parse their raw argument JSON when it is complete."""
    content = opened.message.get("content")
    for index, raw in list(opened.arguments.items()):
        if not isinstance(content, list) or index >= len(content) or not raw:
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(content[index], dict):
            content[index]["arguments"] = value


# --- reading -------------------------------------------------------------------------------


def parse_stream(events: Iterable[JsonObject]) -> Iterator[StreamItem]:
    """Normalise a sequence of already parsed events."""
    parser = PiStreamParser()
    for event in events:
        yield from parser.feed(event)
    yield from parser.close()


def _parse_numbered(records: Iterable[tuple[int, JsonObject]]) -> Iterator[StreamItem]:
    parser = PiStreamParser()
    for line, event in records:
        yield from parser.feed(event, line)
    yield from parser.close()


def parse_stream_chunks(chunks: Iterable[bytes], *, lenient: bool = False) -> Iterator[StreamItem]:
    """Normalise raw stdout bytes (strict JSONL; `lenient` drops a cut-off last line)."""
    return _parse_numbered(read_chunks_numbered(chunks, JsonlReader(lenient=lenient)))


def parse_stream_file(path: str | os.PathLike[str], *, lenient: bool = False) -> Iterator[StreamItem]:
    """Normalise a captured `pi --mode json` output file."""
    return _parse_numbered(read_file_numbered(path, JsonlReader(lenient=lenient)))
