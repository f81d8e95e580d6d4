"""Turn, step and tool-call structure (SPEC §3), checked at append as a small state machine.

Like the surface, it is split into `plan_structure_event` (validates, mutates nothing) and
`apply_structure_plan` (commits). The state is what crash repair and resume need: the open
turn and step, and the tool calls of the open step in transcript order with the seq of their
`tool/call` when one was recorded.

Decisions (what a harness expects):

- `turn/start`, `turn/end`, `step/start`, `step/end` follow the numbering and nesting rules.
- Execution events need the open step and name it: `assistant/message` and `tool/result`
  appends, `tool/call` and `assistant/attempt` must carry `turn` and `step` equal to the open
  ones.
- `system/message` and `user/message` appends may stand anywhere: outside any turn (a prompt
  written before `turn/start`), inside a turn before `step/start`, or inside a step. Harnesses
  do all three. If they carry `turn` (and optionally `step`), those must name the open turn
  (and step); `step` without `turn` is refused.
- Replace events (compaction summaries, tool-result trims, prompt changes) and appended
  model-only copies (`data.source.kind == "copy"`, e.g. Pi's kept entries re-appended after a
  compaction) rewrite history: their `turn`/`step` describe the original they restate, so they
  are not checked against the open turn, do not open tool calls and do not pair with one.
  A replace that takes the last node carrying a pending call's `toolCall` block off the
  surface either restates the block (the call now rides on the replacing node) or drops it (a
  voice answer cut to what was heard): a dropped call is no longer pending for crash repair, and a
  writer's `tool/result` for it is refused (TOOL_RESULT_CALL_DROPPED), as either would answer a
  call the model history does not hold; a copy or replace that restates a dropped call's
  block puts it back (`plan_restated_calls`). A copy or a replace restates only the calls of
  the messages it cites (`sourceEventSeqs`, `tool_calls.restated_call`), not every call of an
  id it carries: a later step may reuse an earlier step's id. A `tool/call` for a dropped call
  is still accepted: it records that the tool really started, which stays true.
- Other known log-only events (`compaction/*`) are free, but a `turn`/`step` they carry must
  name the open turn/step. `request/*` and `session/end-seed` are allowed anywhere and not
  checked; unknown (ignorable) types are never checked.
- `turn/end` kinds `interrupted` and `forked` are accepted here (repair and fork write them
  through the same fold); `repair.check_writer_turn_end` is where the service refuses them
  from writers.
- `step/end` with calls still lacking results is allowed (a cancelled or failed step leaves
  unrun calls); the calls of a step are forgotten when it ends, as in dsh.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sessionlog.core.errors import ValidationError
from sessionlog.core.events import APPEND, Event, Replace
from sessionlog.core.messages import call_ids, is_copy, message_of, tool_call_blocks
from sessionlog.core.tool_calls import (
    ToolCallState,
    check_tool_call,
    check_tool_call_blocks,
    check_tool_result,
    restated_call,
)
from sessionlog.core.vocabulary import (
    ASSISTANT_ATTEMPT,
    ASSISTANT_MESSAGE,
    COMPACTION_END,
    COMPACTION_START,
    COMPACTION_SUMMARY,
    STEP_END,
    STEP_START,
    SURFACE_TYPES,
    SYSTEM_MESSAGE,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_END_KINDS,
    TURN_START,
    USER_MESSAGE,
)

RESERVED_TURN_END_KINDS: frozenset[str] = frozenset({"interrupted", "forked"})
"""Turn-end kinds written only by crash repair and fork, never by a writer (SPEC §3)."""

IN_STEP_TYPES: frozenset[str] = frozenset({ASSISTANT_MESSAGE, TOOL_RESULT, TOOL_CALL, ASSISTANT_ATTEMPT})
"""Execution events: they must sit in the open step and name it."""

POSITIONED_TYPES: frozenset[str] = frozenset(
    {SYSTEM_MESSAGE, USER_MESSAGE, COMPACTION_START, COMPACTION_SUMMARY, COMPACTION_END}
)
"""Events allowed anywhere, whose optional `turn`/`step` must name the open turn/step."""


@dataclass(slots=True)
class StructureState:
    """Where the log stands: last/open turn, last/open step, calls of the open step."""

    last_turn: int = 0
    open_turn: int | None = None
    last_step: int = 0
    open_step: int | None = None
    calls: dict[str, ToolCallState] = field(default_factory=dict)

    @property
    def pending_calls(self) -> list[ToolCallState]:
        """Calls of the open step without a result whose block the model still sees, in
        transcript order: the calls crash repair answers."""
        return [call for call in self.calls.values() if call.result_seq is None and call.on_surface]

    def snapshot(self) -> StructureState:
        """A copy to restore on rollback: O(calls of the open step)."""
        return StructureState(self.last_turn, self.open_turn, self.last_step, self.open_step, dict(self.calls))

    def restore(self, snapshot: StructureState) -> None:
        """Put back a state taken with `snapshot`."""
        self.last_turn = snapshot.last_turn
        self.open_turn = snapshot.open_turn
        self.last_step = snapshot.last_step
        self.open_step = snapshot.open_step
        self.calls = dict(snapshot.calls)


PlanKind = Literal[
    "turn_start", "turn_end", "step_start", "step_end", "open_calls", "restate_calls", "call_started", "result"
]


@dataclass(slots=True, init=False)
class StructurePlan:
    """One validated structural transition that has not mutated the state yet (not frozen,
    though nothing changes it: built per event, see `fold._Plan`)."""

    kind: PlanKind
    seq: int
    number: int = 0
    calls: tuple[ToolCallState, ...] = ()
    call_id: str = ""

    def __init__(
        self, kind: PlanKind, seq: int, number: int = 0, calls: tuple[ToolCallState, ...] = (), call_id: str = ""
    ) -> None:
        # Written out (compiled, a generated one stays interpreted): see `core.events.NewEvent`.
        self.kind = kind
        self.seq = seq
        self.number = number
        self.calls = calls
        self.call_id = call_id


def _number(data: dict[str, Any], name: str, event: Event) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValidationError(
            f"BAD_{name.upper()}_NUMBER",
            f"{event.type} at seq {event.seq}: data.{name} must be a positive integer, got {value!r}",
            field=f"data.{name}",
            seq=event.seq,
        )
    return value


def _required(data: dict[str, Any], name: str, event: Event) -> int:
    value = _number(data, name, event)
    if value is None:
        raise ValidationError(
            "STRUCTURE_FIELD_MISSING",
            f"{event.type} at seq {event.seq}: data.{name} is required",
            field=f"data.{name}",
            seq=event.seq,
        )
    return value


def check_turn_open(state: StructureState, event: Event, turn: int) -> None:
    """An event naming a turn needs that turn to be the open one."""
    if state.open_turn is None:
        raise ValidationError(
            "NO_OPEN_TURN",
            f"{event.type} at seq {event.seq} names turn {turn}, but no turn is open",
            field="data.turn",
            seq=event.seq,
        )
    if turn != state.open_turn:
        raise ValidationError(
            "TURN_MISMATCH",
            f"{event.type} at seq {event.seq} names turn {turn}, but the open turn is {state.open_turn}",
            field="data.turn",
            seq=event.seq,
        )


def check_step_open(state: StructureState, event: Event, step: int) -> None:
    """An event naming a step needs that step to be the open one."""
    if state.open_step is None:
        raise ValidationError(
            "NO_OPEN_STEP",
            f"{event.type} at seq {event.seq} names step {step}, but no step is open",
            field="data.step",
            seq=event.seq,
        )
    if step != state.open_step:
        raise ValidationError(
            "STEP_MISMATCH",
            f"{event.type} at seq {event.seq} names step {step}, but the open step is {state.open_step}",
            field="data.step",
            seq=event.seq,
        )


def check_position(state: StructureState, event: Event) -> None:
    """Optional `turn`/`step` fields must name the open turn/step; `step` needs `turn`."""
    turn = _number(event.data, "turn", event)
    step = _number(event.data, "step", event)
    if step is not None and turn is None:
        raise ValidationError(
            "STEP_WITHOUT_TURN",
            f"{event.type} at seq {event.seq} names step {step} but no turn",
            field="data.turn",
            seq=event.seq,
        )
    if turn is not None:
        check_turn_open(state, event, turn)
    if step is not None:
        check_step_open(state, event, step)


def check_in_step(state: StructureState, event: Event) -> tuple[int, int]:
    """Execution events carry `turn` and `step`, naming the open turn and step; returns them."""
    turn, step = _required(event.data, "turn", event), _required(event.data, "step", event)
    check_turn_open(state, event, turn)
    check_step_open(state, event, step)
    return turn, step


def check_turn_start(state: StructureState, event: Event) -> int:
    """`turn/start {turn}` only when no turn is open, numbered last + 1."""
    turn = _required(event.data, "turn", event)
    if state.open_turn is not None:
        raise ValidationError(
            "TURN_ALREADY_OPEN",
            f"turn/start {turn} at seq {event.seq}: turn {state.open_turn} is still open",
            field="data.turn",
            seq=event.seq,
        )
    if turn != state.last_turn + 1:
        raise ValidationError(
            "TURN_NOT_CONTIGUOUS",
            f"turn/start at seq {event.seq}: turn {turn} does not follow turn {state.last_turn} "
            f"(expected {state.last_turn + 1})",
            field="data.turn",
            seq=event.seq,
        )
    return turn


def check_turn_end_reason(event: Event) -> None:
    """`turn/end` carries `reason: {kind}` with a kind from the vocabulary."""
    reason = event.data.get("reason")
    kind = reason.get("kind") if isinstance(reason, dict) else None
    if kind not in TURN_END_KINDS:
        raise ValidationError(
            "BAD_TURN_END_REASON",
            f"turn/end at seq {event.seq}: reason.kind must be one of {sorted(TURN_END_KINDS)}, got {kind!r}",
            field="data.reason",
            seq=event.seq,
        )


def check_turn_end(state: StructureState, event: Event) -> int:
    """`turn/end {turn, reason}` closes the open turn, which has no open step."""
    turn = _required(event.data, "turn", event)
    check_turn_open(state, event, turn)
    if state.open_step is not None:
        raise ValidationError(
            "TURN_END_WITH_OPEN_STEP",
            f"turn/end {turn} at seq {event.seq}: step {state.open_step} is still open",
            field="type",
            seq=event.seq,
        )
    check_turn_end_reason(event)
    return turn


def check_step_start(state: StructureState, event: Event) -> int:
    """`step/start {turn, step}` inside the open turn, no step open, numbered last + 1."""
    turn = _required(event.data, "turn", event)
    step = _required(event.data, "step", event)
    check_turn_open(state, event, turn)
    if state.open_step is not None:
        raise ValidationError(
            "STEP_ALREADY_OPEN",
            f"step/start {step} at seq {event.seq}: step {state.open_step} is still open",
            field="data.step",
            seq=event.seq,
        )
    if step != state.last_step + 1:
        raise ValidationError(
            "STEP_NOT_CONTIGUOUS",
            f"step/start at seq {event.seq}: step {step} of turn {turn} does not follow step "
            f"{state.last_step} (expected {state.last_step + 1})",
            field="data.step",
            seq=event.seq,
        )
    return step


def plan_restated_calls(state: StructureState, event: Event, shadowed: Sequence[int]) -> StructurePlan | None:
    """What a replace or a model-only copy does to the open step's calls: a call's block rides
    on the surface nodes that carry it (`ToolCallState.blocks`); those a replace takes off the
    surface (`shadowed`) no longer carry it, and the event's node does if its message restates
    the `toolCall` block (same id, and `_restates`). A call stays on the surface while any node
    carries it (a second copy of the message a replace took), is back on it when a copy or a
    replace restates it, and is dropped when none is left, keeping the seq of the replace that
    dropped it (what a refused result names). None when it touches no call.

    Only for replaces and copies: O(calls of the open step), and for each call whose id the
    event's message carries O(the event's sources + the nodes that call was carried by)."""
    if not state.calls:
        return None
    gone = set(shadowed)
    kept = set(call_ids(event))
    moved: list[ToolCallState] = []
    for call in state.calls.values():
        blocks = call.blocks
        left = tuple(seq for seq in blocks if seq not in gone)
        restated = call.call_id in kept and _restates(call, event)
        if restated:
            left += (event.seq,)
        if left == blocks:
            continue
        carried_by = (*call.carried_by, event.seq) if restated else call.carried_by
        if left:
            moved.append(call.carried(left[-1], left[:-1], True, carried_by))
        else:
            moved.append(call.carried(event.seq, (), False, carried_by))
    return StructurePlan("restate_calls", event.seq, calls=tuple(moved)) if moved else None


def _restates(call: ToolCallState, event: Event) -> bool:
    """Whether `event`, a replace or a model-only copy whose message holds a `toolCall` block of
    `call`'s id, restates `call` rather than another call of that id (an earlier step's: ids are
    unique within a step only). Both are told by what they stand for: the event restates the
    call when it cites (`sourceEventSeqs`) a node that carried the call's block or, while the
    call is dropped, the replace that dropped it (`block_seq`, the `replaced_by` of a refused
    result), which stands for the message it cut (`restated_call`). A replace cites every node
    it covers, so one covering a node that carries the block restates the call; one that
    covers and cites only an earlier step's message does not, and puts no dropped call back."""
    carriers = {*call.carried_by, *(() if call.on_surface else (call.block_seq,))}
    return restated_call(event.source_event_seqs, lambda seq: call.origin if seq in carriers else None) is not None


def plan_structure_event(state: StructureState, event: Event, shadowed: Sequence[int] = ()) -> StructurePlan | None:
    """Validate one event against the structure and prepare its transition; mutates nothing.
    `shadowed` is what a replace takes off the surface (its surface plan's)."""
    kind = event.type
    if isinstance(event.surface_op, Replace) or is_copy(event):
        return plan_restated_calls(state, event, shadowed)
    if kind == TURN_START:
        return StructurePlan("turn_start", event.seq, check_turn_start(state, event))
    if kind == TURN_END:
        return StructurePlan("turn_end", event.seq, check_turn_end(state, event))
    if kind == STEP_START:
        return StructurePlan("step_start", event.seq, check_step_start(state, event))
    if kind == STEP_END:
        check_in_step(state, event)
        return StructurePlan("step_end", event.seq)
    if kind in IN_STEP_TYPES:
        turn, step = check_in_step(state, event)
        if kind == ASSISTANT_MESSAGE:
            calls = check_tool_call_blocks(event, state.calls, turn, step)
            return StructurePlan("open_calls", event.seq, calls=calls) if calls else None
        if kind == TOOL_CALL:
            return StructurePlan("call_started", event.seq, call_id=check_tool_call(event, state.calls, turn, step))
        if kind == TOOL_RESULT:
            return StructurePlan("result", event.seq, call_id=check_tool_result(event, state.calls, turn, step))
        return None
    if kind in POSITIONED_TYPES:
        check_position(state, event)
    return None


def trusted_structure_plan(state: StructureState, event: Event, shadowed: Sequence[int] = ()) -> StructurePlan | None:
    """The transition of an already validated event, without checks (cold load, repair scan).

    Lenient on purpose: an event that the checks would refuse changes nothing it cannot
    describe, so scanning a window of a log that starts at a `turn/start` is safe.
    """
    kind = event.type
    data = event.data
    if isinstance(event.surface_op, Replace) or is_copy(event):
        return plan_restated_calls(state, event, shadowed)
    if kind in (TURN_START, TURN_END, STEP_START):
        number = data.get("step" if kind == STEP_START else "turn")
        if not isinstance(number, int) or isinstance(number, bool):
            return None
        plan_kind: PlanKind = "turn_start" if kind == TURN_START else "turn_end" if kind == TURN_END else "step_start"
        return StructurePlan(plan_kind, event.seq, number)
    if kind == STEP_END:
        return StructurePlan("step_end", event.seq)
    if kind == ASSISTANT_MESSAGE:
        turn, step = state.open_turn or 0, state.open_step or 0
        calls = []
        for block in tool_call_blocks(event):
            call_id, name = block.get("id"), block.get("name")
            if isinstance(call_id, str) and call_id not in state.calls:
                calls.append(
                    ToolCallState.opened(call_id, name if isinstance(name, str) else "", turn, step, event.seq)
                )
        return StructurePlan("open_calls", event.seq, calls=tuple(calls)) if calls else None
    if kind == TOOL_CALL:
        call_id = data.get("callId")
        if isinstance(call_id, str) and call_id in state.calls:
            return StructurePlan("call_started", event.seq, call_id=call_id)
        return None
    if kind == TOOL_RESULT:
        call_id = (message_of(event) or {}).get("toolCallId")
        if isinstance(call_id, str) and call_id in state.calls:
            return StructurePlan("result", event.seq, call_id=call_id)
    return None


def apply_structure_plan(state: StructureState, plan: StructurePlan | None) -> None:
    """Commit one previously planned transition."""
    if plan is None:
        return
    kind = plan.kind
    if kind == "turn_start":
        state.last_turn = max(state.last_turn, plan.number)
        state.open_turn = plan.number
        state.last_step = 0
        state.open_step = None
        state.calls = {}
    elif kind == "turn_end":
        state.open_turn = None
        state.open_step = None
        state.calls = {}
    elif kind == "step_start":
        state.last_step = max(state.last_step, plan.number)
        state.open_step = plan.number
        state.calls = {}
    elif kind == "step_end":
        state.open_step = None
        state.calls = {}
    elif kind in ("open_calls", "restate_calls"):
        for call in plan.calls:
            state.calls[call.call_id] = call
    elif kind == "call_started":
        call = state.calls[plan.call_id]
        state.calls[plan.call_id] = call.with_seqs(plan.seq, call.result_seq)
    else:
        call = state.calls[plan.call_id]
        state.calls[plan.call_id] = call.with_seqs(call.call_seq, plan.seq)


class WindowSurface:
    """The surface nodes that entered it within a window of the log, in surface order: what a
    structure fold needs to know of the surface (which of the open step's nodes a replace takes
    off) when it folds a window that starts at the open turn, not the whole log.

    They stand after every older node: appends go to the end, and a replace that starts at an
    older node and ends at one of these takes the place of the nodes it covers, so its node
    stands first of them. A replace of older nodes only lands among the older nodes, and is not
    one of these. From seq 0 every node is one of these, and this is the surface itself."""

    def __init__(self) -> None:
        self.nodes: list[int] = []

    def land(self, event: Event) -> tuple[int, ...]:
        """Put a surface event on; returns the nodes of the window it took off (surface order)."""
        op = event.surface_op
        if op == APPEND:
            self.nodes.append(event.seq)
            return ()
        if not isinstance(op, Replace) or op.end_seq not in self.nodes:
            return ()
        start = self.nodes.index(op.start_seq) if op.start_seq in self.nodes else 0
        end = self.nodes.index(op.end_seq)
        shadowed = tuple(self.nodes[start : end + 1])
        self.nodes[start : end + 1] = [event.seq]
        return shadowed


def fold_structure(events: list[Event] | tuple[Event, ...], *, validate: bool = True) -> StructureState:
    """Fold events into a structure state; with `validate=False` any window that starts at or
    before the open turn's `turn/start` gives the right open turn, step and calls."""
    state = StructureState()
    surface = WindowSurface()
    for event in events:
        shadowed = surface.land(event) if event.type in SURFACE_TYPES else ()
        if validate:
            plan = plan_structure_event(state, event, shadowed)
        else:
            plan = trusted_structure_plan(state, event, shadowed)
        apply_structure_plan(state, plan)
    return state


__all__ = [
    "IN_STEP_TYPES",
    "POSITIONED_TYPES",
    "RESERVED_TURN_END_KINDS",
    "StructurePlan",
    "StructureState",
    "ToolCallState",
    "WindowSurface",
    "apply_structure_plan",
    "check_in_step",
    "check_position",
    "check_step_open",
    "check_step_start",
    "check_turn_end",
    "check_turn_end_reason",
    "check_turn_open",
    "check_turn_start",
    "fold_structure",
    "plan_restated_calls",
    "plan_structure_event",
    "trusted_structure_plan",
]
