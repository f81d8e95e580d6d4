"""`pi --mode json` output → sessionlog events (seed 002), appended after a session's existing log.

`PiStreamParser` normalises the stream (both wire formats, messages rebuilt from their deltas with
`message_end` authoritative); `StreamIngest` maps its items to the events a harness would have
written live. Pi's vocabulary differs from the SPEC's: a Pi *agent run* (`agent_start` …
`agent_end`) is a sessionlog **turn**; a Pi *turn* (one model call and its tools) is a **step**.

- session header: ignorable `pi/session`, `data.pi` = the header (export reads it);
- `agent_start`: `turn/start` (a turn a previous run left open is closed first, kind `aborted`);
- `turn_start`: `step/start` (after `step/end` of an open step; `turn/start` first if no turn is open);
- `message_end` of an assistant message: `assistant/message {turn, step, message}` (a second one in
  a step opens a new step);
- `tool_execution_start`: `tool/call {turn, step, callId, name, arguments}`, the call really started
  (so crash repair can tell a started call from one that never ran);
- `message_end` of a tool result: `tool/result {turn, step, message}`; of other roles:
  `user/message {message, source}` (role `system` with content: `system/message`);
- `turn_end`: `step/end`; `agent_end`: `step/end` if open, then `turn/end` with the kind from the
  last `stopReason`;
- an incomplete message (no `message_end`) is reported (`StreamIngest.incomplete`), never dropped:
  an assistant message becomes `assistant/attempt {turn, step, partial, error, usage?}`, the SPEC's
  model call that produced no message, keeping what was streamed and its usage; another role an
  ignorable `pi/incomplete_message {message, reason}`;
- other events: ignorable `pi/stream/<type> {event}`; `tool_execution_update` (progress, superseded
  by the result) is not kept.

The same fallbacks as the file importer keep the log valid whatever the stream holds: a tool
result whose call is not pending in the open step, or an assistant message with unusable tool-call
ids, becomes a `user/message` carrying the message unchanged. A stream that ends inside a run
leaves the turn open: the service's crash repair completes it, as for any harness that stopped.

The events are checked against a `SessionFold` of the session (the caller replays the existing log
into it) and, given `limits`, by the envelope rules an append applies (`validate_proposal`: sizes
above all), so that a refusal names the stream's line and the seq before anything is sent, as the
file importer's does; like the service, the ingest writes the empty system head before the first
surface event of an empty session.
"""

from __future__ import annotations

from typing import Any

from sessionlog.core import validate
from sessionlog.core.errors import SessionLogError
from sessionlog.core.events import APPEND, JsonObject, NewEvent
from sessionlog.core.fold import SessionFold
from sessionlog.core.formats.pi.importer import (
    SOURCE_BY_ROLE,
    pi_event_type,
    tool_call_ids,
    turn_end_kind,
)
from sessionlog.core.formats.pi.layout import PI_KEY, PI_SESSION
from sessionlog.core.formats.pi.stream import (
    AgentEnd,
    AgentStart,
    IncompleteMessage,
    MessageCompleted,
    OtherEvent,
    SessionHeader,
    StreamItem,
    ToolExecutionStart,
    TurnEnd,
    TurnStart,
)
from sessionlog.core.limits import Limits
from sessionlog.core.messages import empty_system_head, is_empty_content
from sessionlog.core.vocabulary import (
    ASSISTANT_ATTEMPT,
    ASSISTANT_MESSAGE,
    STEP_END,
    STEP_START,
    SYSTEM_MESSAGE,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    UNPAIRED_TOOL_RESULT,
    UNSTRUCTURED,
    USER_MESSAGE,
)

INCOMPLETE_CODE = "INCOMPLETE_MESSAGE"
SKIPPED_STREAM_EVENTS: frozenset[str] = frozenset({"tool_execution_update", "message_update"})
STREAM_TYPE_PREFIX = "pi/stream/"


class StreamIngest:
    """Maps stream items to events, checking each against `fold` (the session so far) and, when
    `limits` is given, by the envelope rules the service applies to an append."""

    def __init__(self, fold: SessionFold, limits: Limits | None = None) -> None:
        self.fold = fold
        self.limits = limits
        self.incomplete: list[IncompleteMessage] = []
        self._stop_reason: Any = None
        self._step_has_message = False
        self._line: int | None = None

    def map(self, item: StreamItem, line: int | None = None) -> list[NewEvent]:
        """The events for one item (already applied to the fold), in order; `line`, the stream's
        line the item came from (if known), is named in a refusal."""
        self._line = line
        out: list[NewEvent] = []
        if isinstance(item, SessionHeader):
            self._emit(out, NewEvent(PI_SESSION, {PI_KEY: item.header}, ignorable=True))
        elif isinstance(item, AgentStart):
            self._close_turn(out, "aborted")
            self._start_turn(out)
        elif isinstance(item, TurnStart):
            self._start_step(out)
        elif isinstance(item, MessageCompleted):
            self._message(out, item.message)
        elif isinstance(item, ToolExecutionStart):
            self._tool_started(out, item)
        elif isinstance(item, TurnEnd):
            self._end_step(out)
        elif isinstance(item, AgentEnd):
            self._close_turn(out, turn_end_kind(self._stop_reason))
        elif isinstance(item, IncompleteMessage):
            self._incomplete(out, item)
        elif isinstance(item, OtherEvent) and item.type not in SKIPPED_STREAM_EVENTS:
            kind = pi_event_type(item.type).removeprefix("pi/")
            self._emit(out, NewEvent(STREAM_TYPE_PREFIX + kind, {"event": item.event}, ignorable=True))
        return out

    # --- items -----------------------------------------------------------------------------

    def _message(self, out: list[NewEvent], message: JsonObject) -> None:
        role = message.get("role")
        if role == "assistant":
            calls = tool_call_ids(message)
            if calls is None:
                self._user_side(out, message, UNSTRUCTURED)
                return
            if self._step_has_message or self.fold.open_step is None:
                self._start_step(out)
            state = self.fold.structure
            position = {"turn": state.open_turn, "step": state.open_step}
            self._emit(out, NewEvent(ASSISTANT_MESSAGE, {**position, "message": message}, surface_op=APPEND))
            self._step_has_message = True
            self._stop_reason = message.get("stopReason")
        elif role == "toolResult":
            state = self.fold.structure
            call_id = message.get("toolCallId")
            call = state.calls.get(call_id) if isinstance(call_id, str) and state.open_step is not None else None
            if call is None or call.result_seq is not None:
                self._user_side(out, message, UNPAIRED_TOOL_RESULT)
                return
            position = {"turn": state.open_turn, "step": state.open_step}
            self._emit(out, NewEvent(TOOL_RESULT, {**position, "message": message}, surface_op=APPEND))
        else:
            self._user_side(out, message, None)

    def _user_side(self, out: list[NewEvent], message: JsonObject, source: str | None) -> None:
        role = message.get("role")
        kind = source or SOURCE_BY_ROLE.get(str(role), str(role))
        event_type = USER_MESSAGE
        if role == "system" and source is None and not is_empty_content(message.get("content")):
            event_type = SYSTEM_MESSAGE
        self._emit(out, NewEvent(event_type, {"message": message, "source": {"kind": kind}}, surface_op=APPEND))

    def _tool_started(self, out: list[NewEvent], item: ToolExecutionStart) -> None:
        state = self.fold.structure
        call = state.calls.get(item.tool_call_id) if item.tool_call_id is not None else None
        if call is None or call.call_seq is not None or call.result_seq is not None or call.name != item.tool_name:
            return  # not a call of this step's assistant message: its result, if any, says what happened
        data = {
            "turn": state.open_turn,
            "step": state.open_step,
            "callId": call.call_id,
            "name": call.name,
            "arguments": item.args,
        }
        self._emit(out, NewEvent(TOOL_CALL, data))

    def _incomplete(self, out: list[NewEvent], item: IncompleteMessage) -> None:
        self.incomplete.append(item)
        if item.role not in (None, "assistant"):
            note: JsonObject = {"message": item.message, "reason": item.reason}
            self._emit(out, NewEvent("pi/incomplete_message", note, ignorable=True))
            return
        if self.fold.open_step is None or self._step_has_message:
            self._start_step(out)
        state = self.fold.structure
        data: JsonObject = {
            "turn": state.open_turn,
            "step": state.open_step,
            "partial": item.message,
            "error": {"code": INCOMPLETE_CODE, "reason": item.reason},
        }
        usage = item.message.get("usage")
        if isinstance(usage, dict):
            data["usage"] = usage
        self._emit(out, NewEvent(ASSISTANT_ATTEMPT, data))
        self._step_has_message = True

    # --- structure -------------------------------------------------------------------------

    def _start_turn(self, out: list[NewEvent]) -> None:
        self._emit(out, NewEvent(TURN_START, {"turn": self.fold.last_turn + 1}))
        self._stop_reason = None

    def _start_step(self, out: list[NewEvent]) -> None:
        if self.fold.open_turn is None:
            self._start_turn(out)
        self._end_step(out)
        state = self.fold.structure
        self._emit(out, NewEvent(STEP_START, {"turn": state.open_turn, "step": state.last_step + 1}))
        self._step_has_message = False

    def _end_step(self, out: list[NewEvent]) -> None:
        state = self.fold.structure
        if state.open_step is not None:
            self._emit(out, NewEvent(STEP_END, {"turn": state.open_turn, "step": state.open_step}))
        self._step_has_message = False

    def _close_turn(self, out: list[NewEvent], kind: str) -> None:
        turn = self.fold.open_turn
        if turn is None:
            return
        self._end_step(out)
        self._emit(out, NewEvent(TURN_END, {"turn": turn, "reason": {"kind": kind}}))
        self._stop_reason = None

    def _emit(self, out: list[NewEvent], event: NewEvent) -> None:
        if self.fold.first_surface_needs_system_head(event):
            self._commit(out, empty_system_head())
        self._commit(out, event)

    def _commit(self, out: list[NewEvent], event: NewEvent) -> None:
        """Check `event` as an append would be, fold it and keep it; a refusal keeps its class and
        reason and names the stream's line (when known), the seq and the event's type."""
        seq = self.fold.next_seq
        try:
            if self.limits is not None:
                validate.validate_proposal(event, limits=self.limits)
            self.fold.apply(event.committed(seq, self.fold.last_time))
        except SessionLogError as exc:
            where = f"line {self._line} (seq {seq})" if self._line is not None else f"seq {seq}"
            raise exc.located(f"pi event stream: {where}: {event.type}", line=self._line, seq=seq) from None
        out.append(event)


__all__ = ["INCOMPLETE_CODE", "StreamIngest"]
