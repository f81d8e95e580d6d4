"""Completing an open turn (SPEC §8): crash repair and fork share one function.

`open_turn_closers` returns the events that balance a log whose last turn is open; it does not
write them (dsh `repair.ts`). The caller appends them under its lease like any batch, with the
commit time set to the last event's time (`SessionFold.repair_time`): reusing the last time
keeps repair deterministic and never invents a future timestamp.

For the open step, every tool call without a result gets an error `tool/result`, in transcript
order (`TOOL_OUTCOME_UNKNOWN` when its `tool/call` was recorded, citing that seq; else
`TOOL_NOT_STARTED`); then `step/end` if a step is open; then `turn/end {kind: cause}`. Calls of
already closed steps are left alone. A balanced log gets no events.

Deterministic event ids (so a repeated repair after a lost acknowledgement is deduplicated by
`eventId` instead of appended twice):

- `repair-<cause>-<turn>-<step>-result-<callId>` (when that would be no eventId, the call id is
  replaced by `sha256-<first 32 hex digits of sha256(callId)>`: a call id is the harness's, and
  may be long, or hold a NUL or a lone surrogate, which no database stores in an eventId);
- `repair-<cause>-<turn>-<step>-step-end`;
- `repair-<cause>-<turn>-turn-end`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal

from sessionlog.core.errors import ValidationError
from sessionlog.core.events import APPEND, Event, JsonObject, NewEvent, event_id_problem
from sessionlog.core.structure import RESERVED_TURN_END_KINDS, StructureState, ToolCallState, fold_structure
from sessionlog.core.vocabulary import SESSION_END_SEED, STEP_END, TOOL_RESULT, TURN_END

RepairCause = Literal["interrupted", "forked"]

TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
TOOL_NOT_STARTED = "TOOL_NOT_STARTED"
MAX_EVENT_ID_CHARS = 128
REPAIR_ID_PREFIX = "repair"
"""eventIds of repair events start `repair-<cause>-` (`repair_event_id`)."""

_RETRY_UNKNOWN = (
    "Retry only if the tool is read-only or idempotent; otherwise verify the external state or ask "
    "the user first. Do not retry blindly."
)


def repair_text(call: ToolCallState, cause: RepairCause) -> str:
    """The model-facing explanation of a synthetic tool error."""
    label = f"Tool call {call.name} ({call.call_id})"
    started = call.call_seq is not None
    if cause == "interrupted":
        if started:
            return (
                f"{label} was interrupted: the session stopped after the call started, so its outcome "
                f"is unknown. {_RETRY_UNKNOWN}"
            )
        return f"{label} did not run: the session stopped before it started. Retry it if it is still needed."
    if started:
        return (
            f"{label} has no result in this fork: the session was forked after the call started, and "
            f"the parent session may have completed it after the fork point, so its outcome is unknown. "
            f"{_RETRY_UNKNOWN}"
        )
    return (
        f"{label} has no result in this fork: the session was forked before it started, though the "
        f"parent session may have completed it after the fork point. Retry it if it is still needed."
    )


def repair_reason(cause: RepairCause) -> str:
    """`error.reason` of a synthetic tool error."""
    if cause == "interrupted":
        return "the session was interrupted while this tool call was pending"
    return "the session was forked while this tool call was pending"


def repair_event_id(cause: RepairCause, turn: int, *parts: str) -> str:
    """A deterministic eventId every database stores (`events.event_id_problem`): a call id that
    would make it too long, or one holding a NUL or a lone surrogate, is hashed (its UTF-8
    bytes, a lone surrogate kept as its own code unit, so two such ids stay two)."""
    event_id = "-".join([REPAIR_ID_PREFIX, cause, str(turn), *parts])
    if event_id_problem(event_id, MAX_EVENT_ID_CHARS) is None:
        return event_id
    *head, call_id = parts
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return "-".join([REPAIR_ID_PREFIX, cause, str(turn), *head, f"sha256-{digest}"])


def is_repair_event(event: Event | NewEvent, cause: str) -> bool:
    """Whether `event` is one repair wrote with `cause` (its deterministic eventId says so)."""
    return event.event_id is not None and event.event_id.startswith(f"{REPAIR_ID_PREFIX}-{cause}-")


def is_repair_closer(event: Event) -> bool:
    """Whether `event` is a closer repair wrote, of either cause. Its time is when the repair ran
    (a resume, a lapse, a fork), not when what it closes ended, which nobody knows: a duration
    that ends at it is unknown (the timeline's, the export's), not the time to the repair."""
    return is_repair_event(event, "interrupted") or is_repair_event(event, "forked")


def check_writer_turn_end(event: NewEvent) -> None:
    """A writer may not end a turn `interrupted` or `forked`: only repair and fork do (SPEC §3).

    The one exception is an event that carries the deterministic eventId repair gave it
    (`repair-<kind>-...`): a re-import of a log that repair wrote to once.
    """
    reason = event.data.get("reason")
    kind = reason.get("kind") if isinstance(reason, dict) else None
    if event.type != TURN_END or kind not in RESERVED_TURN_END_KINDS:
        return
    if is_repair_event(event, kind):
        return
    raise ValidationError(
        "RESERVED_TURN_END_KIND",
        f"turn/end kind {kind!r} is written only by crash repair or fork; a turn the user "
        "interrupted ends with kind 'aborted' (or 'error', 'blocked', ...)",
        field="data.reason",
    )


def tool_error_closer(call: ToolCallState, cause: RepairCause, last_time: int) -> NewEvent:
    """The error `tool/result` for one pending call."""
    started = call.call_seq is not None
    message: JsonObject = {
        "role": "toolResult",
        "toolCallId": call.call_id,
        "toolName": call.name,
        "content": [{"type": "text", "text": repair_text(call, cause)}],
        "isError": True,
        "timestamp": last_time,
    }
    data: JsonObject = {
        "turn": call.turn,
        "step": call.step,
        "message": message,
        "error": {
            "code": TOOL_OUTCOME_UNKNOWN if started else TOOL_NOT_STARTED,
            "reason": repair_reason(cause),
        },
    }
    return NewEvent(
        type=TOOL_RESULT,
        data=data,
        event_id=repair_event_id(cause, call.turn, str(call.step), "result", call.call_id),
        surface_op=APPEND,
        source_event_seqs=(call.call_seq,) if call.call_seq is not None else (),
    )


def open_turn_closers(
    source: Sequence[Event] | StructureState, cause: RepairCause, last_time: int | None = None
) -> list[NewEvent]:
    """The events that complete the open turn, or `[]` for a balanced log.

    `source` is either the structure state of the log (e.g. `SessionFold`'s) or events: the
    whole log, or any window of it that starts at or before the open turn's `turn/start`.
    `last_time` defaults to the last event's time when events are given; it is required with a
    state. It is stamped into the synthetic messages' `timestamp`.
    """
    if isinstance(source, StructureState):
        state = source
        if last_time is None:
            raise ValueError("open_turn_closers: last_time is required with a StructureState")
    else:
        state = fold_structure(list(source), validate=False)
        if last_time is None:
            last_time = source[-1].time if source else 0
    turn = state.open_turn
    if turn is None:
        return []
    closers = [tool_error_closer(call, cause, last_time) for call in state.pending_calls]
    if state.open_step is not None:
        closers.append(
            NewEvent(
                type=STEP_END,
                data={"turn": turn, "step": state.open_step},
                event_id=repair_event_id(cause, turn, str(state.open_step), "step-end"),
            )
        )
    closers.append(
        NewEvent(
            type=TURN_END,
            data={"turn": turn, "reason": {"kind": cause}},
            event_id=repair_event_id(cause, turn, "turn-end"),
        )
    )
    return closers


def commit_closers(closers: Sequence[NewEvent], next_seq: int, time: int) -> list[Event]:
    """The closers as committed events (seqs from `next_seq`, all at `time`), e.g. for a
    read-only reader that shows the repair of a crashed session in memory only."""
    return [event.committed(next_seq + offset, time) for offset, event in enumerate(closers)]


def fork_seed(source: Sequence[Event] | StructureState, last_time: int | None = None) -> list[NewEvent]:
    """What a fork's own log starts with (SPEC §8): `session/end-seed {inherited: true}`, then
    the closers of a turn open at the cut (cause `forked`).

    `source` and `last_time` are as for `open_turn_closers`, describing the parent up to the
    cut. The service writes this into every fork; the Pi importer plans its forks with it, so an
    imported fork's seqs are the ones the service gives it.
    """
    return [NewEvent(SESSION_END_SEED, {"inherited": True}), *open_turn_closers(source, "forked", last_time)]
