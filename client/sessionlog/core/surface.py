"""The model-visible surface (SPEC §4): an ordered list of event seqs, folded from the log.

Ported from dsh `surface.ts`: `plan_surface_event` validates one event against the current
state and returns a plan without mutating anything; `apply_surface_plan` commits it. The full
fold (`fold_surface`) and the incremental `SessionFold` share both functions, so replay and
live append cannot disagree. `undo_surface_plan` reverses one applied plan exactly, which is
what batch rollback needs.

Costs: an append is O(1). A replace looks its endpoints up with `list.index` and splices the
list, O(surface) in C; replaces are rare (compaction, trimming, prompt changes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sessionlog.core import jsonvalue
from sessionlog.core.errors import ValidationError
from sessionlog.core.events import APPEND, Event, Replace
from sessionlog.core.messages import call_ids, check_message, is_copy, message_of, project_message
from sessionlog.core.tool_calls import CallKey, restated_call
from sessionlog.core.validate import check_surface_fields
from sessionlog.core.vocabulary import SURFACE_TYPES, SYSTEM_MESSAGE, TOOL_RESULT

EventLookup = Callable[[int], Event]
"""`event_at(seq)`: the committed event at an earlier seq (only surface nodes are asked for)."""


@dataclass(frozen=True, slots=True, init=False)
class SurfaceNode:
    """What the surface rules need to know of a node once it is on the surface.

    A replace is validated against the nodes it covers without their events: node 0's type
    (the system-head rule); for a `tool/result`, `rewrite_key`, a digest of everything but
    `message.content` (a trim may change only the content), and `answers`, the call id it
    answers; for an `assistant/message`, `calls`, the ids of its `toolCall` blocks (a replace
    may not leave a result without its call, `check_replace_keeps_calls`), `copy`, whether it
    is a model-only copy, and for a copy `sources`, the seqs it cites: a copy restates the calls
    of the messages it cites rather than opening new ones, and not any call of the same id (a
    later step may reuse one; `tool_calls.restated_call`). Keeping these instead
    of the events is what lets a live fold hold a few bytes per node whatever the messages weigh.
    """

    type: str
    rewrite_key: bytes | None = None
    calls: tuple[str, ...] = ()
    answers: str | None = None
    copy: bool = False
    sources: tuple[int, ...] = ()

    def __init__(
        self,
        type: str,
        rewrite_key: bytes | None = None,
        calls: tuple[str, ...] = (),
        answers: str | None = None,
        copy: bool = False,
        sources: tuple[int, ...] = (),
    ) -> None:
        # Written out (compiled, a generated one stays interpreted): see `core.events.NewEvent`.
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "rewrite_key", rewrite_key)
        object.__setattr__(self, "calls", calls)
        object.__setattr__(self, "answers", answers)
        object.__setattr__(self, "copy", copy)
        object.__setattr__(self, "sources", sources)


NodeLookup = Callable[[int], SurfaceNode]
"""`node_at(seq)`: what the rules need of the node at `seq` (only surface nodes are asked for)."""


def rewrite_key(event: Event) -> bytes:
    """The digest a tool-result trim must leave unchanged: sha256 of `data` without
    `message.content` (in `jsonvalue.digest_form`), cut to 16 bytes (collisions need a
    deliberate attack on one's own session, and would only let a trim change more than the
    content). Stored in fold snapshots: changing how it is computed changes FOLD_VERSION."""
    return hashlib.sha256(jsonvalue.digest_form(_without_content(event.data))).digest()[:16]


_SHARED_NODES: dict[str, SurfaceNode] = {kind: SurfaceNode(kind) for kind in SURFACE_TYPES}


def surface_node(event: Event) -> SurfaceNode:
    """The `SurfaceNode` of an event that lands on the surface (shared for all but tool results
    and assistant messages with tool calls)."""
    if event.type == TOOL_RESULT:
        call_id = (message_of(event) or {}).get("toolCallId")
        return SurfaceNode(TOOL_RESULT, rewrite_key(event), answers=call_id if isinstance(call_id, str) else None)
    calls = call_ids(event)
    if calls:
        if is_copy(event):
            return SurfaceNode(event.type, calls=calls, copy=True, sources=event.source_event_seqs)
        return SurfaceNode(event.type, calls=calls)
    return _SHARED_NODES.get(event.type) or SurfaceNode(event.type)


def event_nodes(event_at: EventLookup) -> NodeLookup:
    """A node lookup over full events (the reference fold, offline tools)."""
    return lambda seq: surface_node(event_at(seq))


@dataclass(slots=True)
class SurfaceState:
    """The surface: node seqs in surface order, and how many replaces have landed."""

    nodes: list[int] = field(default_factory=list)
    replace_generation: int = 0

    def view(self) -> dict[str, Any]:
        """The SPEC's read model `{nodes, replaceGeneration}` (a copy)."""
        return {"nodes": list(self.nodes), "replaceGeneration": self.replace_generation}


@dataclass(slots=True, init=False)
class SurfacePlan:
    """One validated surface transition that has not mutated the state yet.

    For a replace, `start_index..end_index` (inclusive) are surface positions and `shadowed`
    the node seqs leaving the surface, in surface order. Not frozen, though nothing changes it
    (built per event: see `fold._Plan`).
    """

    kind: Literal["append", "replace"]
    seq: int
    start_seq: int = -1
    end_seq: int = -1
    start_index: int = -1
    end_index: int = -1
    shadowed: tuple[int, ...] = ()

    def __init__(
        self,
        kind: Literal["append", "replace"],
        seq: int,
        start_seq: int = -1,
        end_seq: int = -1,
        start_index: int = -1,
        end_index: int = -1,
        shadowed: tuple[int, ...] = (),
    ) -> None:
        # Written out (compiled, a generated one stays interpreted): see `core.events.NewEvent`.
        self.kind = kind
        self.seq = seq
        self.start_seq = start_seq
        self.end_seq = end_seq
        self.start_index = start_index
        self.end_index = end_index
        self.shadowed = shadowed


@dataclass(frozen=True, slots=True)
class SurfaceFold:
    """Result of a full replay: the final surface and every replace in event order."""

    nodes: list[int]
    replace_generation: int
    replacements: tuple[SurfacePlan, ...]


def check_surface_head(state: SurfaceState, event: Event) -> None:
    """Node 0 is reserved for the system prompt: the first surface event is a system/message.

    The service inserts an empty `system/message` before a writer's first other surface event
    (see `SessionFold.first_surface_needs_system_head`), so a writer never trips this rule.
    """
    if not state.nodes and event.type != SYSTEM_MESSAGE:
        raise ValidationError(
            "SURFACE_HEAD_NOT_SYSTEM",
            f"surface: the first surface event must be a system/message (node 0), got {event.type} at seq {event.seq}",
            field="type",
            seq=event.seq,
        )


def check_sources_unique(event: Event) -> None:
    """`sourceEventSeqs` cites each seq once."""
    sources = event.source_event_seqs
    if len(set(sources)) != len(sources):
        duplicates = sorted({s for s in sources if sources.count(s) > 1})
        raise ValidationError(
            "SOURCES_DUPLICATE",
            f"sourceEventSeqs of seq {event.seq} cite {duplicates} more than once",
            field="sourceEventSeqs",
            seq=event.seq,
        )


def check_sources_earlier(event: Event) -> None:
    """`sourceEventSeqs` cite only earlier events (provenance points back in time)."""
    later = [s for s in event.source_event_seqs if s >= event.seq]
    if later:
        raise ValidationError(
            "SOURCES_NOT_EARLIER",
            f"sourceEventSeqs of seq {event.seq} must cite earlier seqs, not {later}",
            field="sourceEventSeqs",
            seq=event.seq,
        )


def check_copy_sources(event: Event) -> None:
    """An appended model-only copy (`data.source.kind == "copy"`) cites its original."""
    if is_copy(event) and not event.source_event_seqs:
        raise ValidationError(
            "COPY_SOURCES_EMPTY",
            f"surface: seq {event.seq} is a copy (source.kind copy) and must cite its original in sourceEventSeqs",
            field="sourceEventSeqs",
            seq=event.seq,
        )


def check_sources_cover(event: Event, shadowed: Sequence[int]) -> None:
    """A replace cites a non-empty source list that covers every node it replaces."""
    if not event.source_event_seqs:
        raise ValidationError(
            "REPLACE_SOURCES_EMPTY",
            f"surface replace: seq {event.seq} must cite the replaced nodes in sourceEventSeqs",
            field="sourceEventSeqs",
            seq=event.seq,
        )
    cited = set(event.source_event_seqs)
    missing = [s for s in shadowed if s not in cited]
    if missing:
        raise ValidationError(
            "REPLACE_SOURCES_NOT_COVERING",
            f"surface replace: sourceEventSeqs of seq {event.seq} must include every replaced node; missing {missing}",
            field="sourceEventSeqs",
            seq=event.seq,
        )


def _endpoint_index(state: SurfaceState, event: Event, name: str, endpoint: int) -> int:
    if endpoint >= event.seq:
        raise ValidationError(
            "SURFACE_REPLACE_NOT_EARLIER",
            f"surface replace: {name} seq {endpoint} is not earlier than the replacing seq {event.seq}",
            field="surfaceOp",
            seq=event.seq,
        )
    try:
        return state.nodes.index(endpoint)
    except ValueError:
        raise ValidationError(
            "SURFACE_RANGE_NOT_FOUND",
            f"surface replace: {name} seq {endpoint} is not on the surface",
            field="surfaceOp",
            seq=event.seq,
            replaced_by=None,  # the fold cannot tell; the service adds it from the log (ReplacementChain)
        ) from None


def replacement_range(state: SurfaceState, event: Event, op: Replace) -> tuple[int, int]:
    """Surface positions of a replace's endpoints; start at or before end in SURFACE order."""
    start_index = _endpoint_index(state, event, "start", op.start_seq)
    end_index = _endpoint_index(state, event, "end", op.end_seq)
    if start_index > end_index:
        raise ValidationError(
            "SURFACE_RANGE_REVERSED",
            f"surface replace: start seq {op.start_seq} (position {start_index}) is after end seq "
            f"{op.end_seq} (position {end_index}) in surface order",
            field="surfaceOp",
            seq=event.seq,
        )
    return start_index, end_index


def _without_content(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with `message.content` removed: what a tool-result trim must leave unchanged."""
    rest = dict(data)
    message = data.get("message")
    if isinstance(message, dict):
        rest["message"] = {k: v for k, v in message.items() if k != "content"}
    return rest


def check_tool_result_rewrite(event: Event, shadowed: Sequence[int], node_at: NodeLookup) -> None:
    """A tool/result replace rewrites exactly one current tool/result and changes only its content.

    This is the trimming path (a 30 MB output cut down after the fact): everything but
    `data.message.content` must be canonically equal to the original, so the call pairing,
    error code and turn/step stay true.
    """
    if event.type != TOOL_RESULT:
        return
    if len(shadowed) != 1:
        raise ValidationError(
            "TOOL_RESULT_REPLACE_NOT_SINGLE",
            f"surface replace: tool/result seq {event.seq} must replace exactly one node, "
            f"not {len(shadowed)} ({list(shadowed)})",
            field="surfaceOp",
            seq=event.seq,
        )
    original = node_at(shadowed[0])
    if original.type != TOOL_RESULT:
        raise ValidationError(
            "TOOL_RESULT_REPLACE_TARGET",
            f"surface replace: tool/result seq {event.seq} must replace a tool/result, "
            f"but seq {shadowed[0]} is a {original.type}",
            field="surfaceOp",
            seq=event.seq,
        )
    if rewrite_key(event) != original.rewrite_key:
        raise ValidationError(
            "TOOL_RESULT_REPLACE_CHANGES_MORE",
            f"surface replace: tool/result seq {event.seq} may change only message.content of seq {shadowed[0]}",
            field="data",
            seq=event.seq,
        )


def _pair_calls(
    entries: Iterable[tuple[int, SurfaceNode, dict[str, CallKey]]], ids: set[str]
) -> tuple[dict[tuple[int, str], CallKey], dict[int, CallKey | None]]:
    """Which call each node's `toolCall` block stands for (by the node's seq and the block's
    id), and which call each result answers (by the result's seq), for the call ids in `ids`,
    along surface order.

    A call is named by the seq of the node that opened it and its id (`CallKey`: a message
    opens one call per block). A message opens new calls (ids are unique within a step only: a
    later step may reuse one); a model-only copy stands for the call a node it cites carried
    (`tool_calls.restated_call`), and when none of its cited nodes is on the surface, opens one
    that later copies citing the same nodes stand for too (two copies of one message restate
    one call); `fixed` gives a node's calls outright (the replacing node takes over the calls
    of the blocks it covers). A block makes its call wait for a result unless the call already
    has one before it (a copy of an answered call does not take the result of a later call of
    its id). A result answers the latest call of its id still waiting, or none. O(nodes),
    memory by the surface."""
    waiting: dict[str, CallKey] = {}
    carried: dict[tuple[int, str], CallKey] = {}
    cited: dict[tuple[int, str], CallKey] = {}  # the calls off-surface nodes cited by copies carried
    done: set[CallKey] = set()
    answered: dict[int, CallKey | None] = {}
    for seq, node, fixed in entries:
        for call_id in node.calls:
            if call_id not in ids:
                continue
            call = fixed.get(call_id) or (
                _copied_call(node, seq, call_id, carried, cited) if node.copy else CallKey(seq, call_id)
            )
            carried[seq, call_id] = call
            if call not in done:
                waiting[call_id] = call
        if node.answers is not None and node.answers in ids:
            answer = answered[seq] = waiting.pop(node.answers, None)
            if answer is not None:
                done.add(answer)
    return carried, answered


def _copied_call(
    node: SurfaceNode,
    seq: int,
    call_id: str,
    carried: dict[tuple[int, str], CallKey],
    cited: dict[tuple[int, str], CallKey],
) -> CallKey:
    """The call of `call_id` that the copy at `seq` stands for (see `_pair_calls`). When no node
    it cites is known to carry one, the copy opens it, and what it cites is noted as carrying it
    (in `cited`, as those nodes are off the surface). A copy citing nothing (only a trusted
    replay holds one) opens a call of its own."""

    def call_carried_by(source: int) -> int | None:
        call = carried.get((source, call_id)) or cited.get((source, call_id))
        return None if call is None else call.opened_at

    opened_at = restated_call(node.sources, call_carried_by)
    if opened_at is not None:
        return CallKey(opened_at, call_id)
    call = CallKey(seq, call_id)
    for source in node.sources:
        cited[source, call_id] = call
    return call


def check_replace_keeps_calls(
    state: SurfaceState, event: Event, start_index: int, end_index: int, node_at: NodeLookup
) -> None:
    """A replace may not leave a `tool/result` on the surface whose call it takes off: when the
    nodes it covers carry the result's call and neither the replacing message restates the
    block nor a copy of it stays, the result would stand with no call before it, which model
    providers refuse (a voice answer cut to what was heard after its call was answered);
    REPLACE_ORPHANS_TOOL_RESULT. Cover the result too, or restate the block. A call is told by
    the node that opened it, not by its id alone: a later step may reuse the id of a call still
    on the surface, which is another call (`_pair_calls`). The same pairing then checks the
    converse, a result taken off while its call stays (`check_replace_keeps_results`).

    O(1) when the covered nodes carry and answer no call, else O(surface) (replaces are rare)."""
    nodes = state.nodes
    covered = nodes[start_index : end_index + 1]
    ids = {call_id for seq in covered for call_id in node_at(seq).calls}
    ids.update(answer for seq in covered if (answer := node_at(seq).answers) is not None)
    if not ids:
        return
    none: dict[str, CallKey] = {}
    carried, answered = _pair_calls(((seq, node_at(seq), none) for seq in nodes), ids)
    takes_over = {call_id: carried[seq, call_id] for seq in covered for call_id in node_at(seq).calls if call_id in ids}
    before, after = nodes[:start_index], nodes[end_index + 1 :]
    entries = [
        *((seq, node_at(seq), none) for seq in before),
        (event.seq, surface_node(event), takes_over),
        *((seq, node_at(seq), {c: carried[seq, c] for c in node_at(seq).calls if c in ids}) for seq in after),
    ]
    now_carried, now_answered = _pair_calls(entries, ids)
    for seq in after:
        call = answered.get(seq)
        if call is not None and now_answered.get(seq) != call:
            raise ValidationError(
                "REPLACE_ORPHANS_TOOL_RESULT",
                f"surface replace: seq {event.seq} takes the toolCall block of call {call.call_id!r} "
                f"(opened at seq {call.opened_at}) off the surface, but its tool/result at seq {seq} stays: the model "
                f"history would hold a result with no call before it; cover seq {seq} too, or restate the "
                f"block in the replacing message",
                field="surfaceOp",
                seq=event.seq,
                result_seq=seq,
            )
    check_replace_keeps_results(event, covered, answered, set(now_carried.values()), now_answered)


def check_replace_keeps_results(
    event: Event,
    covered: Sequence[int],
    answered: dict[int, CallKey | None],
    kept_calls: set[CallKey],
    now_answered: dict[int, CallKey | None],
) -> None:
    """A replace may not take a `tool/result` off the surface while its call's block stays: when
    a covered result answered a call that a node left on the surface (or the replacing message)
    still carries and no node of the new surface answers it, the model history would hold a
    call with no result after it, which model providers refuse (a lone result summarised into
    a user message); REPLACE_DROPS_TOOL_RESULT. Cover the call's block too, or replace the
    result with a trimmed tool/result. `answered` and `now_answered` are `_pair_calls` over the
    surface before and after the replace, `kept_calls` the calls a block still stands for after
    (each named by its opening node and its id, so a kept call of the same message, or of the
    same id in another step, is not this one).
    """
    still_answered = {call for call in now_answered.values() if call is not None}
    for seq in covered:
        call = answered.get(seq)
        if call is not None and call in kept_calls and call not in still_answered:
            raise ValidationError(
                "REPLACE_DROPS_TOOL_RESULT",
                f"surface replace: seq {event.seq} takes the tool/result at seq {seq} off the surface, but the "
                f"toolCall block of its call {call.call_id!r} (opened at seq {call.opened_at}) stays: the model "
                f"history would hold a call with no result after it; cover the call's block too, or replace "
                f"seq {seq} by a tool/result that changes only its content",
                field="surfaceOp",
                seq=event.seq,
                result_seq=seq,
            )


def check_system_head(state: SurfaceState, event: Event, start_index: int, end_index: int, node_at: NodeLookup) -> None:
    """Node-0 protection: a replace starting at a system/message node 0 is a system/message
    replacing exactly that node (a prompt change); compaction may not swallow the prompt."""
    if start_index != 0 or node_at(state.nodes[0]).type != SYSTEM_MESSAGE:
        return
    if event.type != SYSTEM_MESSAGE or end_index != 0:
        raise ValidationError(
            "SYSTEM_HEAD_PROTECTED",
            f"surface replace: seq {event.seq} ({event.type}) starts at node 0, the system prompt; "
            f"only a system/message replacing exactly node 0 may do that "
            f"(range covers {end_index + 1} nodes)",
            field="surfaceOp",
            seq=event.seq,
        )


def plan_surface_event(
    state: SurfaceState, event: Event, node_at: NodeLookup, *, validate: bool = True
) -> SurfacePlan | None:
    """Validate one event against the surface and prepare its transition; mutates nothing.

    Returns None for log-only events. With `validate=False` (a trusted cold load) only the
    positions are computed; a replace whose endpoints are missing still raises, because the
    state could not be built.
    """
    if validate:
        check_surface_fields(event)
    if event.type not in SURFACE_TYPES or event.surface_op is None:
        return None
    if validate:
        check_message(event)
        check_sources_unique(event)
        check_sources_earlier(event)
    op = event.surface_op
    if op == APPEND:
        if validate:
            check_surface_head(state, event)
            check_copy_sources(event)
        return SurfacePlan("append", event.seq)
    assert isinstance(op, Replace)
    start_index, end_index = replacement_range(state, event, op)
    shadowed = tuple(state.nodes[start_index : end_index + 1])
    if validate:
        check_sources_cover(event, shadowed)
        check_tool_result_rewrite(event, shadowed, node_at)
        check_system_head(state, event, start_index, end_index, node_at)
        check_replace_keeps_calls(state, event, start_index, end_index, node_at)
    return SurfacePlan("replace", event.seq, op.start_seq, op.end_seq, start_index, end_index, shadowed)


def apply_surface_plan(state: SurfaceState, plan: SurfacePlan | None) -> None:
    """Commit one previously validated transition: push, or splice and bump the generation."""
    if plan is None:
        return
    if plan.kind == "append":
        state.nodes.append(plan.seq)
        return
    state.nodes[plan.start_index : plan.end_index + 1] = [plan.seq]
    state.replace_generation += 1


def undo_surface_plan(state: SurfaceState, plan: SurfacePlan | None) -> None:
    """Reverse `apply_surface_plan(state, plan)`; only valid for the latest applied plan."""
    if plan is None:
        return
    if plan.kind == "append":
        state.nodes.pop()
        return
    state.nodes[plan.start_index : plan.start_index + 1] = list(plan.shadowed)
    state.replace_generation -= 1


def fold_surface(events: Sequence[Event], *, validate: bool = True) -> SurfaceFold:
    """The pure full replay of a log prefix (events must be seqs 0, 1, 2, … in order)."""
    state = SurfaceState()
    replacements: list[SurfacePlan] = []

    node_at = event_nodes(lambda seq: events[seq])
    for index, event in enumerate(events):
        if event.seq != index:
            raise ValidationError(
                "SEQ_NOT_CONTIGUOUS",
                f"surface fold: event at position {index} has seq {event.seq}, expected {index}",
                field="seq",
                seq=event.seq,
            )
        plan = plan_surface_event(state, event, node_at, validate=validate)
        apply_surface_plan(state, plan)
        if plan is not None and plan.kind == "replace":
            replacements.append(plan)
    return SurfaceFold(list(state.nodes), state.replace_generation, tuple(replacements))


class ReplacementChain:
    """Follows the replaces that took a seq off the surface, and then each replacing node in
    turn: why a replace naming that seq found it missing (SURFACE_RANGE_NOT_FOUND), and which
    node stands for it now (`detail`).

    Start it from the surface (in surface order) at an event at or after the seq's own, then
    `follow` the surface events after that one, in seq order, a page at a time (light rows do:
    only seq, type and surface op are read), while it returns False. It stops at the first
    replacing node that is on the surface now (`current`)."""

    def __init__(self, seq: int, nodes: Sequence[int], current: Callable[[int], bool]) -> None:
        self.seq = seq
        self.was_on_surface = seq in nodes
        self.chain: list[int] = []
        self._state = SurfaceState(list(nodes))
        self._current = current

    @property
    def done(self) -> bool:
        """Nothing more to follow: the seq never was a node, or its chain reached the surface."""
        return not self.was_on_surface or (bool(self.chain) and self._current(self.chain[-1]))

    def follow(self, events: Iterable[Event]) -> bool:
        """Fold more of the later surface events; returns `done`."""
        for event in events:
            if self.done:
                break
            plan = plan_surface_event(self._state, event, no_node_lookup, validate=False)
            apply_surface_plan(self._state, plan)
            if plan is not None and (self.chain[-1] if self.chain else self.seq) in plan.shadowed:
                self.chain.append(plan.seq)
        return self.done

    def detail(self) -> str:
        """What the chain tells a writer, for the refusal's message ('' when nothing)."""
        if not self.was_on_surface:
            return f"seq {self.seq} is a log-only event, never on the surface"
        if not self.chain:
            return ""
        steps = [f"the replace at seq {self.chain[0]} took it off"]
        steps += [
            f"then the one at seq {seq} took seq {before} off"
            for before, seq in zip(self.chain, self.chain[1:], strict=False)
        ]
        text = ", ".join(steps)
        return f"{text}; replace seq {self.chain[-1]} instead" if self.done else text


def no_node_lookup(seq: int) -> SurfaceNode:
    """The node lookup of a trusted surface scan (`validate=False`), which never asks for one."""
    raise AssertionError(f"a trusted surface scan looked up node {seq}")  # only validation asks


def surface_messages(nodes: Sequence[int], event_at: EventLookup) -> list[dict[str, Any]]:
    """The model history of `nodes`: each node through `project_message`, None dropped."""
    out: list[dict[str, Any]] = []
    for seq in nodes:
        message = project_message(event_at(seq))
        if message is not None:
            out.append(message)
    return out


__all__ = [
    "EventLookup",
    "NodeLookup",
    "ReplacementChain",
    "SurfaceFold",
    "SurfaceNode",
    "SurfacePlan",
    "SurfaceState",
    "apply_surface_plan",
    "check_copy_sources",
    "check_replace_keeps_calls",
    "check_replace_keeps_results",
    "check_sources_cover",
    "check_sources_earlier",
    "check_sources_unique",
    "check_surface_head",
    "check_system_head",
    "check_tool_result_rewrite",
    "event_nodes",
    "fold_surface",
    "no_node_lookup",
    "plan_surface_event",
    "replacement_range",
    "rewrite_key",
    "surface_messages",
    "surface_node",
    "undo_surface_plan",
]
