"""The event vocabulary (SPEC §3): which types the service knows and which are surface types.

A type outside `KNOWN_TYPES` must be `ignorable`, so a reader that does not know it may skip it.
Surface types carry a `surfaceOp` and project to model messages; log-only types never do.
"""

from __future__ import annotations

SYSTEM_MESSAGE = "system/message"
USER_MESSAGE = "user/message"
ASSISTANT_MESSAGE = "assistant/message"
TOOL_RESULT = "tool/result"

TURN_START = "turn/start"
TURN_END = "turn/end"
STEP_START = "step/start"
STEP_END = "step/end"
TOOL_CALL = "tool/call"
REQUEST_HEADER = "request/header"
REQUEST_CONTEXT = "request/context"
ASSISTANT_ATTEMPT = "assistant/attempt"
COMPACTION_START = "compaction/start"
COMPACTION_SUMMARY = "compaction/summary"
COMPACTION_END = "compaction/end"
SESSION_END_SEED = "session/end-seed"

SURFACE_TYPES: frozenset[str] = frozenset({SYSTEM_MESSAGE, USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT})

LOG_ONLY_TYPES: frozenset[str] = frozenset(
    {
        TURN_START,
        TURN_END,
        STEP_START,
        STEP_END,
        TOOL_CALL,
        REQUEST_HEADER,
        REQUEST_CONTEXT,
        ASSISTANT_ATTEMPT,
        COMPACTION_START,
        COMPACTION_SUMMARY,
        COMPACTION_END,
        SESSION_END_SEED,
    }
)

KNOWN_TYPES: frozenset[str] = SURFACE_TYPES | LOG_ONLY_TYPES

UNPAIRED_TOOL_RESULT = "pi-unpaired-tool-result"
"""`data.source.kind` of a `user/message` carrying a Pi tool result whose call is not pending."""
UNSTRUCTURED = "pi-unstructured"
"""`data.source.kind` of a `user/message` carrying a Pi assistant message whose tool calls lack
ids or repeat one."""
FORKED_CALL = "pi-forked-call"
"""`data.source.kind` of a `user/message` that, in a Pi fork cut while a tool call was pending,
replaces the call's assistant message, the results of its calls recorded before the cut and the
error results the fork wrote for the others, carrying the assistant message unchanged (model-only
copies of those recorded results follow it; the fork's own branch then brings the real results)."""
KEPT_AS_SEEN: frozenset[str] = frozenset({UNPAIRED_TOOL_RESULT, UNSTRUCTURED, FORKED_CALL})
"""`data.source.kind`s of a `user/message` that carries, unchanged, a message a model saw outside
the turn/step/tool structure (the importers' fallbacks, docs/formats.md): its message keeps its
own role (`toolResult`, `assistant`), so the model history stays what the model saw."""

TURN_END_KINDS: frozenset[str] = frozenset(
    {"completed", "aborted", "blocked", "error", "max-tokens", "interrupted", "forked"}
)


def is_surface_type(event_type: str) -> bool:
    """True for the types that carry a surfaceOp and project to a model message."""
    return event_type in SURFACE_TYPES
