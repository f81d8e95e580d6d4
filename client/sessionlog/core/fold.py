"""`SessionFold`: the incremental fold of one session, used by the server on every append.

It composes the pure parts (surface, structure, headers, stats, messages) and adds what a
server needs around them:

- **Cost.** `apply` is O(1) for every event but a replace (O(surface), a C-level splice);
  reading the model history after pure tail growth costs nothing extra, because a list of
  projected messages is kept parallel to the surface and grows with it. A replace invalidates
  the cached history, which is rebuilt once on the next read.
- **Trust.** `replay(events, validate=False)` builds every piece of state from a log that was
  validated at append, without re-checking it (a cold load). Seq contiguity is always checked.
- **Atomic batches.** `checkpoint()` returns a mark (the small state as it was: seq, time,
  header, stats, structure, copied once per batch); `rollback(mark)` undoes everything
  applied since, newest first, in O(events since the mark); `release(mark)` forgets a mark
  once its batch is accepted. Marks nest (rolling back an older mark also undoes the newer
  batches). While no mark is held nothing is journalled: the server holds one only while it
  plans a batch of several events (one event needs none, as `apply` is atomic), so its folds
  keep no undo history between batches.
- **Nothing changes when a check fails.** `apply` plans (validates) first and commits only a
  fully validated plan.

The reference implementations of each read (for `at_seq`) are in `core/projections/`; the
property tests check that this fold agrees with them at every prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionlog.core.errors import ValidationError
from sessionlog.core.events import Event, JsonObject, NewEvent
from sessionlog.core.headers import (
    HeaderDecision,
    HeaderState,
    check_header_event,
    decide_header,
    header_state,
)
from sessionlog.core.messages import project_message
from sessionlog.core.projections.request import request_view
from sessionlog.core.projections.stats import StatsAccumulator
from sessionlog.core.repair import RepairCause, open_turn_closers
from sessionlog.core.snapshot import FoldSnapshot
from sessionlog.core.structure import (
    StructurePlan,
    StructureState,
    ToolCallState,
    apply_structure_plan,
    plan_structure_event,
    trusted_structure_plan,
)
from sessionlog.core.surface import (
    SurfaceNode,
    SurfacePlan,
    SurfaceState,
    apply_surface_plan,
    plan_surface_event,
    surface_node,
    undo_surface_plan,
)
from sessionlog.core.vocabulary import REQUEST_HEADER, SESSION_END_SEED, SURFACE_TYPES, SYSTEM_MESSAGE

RECENT_REPLACES = 64
"""Replaces whose surface positions a fold remembers, so a history copy read a few replaces ago
re-reads only from the first message they changed (`first_changed_message`)."""
FOLD_BASE_BYTES = 4096
"""Estimated bytes of a fold without surface nodes (structure, header, stats, containers)."""
NODE_BYTES = 120
"""Estimated bytes per surface node of a fold without messages (seq, node record, slots)."""


@dataclass(slots=True, init=False)
class _Plan:
    """Everything one event will change, computed (and validated) before anything changes.

    Not frozen, like the other records built for every appended event (the surface and
    structure plans, the server's decoded event and append plan): a frozen dataclass sets each
    field through `object.__setattr__` (~0.2 µs a field here; these five records cost ~21,000
    instructions an event frozen, bench/PROFILE.md round 10). Nothing changes a plan once it is
    built."""

    event: Event
    surface: SurfacePlan | None
    structure: StructurePlan | None
    header: HeaderState | None
    message: JsonObject | None
    node: SurfaceNode | None

    def __init__(
        self,
        event: Event,
        surface: SurfacePlan | None,
        structure: StructurePlan | None,
        header: HeaderState | None,
        message: JsonObject | None,
        node: SurfaceNode | None,
    ) -> None:
        # Written out (compiled, a generated one stays interpreted): see `core.events.NewEvent`.
        self.event = event
        self.surface = surface
        self.structure = structure
        self.header = header
        self.message = message
        self.node = node


@dataclass(slots=True)
class _Mark:
    """A checkpoint: the small state as it was (restored whole on rollback) and where the
    journal of surface changes stood. Taken once per batch, so per event nothing is copied."""

    token: int
    position: int
    next_seq: int
    last_time: int
    last_type: str | None
    header: HeaderState | None
    stats: StatsAccumulator
    structure: StructureState


@dataclass(slots=True)
class _Undo:
    """What one applied surface event overwrote, so rollback can put it back exactly."""

    plan: SurfacePlan
    shadowed_nodes: list[SurfaceNode] = field(default_factory=list)
    shadowed_empty: list[int] = field(default_factory=list)
    shadowed_messages: dict[int, JsonObject] = field(default_factory=dict)


class SessionFold:
    """The folded state of one session's log, maintained event by event.

    Per surface node it keeps the node's seq, a `SurfaceNode` (type, and a digest for tool
    results) and, only with `keep_messages=True`, the projected message. The server folds
    with `keep_messages=False`, so a live session's memory follows its surface and not the
    size of its messages: it builds model histories from stored message bytes instead.
    """

    def __init__(self, *, keep_messages: bool = True) -> None:
        self._keep_messages = keep_messages
        self._next_seq = 0
        self._last_time = 0
        self._last_type: str | None = None
        self._surface = SurfaceState()
        self._nodes: dict[int, SurfaceNode] = {}
        self._empty: set[int] = set()
        self._messages: dict[int, JsonObject] = {}
        self._history: list[int] | None = []
        self._structure = StructureState()
        self._latest_header: HeaderState | None = None
        self._stats = StatsAccumulator()
        self._journal: list[_Undo] = []
        self._journal_base = 0
        self._marks: list[_Mark] = []  # oldest first
        self._next_token = 0
        self._replace_starts: list[int] = []
        """The surface position each of the latest replaces started at, oldest first (up to
        2 * RECENT_REPLACES; snapshots keep the latest RECENT_REPLACES, so a fold loaded from
        one answers `first_changed_message` as the fold that wrote it did)."""

    # ----------------------------------------------------------------- building

    @classmethod
    def replay(cls, events: Iterable[Event], *, validate: bool = True, keep_messages: bool = True) -> SessionFold:
        """Fold a whole log; `validate=False` trusts it (cold load) but builds all state."""
        fold = cls(keep_messages=keep_messages)
        fold.extend(events, validate=validate)
        return fold

    def extend(self, events: Iterable[Event], *, validate: bool = False) -> None:
        """Fold more events onto this state (a snapshot's tail, a fast-forward)."""
        for event in events:
            self._commit(self._plan(event, validate=validate))

    def check(self, event: Event) -> None:
        """Validate `event` as the next event of the log, without changing anything."""
        self._plan(event, validate=True)

    def apply(self, event: Event) -> None:
        """Validate and apply `event`; if it raises, nothing has changed."""
        self._commit(self._plan(event, validate=True))

    def _plan(self, event: Event, *, validate: bool) -> _Plan:
        if event.seq != self._next_seq:
            raise ValidationError(
                "SEQ_NOT_CONTIGUOUS",
                f"seq {event.seq} is not the next seq of the log, {self._next_seq}",
                field="seq",
                seq=event.seq,
                next_seq=self._next_seq,
            )
        if validate and self._next_seq > 0 and event.time < self._last_time:
            raise ValidationError(
                "TIME_DECREASING",
                f"time {event.time} of seq {event.seq} is before the previous event's time {self._last_time}",
                field="time",
                seq=event.seq,
            )
        surface = plan_surface_event(self._surface, event, self._node_at, validate=validate)
        shadowed = surface.shadowed if surface is not None else ()
        if validate:
            structure = plan_structure_event(self._structure, event, shadowed)
        else:
            structure = trusted_structure_plan(self._structure, event, shadowed)
        header = None
        if event.type == REQUEST_HEADER:
            generation = self._surface.replace_generation
            if validate:
                check_header_event(self._latest_header, event, generation=generation)
            header = header_state(event, generation=generation)
        message = project_message(event) if surface is not None else None
        node = surface_node(event) if surface is not None else None
        return _Plan(event, surface, structure, header, message, node)

    def _commit(self, plan: _Plan) -> None:
        event = plan.event
        if plan.surface is not None:
            assert plan.node is not None
            undo = _Undo(plan.surface) if self._marks else None
            self._apply_nodes(plan.surface, plan.node, plan.message, undo)
            apply_surface_plan(self._surface, plan.surface)
            if plan.surface.kind == "replace":
                self._note_replace(plan.surface.start_index)
            if undo is not None:
                self._journal.append(undo)
        apply_structure_plan(self._structure, plan.structure)
        if plan.header is not None:
            self._latest_header = plan.header
        self._stats.add(event)
        self._next_seq += 1
        self._last_time = event.time
        self._last_type = event.type

    def _note_replace(self, start_index: int) -> None:
        starts = self._replace_starts
        starts.append(start_index)
        if len(starts) > 2 * RECENT_REPLACES:
            del starts[:RECENT_REPLACES]

    def _apply_nodes(
        self, plan: SurfacePlan, node: SurfaceNode, message: JsonObject | None, undo: _Undo | None
    ) -> None:
        """Keep the per-node state in step with the surface; a replace forgets what it shadows."""
        seq = plan.seq
        if plan.kind == "replace":
            for old in plan.shadowed:
                gone = self._nodes.pop(old)
                was_empty = old in self._empty
                self._empty.discard(old)
                old_message = self._messages.pop(old, None)
                if undo is not None:
                    undo.shadowed_nodes.append(gone)
                    if was_empty:
                        undo.shadowed_empty.append(old)
                    if old_message is not None:
                        undo.shadowed_messages[old] = old_message
            self._history = None
        self._nodes[seq] = node
        if message is None:
            self._empty.add(seq)
        else:
            if self._keep_messages:
                self._messages[seq] = message
            if plan.kind == "append" and self._history is not None:
                self._history.append(seq)

    def _undo_nodes(self, plan: SurfacePlan, undo: _Undo) -> None:
        seq = plan.seq
        del self._nodes[seq]
        was_empty = seq in self._empty
        self._empty.discard(seq)
        self._messages.pop(seq, None)
        if plan.kind == "append":
            if not was_empty and self._history is not None:
                self._history.pop()
            return
        for old, node in zip(plan.shadowed, undo.shadowed_nodes, strict=True):
            self._nodes[old] = node
        self._empty.update(undo.shadowed_empty)
        self._messages.update(undo.shadowed_messages)
        self._history = None

    def _node_at(self, seq: int) -> SurfaceNode:
        return self._nodes[seq]

    # ----------------------------------------------------------------- batches

    def checkpoint(self) -> int:
        """Start journalling; returns a mark (a unique token) to `rollback` to or `release`."""
        token = self._next_token
        self._next_token += 1
        self._marks.append(
            _Mark(
                token,
                self._journal_base + len(self._journal),
                self._next_seq,
                self._last_time,
                self._last_type,
                self._latest_header,
                self._stats.copy(),
                self._structure.snapshot(),
            )
        )
        return token

    def _find_mark(self, mark: int, verb: str) -> int:
        for index, taken in enumerate(self._marks):
            if taken.token == mark:
                return index
        raise ValueError(f"{verb}: {mark} is not a live checkpoint")

    def rollback(self, mark: int) -> None:
        """Undo every event applied since `mark` (newest first); marks taken after it are dropped."""
        index = self._find_mark(mark, "rollback")
        taken = self._marks[index]
        while self._journal_base + len(self._journal) > taken.position:
            undo = self._journal.pop()
            undo_surface_plan(self._surface, undo.plan)
            if undo.plan.kind == "replace" and self._replace_starts:
                self._replace_starts.pop()
            self._undo_nodes(undo.plan, undo)
        self._next_seq = taken.next_seq
        self._last_time = taken.last_time
        self._last_type = taken.last_type
        self._latest_header = taken.header
        self._stats = taken.stats
        self._structure.restore(taken.structure)
        del self._marks[index:]
        self._trim_journal()

    def release(self, mark: int) -> None:
        """Forget `mark` (its batch is accepted); journal older than every live mark is dropped.

        Call it for every mark that is not rolled back, or the journal keeps growing."""
        del self._marks[self._find_mark(mark, "release")]
        self._trim_journal()

    def _trim_journal(self) -> None:
        position = self._journal_base + len(self._journal)
        # Marks are taken in journal order, so the oldest live mark holds the lowest position.
        keep_from = self._marks[0].position if self._marks else position
        drop = keep_from - self._journal_base
        if drop > 0:
            del self._journal[:drop]
            self._journal_base = keep_from

    # ----------------------------------------------------------------- state

    @property
    def next_seq(self) -> int:
        """The seq the next event must have."""
        return self._next_seq

    @property
    def event_count(self) -> int:
        """How many events the log holds (seqs 0..next_seq-1)."""
        return self._next_seq

    @property
    def last_time(self) -> int:
        """The time of the last event (0 for an empty log)."""
        return self._last_time

    @property
    def repair_time(self) -> int:
        """The commit time of repair events: the last event's time (SPEC §8)."""
        return self._last_time

    @property
    def last_event_type(self) -> str | None:
        """The type of the last event (None for an empty log)."""
        return self._last_type

    @property
    def ends_with_end_seed(self) -> bool:
        """The log ends with `session/end-seed` (resume then appends no second one)."""
        return self._last_type == SESSION_END_SEED

    @property
    def open_turn(self) -> int | None:
        """The open turn's number, or None when every turn has ended."""
        return self._structure.open_turn

    @property
    def open_step(self) -> int | None:
        """The open step's number within the open turn, or None."""
        return self._structure.open_step

    @property
    def last_turn(self) -> int:
        """The highest turn number started so far (0 when none)."""
        return self._structure.last_turn

    @property
    def pending_calls(self) -> list[ToolCallState]:
        """Tool calls of the open step without a result, in transcript order."""
        return self._structure.pending_calls

    @property
    def structure(self) -> StructureState:
        """The structure state (read it, do not mutate it)."""
        return self._structure

    @property
    def replace_generation(self) -> int:
        """How many replaces have landed on the surface."""
        return self._surface.replace_generation

    @property
    def latest_header(self) -> HeaderState | None:
        """The latest `request/header`, with the surface generation when it was logged."""
        return self._latest_header

    @property
    def has_system_head(self) -> bool:
        """Node 0 exists and is a `system/message`."""
        nodes = self._surface.nodes
        return bool(nodes) and self._nodes[nodes[0]].type == SYSTEM_MESSAGE

    # ----------------------------------------------------------------- reads

    def surface_view(self) -> dict[str, Any]:
        """`{nodes, replaceGeneration}` (a copy)."""
        return self._surface.view()

    def history_seqs(self) -> list[int]:
        """The seqs whose messages make the model history, in surface order (a new list)."""
        return list(self._history_seqs())

    def history_seqs_since(self, index: int) -> list[int]:
        """The history's seqs from message `index` on: O(returned) while no replace rebuilt it."""
        return self._history_seqs()[index:]

    def _history_seqs(self) -> list[int]:
        if self._history is None:
            empty = self._empty
            self._history = [seq for seq in self._surface.nodes if seq not in empty]
        return self._history

    def _need_messages(self) -> None:
        if not self._keep_messages:
            raise RuntimeError("this fold keeps no messages (keep_messages=False): read them from the log")

    def model_history(self) -> list[JsonObject]:
        """The projected messages in surface order (a new list over shared message dicts)."""
        self._need_messages()
        return [self._messages[seq] for seq in self._history_seqs()]

    def on_surface(self, seq: int) -> bool:
        """Whether `seq` is a node of the surface now, in O(1). A node once replaced never
        comes back (a copy is a new seq), so a node on the surface now was never replaced."""
        return seq in self._nodes

    @property
    def surface_size(self) -> int:
        """How many nodes the surface holds, in O(1)."""
        return len(self._surface.nodes)

    def first_changed_message(self, since_generation: int) -> int | None:
        """The index of the first message of the model history that a replace since
        `since_generation` may have changed: the messages before it are those the history held
        at that generation (replaces rewrite from their start on, appends add at the end).
        None when it is not known (more than the remembered replaces, or none since)."""
        moved = self._surface.replace_generation - since_generation
        if moved <= 0 or moved > min(len(self._replace_starts), RECENT_REPLACES):
            return None
        position = min(self._replace_starts[-moved:])
        nodes = self._surface.nodes
        return position - sum(1 for seq in self._empty if nodes.index(seq) < position)

    def message_count(self) -> int:
        """How many messages the model history holds, in O(1)."""
        return len(self._surface.nodes) - len(self._empty)

    def request(self) -> dict[str, Any]:
        """`{"request", "sha256", "headerSeq"}` for the head of the log (see projections.request)."""
        return request_view(self._latest_header, self.model_history())

    def stats(self) -> dict[str, Any]:
        """The SPEC §5 stats of the whole log (see projections.stats for the rules)."""
        return self._stats.as_dict(events=self._next_seq, messages=self.message_count())

    def resident_bytes(self) -> int:
        """An estimate of this fold's memory (for the byte-bounded session cache); it leaves out
        kept messages, which only offline folds hold."""
        return FOLD_BASE_BYTES + len(self._surface.nodes) * NODE_BYTES

    # ----------------------------------------------------------------- snapshots

    def snapshot(self) -> FoldSnapshot:
        """The whole state as plain data (see `core.snapshot`): the state after the last applied
        event. With batches in flight it is the state once they are durable (the server stores
        it in the same transaction as the batch that reached it)."""
        return FoldSnapshot(
            next_seq=self._next_seq,
            last_time=self._last_time,
            last_type=self._last_type,
            nodes=list(self._surface.nodes),
            node_info=[self._nodes[seq] for seq in self._surface.nodes],
            empty=sorted(self._empty),
            replace_generation=self._surface.replace_generation,
            replace_starts=self._replace_starts[-RECENT_REPLACES:],
            structure=self._structure.snapshot(),
            header=self._latest_header,
            stats=self._stats.copy(),
        )

    @classmethod
    def from_snapshot(cls, snapshot: FoldSnapshot) -> SessionFold:
        """A fold (without messages) in the state a snapshot recorded."""
        fold = cls(keep_messages=False)
        fold._next_seq = snapshot.next_seq
        fold._last_time = snapshot.last_time
        fold._last_type = snapshot.last_type
        fold._surface = SurfaceState(list(snapshot.nodes), snapshot.replace_generation)
        fold._nodes = dict(zip(snapshot.nodes, snapshot.node_info, strict=True))
        fold._empty = set(snapshot.empty)
        fold._replace_starts = list(snapshot.replace_starts)
        fold._history = None
        fold._structure = snapshot.structure.snapshot()
        fold._latest_header = snapshot.header
        fold._stats = snapshot.stats.copy()
        return fold

    # ----------------------------------------------------------------- decisions

    def closers(self, cause: RepairCause) -> list[NewEvent]:
        """Events that complete the open turn (commit them at `repair_time`); [] if balanced."""
        return open_turn_closers(self._structure, cause, self._last_time)

    def decide_header(self, header: JsonObject, *, first_of_lease: bool) -> HeaderDecision:
        """Whether and why to log a reported header (SPEC §6), against this log's state."""
        return decide_header(
            self._latest_header,
            header,
            first_of_lease=first_of_lease,
            generation=self._surface.replace_generation,
        )

    def first_surface_needs_system_head(self, event: NewEvent) -> bool:
        """True when the log has no surface yet and `event` is a surface event other than a
        `system/message`: the server then appends `messages.empty_system_head()` first."""
        return not self._surface.nodes and event.type in SURFACE_TYPES and event.type != SYSTEM_MESSAGE

    def batch_needs_system_head(self, events: Sequence[NewEvent]) -> bool:
        """`first_surface_needs_system_head` of the batch's first event with a surface op; a log
        that has a surface answers at once, without looking through the batch."""
        if self._surface.nodes:
            return False
        first = next((event for event in events if event.surface_op is not None), None)
        return first is not None and self.first_surface_needs_system_head(first)
