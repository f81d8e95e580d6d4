"""Tool-call pairing within a step (SPEC §3): toolCall blocks, `tool/call`, `tool/result`.

An assistant message's `toolCall` blocks (Pi shape `{"type": "toolCall", "id", "name",
"arguments"}`) open the calls of its step; a `tool/call` records that a call really started
(written before its side effects, so crash repair can say "outcome unknown"); a `tool/result`
answers one call, once. The checks take the calls of the open step and its numbers, and are
used by `structure.py`'s state machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from sessionlog.core.errors import ValidationError
from sessionlog.core.events import Event
from sessionlog.core.messages import message_of, tool_call_blocks


@dataclass(frozen=True, slots=True, init=False)
class ToolCallState:
    """One tool call of the open step, opened by a `toolCall` block of an assistant message.

    `block_seq` is the surface node that carries the call's block: the assistant message that
    opened it, or the latest replace or model-only copy that restates it; `copies` are the other
    surface nodes that carry it too (two copies of one message), so a replace of one of them
    leaves the call on the surface. Once replaces took every such node off the surface without
    restating the block (a voice answer cut to what the user heard), `on_surface` is false and
    `block_seq` stays the seq of the replace that dropped it. The model no longer sees the call,
    so crash repair writes no result for it and a writer's result is refused
    (`check_tool_result`): either would answer a call missing from the model history
    (`structure.plan_restated_calls`).

    `carried_by` is every node that ever carried the block, on the surface or not: the message
    that opened the call first, then each replace or copy that restated it. A model-only copy
    or a replace restates the call only if it cites one of them, or the replace that dropped
    it while it is dropped (`restated_call`, `structure._restates`): ids are unique within a
    step only, so a message of an earlier step carrying the same id holds another call.
    It grows by one per restatement within the step, and is forgotten with the step.
    """

    call_id: str
    name: str
    turn: int
    step: int
    block_seq: int
    call_seq: int | None = None
    result_seq: int | None = None
    on_surface: bool = True
    copies: tuple[int, ...] = ()
    carried_by: tuple[int, ...] = ()

    def __init__(
        self,
        call_id: str,
        name: str,
        turn: int,
        step: int,
        block_seq: int,
        call_seq: int | None = None,
        result_seq: int | None = None,
        on_surface: bool = True,
        copies: tuple[int, ...] = (),
        carried_by: tuple[int, ...] = (),
    ) -> None:
        # Written out (compiled, a generated one stays interpreted): see `core.events.NewEvent`.
        object.__setattr__(self, "call_id", call_id)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "turn", turn)
        object.__setattr__(self, "step", step)
        object.__setattr__(self, "block_seq", block_seq)
        object.__setattr__(self, "call_seq", call_seq)
        object.__setattr__(self, "result_seq", result_seq)
        object.__setattr__(self, "on_surface", on_surface)
        object.__setattr__(self, "copies", copies)
        object.__setattr__(self, "carried_by", carried_by)

    @classmethod
    def opened(cls, call_id: str, name: str, turn: int, step: int, seq: int) -> ToolCallState:
        """A call just opened by the `toolCall` block of the assistant message at `seq`."""
        return cls(call_id, name, turn, step, seq, carried_by=(seq,))

    def with_seqs(self, call_seq: int | None, result_seq: int | None) -> ToolCallState:
        """This call with the seqs of its start and its result (`structure.apply_structure_plan`).

        The copies here and in `carried` are built field by field: `dataclasses.replace` is
        interpreted, reads the class's fields on every call and took 1.8 % of the server's samples
        under 16 streaming sessions (bench/PROFILE.md, round 39); a test checks each copy keeps
        every field it does not set."""
        return ToolCallState(
            self.call_id,
            self.name,
            self.turn,
            self.step,
            self.block_seq,
            call_seq,
            result_seq,
            self.on_surface,
            self.copies,
            self.carried_by,
        )

    def carried(
        self, block_seq: int, copies: tuple[int, ...], on_surface: bool, carried_by: tuple[int, ...]
    ) -> ToolCallState:
        """This call as other surface nodes carry it (`structure.plan_restated_calls`)."""
        return ToolCallState(
            self.call_id,
            self.name,
            self.turn,
            self.step,
            block_seq,
            self.call_seq,
            self.result_seq,
            on_surface,
            copies,
            carried_by,
        )

    @property
    def blocks(self) -> tuple[int, ...]:
        """The surface nodes that carry the call's block now, oldest first (none once dropped)."""
        return (*self.copies, self.block_seq) if self.on_surface else ()

    @property
    def origin(self) -> int:
        """The seq of the assistant message that opened the call."""
        return self.carried_by[0]


class CallKey(NamedTuple):
    """A tool call's identity on the surface, across steps: the seq of the node that opened it
    and its id. Neither alone names a call: a later step may reuse an id, and one message
    opens several calls (`surface._pair_calls`)."""

    opened_at: int
    call_id: str


def restated_call(sources: Iterable[int], call_carried_by: Callable[[int], int | None]) -> int | None:
    """THE restatement rule, for one call id the `toolCall` blocks of a model-only copy or of a
    replace carry: the event restates the call whose block a node it cites (`sourceEventSeqs`)
    carried, never one it does not cite, whatever calls of that id are open. Calls are named by
    the seq of the message that opened them; `call_carried_by(seq)` names the call of that id
    the node at `seq` carried (None: none, or not known). Of several, the latest opened (the
    open step's, as an event citing both an earlier step's message and the open step's
    restates the open one). None when no cited node carried one: a copy citing nothing (the
    service refuses it, COPY_SOURCES_EMPTY; only a trusted replay could hold one) restates no
    call.

    Used by the structure (`structure._restates`: does a copy or a replace restate a call of
    the open step) and the surface (`surface._pair_calls`: which call a copy on the surface
    stands for). O(sources)."""
    return max((call for seq in sources if (call := call_carried_by(seq)) is not None), default=None)


def check_tool_call_blocks(
    event: Event, calls: Mapping[str, ToolCallState], turn: int, step: int
) -> tuple[ToolCallState, ...]:
    """An assistant message's `toolCall` blocks each have a string id (new in this step) and name."""
    opened: dict[str, ToolCallState] = {}
    for block in tool_call_blocks(event):
        call_id, name = block.get("id"), block.get("name")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
            raise ValidationError(
                "BAD_TOOL_CALL_BLOCK",
                f"assistant/message at seq {event.seq}: a toolCall block needs a non-empty string id "
                f"and a string name, got id {call_id!r}, name {name!r}",
                field="data.message.content",
                seq=event.seq,
            )
        if call_id in opened or call_id in calls:
            raise ValidationError(
                "TOOL_CALL_ID_DUPLICATE",
                f"assistant/message at seq {event.seq}: tool call id {call_id!r} is already used in "
                f"step {step} of turn {turn}",
                field="data.message.content",
                seq=event.seq,
            )
        opened[call_id] = ToolCallState.opened(call_id, name, turn, step, event.seq)
    return tuple(opened.values())


def check_tool_call(event: Event, calls: Mapping[str, ToolCallState], turn: int, step: int) -> str:
    """`tool/call` pairs with a toolCall block of the open step (same name), once, before its result."""
    call_id, name = event.data.get("callId"), event.data.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
        raise ValidationError(
            "BAD_TOOL_CALL",
            f"tool/call at seq {event.seq}: callId must be a non-empty string and name a string",
            field="data.callId",
            seq=event.seq,
        )
    call = calls.get(call_id)
    if call is None:
        raise ValidationError(
            "TOOL_CALL_UNKNOWN",
            f"tool/call at seq {event.seq}: call {call_id!r} has no toolCall block in step "
            f"{step} of turn {turn} (the assistant message comes first)",
            field="data.callId",
            seq=event.seq,
        )
    if name != call.name:
        raise ValidationError(
            "TOOL_CALL_NAME_MISMATCH",
            f"tool/call at seq {event.seq}: call {call_id!r} is named {name!r}, "
            f"but its toolCall block names {call.name!r}",
            field="data.name",
            seq=event.seq,
        )
    if call.result_seq is not None:
        raise ValidationError(
            "TOOL_CALL_AFTER_RESULT",
            f"tool/call at seq {event.seq}: call {call_id!r} already has its result at seq {call.result_seq}",
            field="data.callId",
            seq=event.seq,
        )
    if call.call_seq is not None:
        raise ValidationError(
            "TOOL_CALL_DUPLICATE",
            f"tool/call at seq {event.seq}: call {call_id!r} was already recorded at seq {call.call_seq}",
            field="data.callId",
            seq=event.seq,
        )
    return call_id


def check_tool_error(event: Event) -> None:
    """`data.error` is allowed only on a result whose message says `isError: true`."""
    message = message_of(event) or {}
    if event.data.get("error") is not None and message.get("isError") is not True:
        raise ValidationError(
            "TOOL_ERROR_WITHOUT_IS_ERROR",
            f"tool/result at seq {event.seq}: data.error needs message.isError true",
            field="data.error",
            seq=event.seq,
        )


def check_tool_result(event: Event, calls: Mapping[str, ToolCallState], turn: int, step: int) -> str:
    """An appended `tool/result` answers a call of the open step that has no result yet."""
    message = message_of(event) or {}
    call_id = message.get("toolCallId")
    if not isinstance(call_id, str) or not call_id:
        raise ValidationError(
            "TOOL_RESULT_CALL_ID_MISSING",
            f"tool/result at seq {event.seq}: data.message.toolCallId must be a non-empty string",
            field="data.message.toolCallId",
            seq=event.seq,
        )
    call = calls.get(call_id)
    if call is None:
        raise ValidationError(
            "TOOL_RESULT_UNKNOWN_CALL",
            f"tool/result at seq {event.seq}: call {call_id!r} is not a tool call of step {step} of turn {turn}",
            field="data.message.toolCallId",
            seq=event.seq,
        )
    if call.result_seq is not None:
        raise ValidationError(
            "TOOL_RESULT_DUPLICATE",
            f"tool/result at seq {event.seq}: call {call_id!r} already has its result at seq {call.result_seq}",
            field="data.message.toolCallId",
            seq=event.seq,
        )
    if not call.on_surface:
        # SPEC §3 refuses a result for an unknown call: the model no longer knows this one, and
        # its result would stand in the model history with no call before it.
        raise ValidationError(
            "TOOL_RESULT_CALL_DROPPED",
            f"tool/result at seq {event.seq}: call {call_id!r} is no longer in the model history: the replace "
            f"at seq {call.block_seq} took its toolCall block off the surface; restate the block (a replace of "
            f"seq {call.block_seq}, or a replace or model-only copy citing seq {call.origin}, that keeps it) before "
            f"answering the call",
            field="data.message.toolCallId",
            seq=event.seq,
            replaced_by=call.block_seq,
        )
    check_tool_error(event)
    return call_id
