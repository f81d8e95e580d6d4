"""THE per-node projection rule (SPEC §3) and the small readers of message-bearing events.

Model history, the request projection, the transcript, the Pi importer and any external
reconstructor fold `project_message` over surface nodes, so they cannot disagree about which
message a node stands for. The helpers below read the few fields the fold needs (tool-call
blocks, `source.kind`, the op kind) in one place, tolerant of malformed data so that a trusted
replay of an old log never crashes on a shape the validating path would refuse.
"""

from __future__ import annotations

from typing import Any

from sessionlog.core.errors import ValidationError
from sessionlog.core.events import Event, JsonObject, NewEvent, Replace
from sessionlog.core.vocabulary import ASSISTANT_MESSAGE, SURFACE_TYPES, SYSTEM_MESSAGE

COPY_SOURCE_KIND = "copy"
"""`data.source.kind` of an appended model-only copy of an earlier message (SPEC §5, §11)."""

COMPACTION_SOURCE_KIND = "compaction"
"""`data.source.kind` of a surface event that lands a compaction summary (counted in stats)."""


def empty_system_head(event_id: str | None = None) -> NewEvent:
    """The empty `system/message` the service appends as node 0 before a writer's first other
    surface event (SPEC §4); it projects to no message. Fresh data on every call."""
    return NewEvent(
        type=SYSTEM_MESSAGE,
        data={"message": {"role": "system", "content": ""}},
        event_id=event_id,
        surface_op="append",
    )


def message_of(event: Event | NewEvent) -> JsonObject | None:
    """`data.message` when it is a JSON object, else None."""
    message = event.data.get("message")
    return message if isinstance(message, dict) else None


def is_empty_content(content: Any) -> bool:
    """An empty message body: the empty string or the empty list (a prompt-less node 0)."""
    return bool(content == "" or content == [])


def project_message(event: Event) -> JsonObject | None:
    """THE per-node projection rule: the model message a surface event stands for, or None.

    Every surface event projects to `data.message` as it is, except an empty `system/message`
    (content `""` or `[]`: the reserved node 0 of a session without a prompt), which projects
    to no message. Log-only events project to None. The returned dict is the one stored in
    the event (shared, not copied): callers must not mutate it.
    """
    if event.type not in SURFACE_TYPES:
        return None
    message = message_of(event)
    if message is None:
        return None
    if event.type == SYSTEM_MESSAGE and is_empty_content(message.get("content")):
        return None
    return message


def check_message(event: Event | NewEvent) -> None:
    """A surface event carries its model message as the JSON object `data.message`."""
    if event.type in SURFACE_TYPES and message_of(event) is None:
        raise ValidationError(
            "MESSAGE_MISSING",
            f"{event.type}: data.message must be a JSON object (the model message it projects to)",
            field="data.message",
            type=event.type,
        )


def tool_call_blocks(event: Event | NewEvent) -> list[JsonObject]:
    """The `toolCall` content blocks of an assistant message, in transcript order.

    Pi shape: `{"type": "toolCall", "id": ..., "name": ..., "arguments": ...}`. Other block
    types (text, thinking) and non-object items are skipped.
    """
    if event.type != ASSISTANT_MESSAGE:
        return []
    message = message_of(event)
    return message_tool_calls(message) if message is not None else []


def call_ids(event: Event | NewEvent) -> tuple[str, ...]:
    """The ids of an `assistant/message`'s `toolCall` blocks (string ids only), in order: what
    the surface and structure rules tell a message's calls by."""
    return tuple(call_id for block in tool_call_blocks(event) if isinstance(call_id := block.get("id"), str))


def message_tool_calls(message: JsonObject) -> list[JsonObject]:
    """The `toolCall` content blocks of a message, whatever event carries it (`tool_call_blocks`
    is for the structure rules, which pair only an `assistant/message`'s calls)."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict) and block.get("type") == "toolCall"]


def source_kind(event: Event | NewEvent) -> str | None:
    """`data.source.kind` when present (who produced a user message: user, compaction, copy, …)."""
    source = event.data.get("source")
    if isinstance(source, dict):
        kind = source.get("kind")
        if isinstance(kind, str):
            return kind
    return None


def is_copy(event: Event | NewEvent) -> bool:
    """An appended model-only copy of an earlier message (`data.source.kind == "copy"`)."""
    return event.surface_op == "append" and source_kind(event) == COPY_SOURCE_KIND


def is_replace(event: Event | NewEvent) -> bool:
    """A surface event that replaces a surface range instead of appending."""
    return isinstance(event.surface_op, Replace)


def is_append(event: Event | NewEvent) -> bool:
    """A surface event that entered the surface at its own log position."""
    return event.type in SURFACE_TYPES and event.surface_op == "append"
