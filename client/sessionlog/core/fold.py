"""`SessionFold`: the incremental fold of one session, used by the server on every append.

It composes the pure parts (surface, structure, headers, stats, messages) and adds what a
server needs around them:

- **Cost.** `apply` is O(1) for every event but a replace (O(surface), a C-level splice);
  reading the model history after pure tail growth costs nothing extra, because a list of
  projected messages is kept parallel to the surface and grows with it. A replace invalidates
  the cached history, which is rebuilt once on the next read.
- **Trust.** `replay(events, validate=False)` builds every piece of state from a log that was
  validated at append, without re-checking it (a cold load). Seq contiguity is always checked.
- **Atomic batches.** `checkpoint()` returns a mark; `rollback(mark)` undoes everything
  applied since, newest first, in O(events since the mark); `release(mark)` forgets a mark once
  its batch is durable. Marks nest (several pipelined batches of one session may be in flight;
  rolling back an older mark also undoes the newer batches). While no mark is held nothing is
  journalled, so a fold without batches in flight keeps no undo history.
- **Nothing changes when a check fails.** `apply` plans (validates) first and commits only a
  fully validated plan.

The reference implementations of each read (for `at_seq`) are in `core/projections/`; the
property tests check that this fold agrees with them at every prefix.
"""

from __future__ import annotations

from collections.abc import Iterable
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
from sessionlog.core.structure import (
    StructurePlan,
    StructureState,
    ToolCallState,
    apply_structure_plan,
    plan_structure_event,
    trusted_structure_plan,
)
from sessionlog.core.surface import (
    SurfacePlan,
    SurfaceState,
    apply_surface_plan,
    plan_surface_event,
    undo_surface_plan,
)
from sessionlog.core.vocabulary import REQUEST_HEADER, SESSION_END_SEED, SURFACE_TYPES, SYSTEM_MESSAGE


@dataclass(frozen=True, slots=True)
class _Plan:
    """Everything one event will change, computed (and validated) before anything changes."""

    event: Event
    surface: SurfacePlan | None
    structure: StructurePlan | None
    header: HeaderState | None
    message: JsonObject | None


@dataclass(slots=True)
class _Undo:
    """What one applied event overwrote, so rollback can put it back exactly."""

    plan: _Plan
    last_time: int
    last_type: str | None
    header: HeaderState | None
    stats: StatsAccumulator
    structure: StructureState | None
    shadowed_messages: list[JsonObject | None] = field(default_factory=list)


class SessionFold:
    """The folded state of one session's log, maintained event by event."""

    def __init__(self) -> None:
        self._next_seq = 0
        self._last_time = 0
        self._last_type: str | None = None
        self._surface = SurfaceState()
        self._surface_events: dict[int, Event] = {}
        self._messages: list[JsonObject | None] = []
        self._none_messages = 0
        self._history: list[JsonObject] | None = []
        self._structure = StructureState()
        self._latest_header: HeaderState | None = None
        self._stats = StatsAccumulator()
        self._journal: list[_Undo] = []
        self._journal_base = 0
        self._marks: list[tuple[int, int]] = []  # (token, journal position), oldest first
        self._next_token = 0

    # ----------------------------------------------------------------- building

    @classmethod
    def replay(cls, events: Iterable[Event], *, validate: bool = True) -> SessionFold:
        """Fold a whole log; `validate=False` trusts it (cold load) but builds all state."""
        fold = cls()
        for event in events:
            fold._commit(fold._plan(event, validate=validate))
        return fold

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
        surface = plan_surface_event(self._surface, event, self._event_at, validate=validate)
        if validate:
            structure = plan_structure_event(self._structure, event)
        else:
            structure = trusted_structure_plan(self._structure, event)
        header = None
        if event.type == REQUEST_HEADER:
            generation = self._surface.replace_generation
            if validate:
                check_header_event(self._latest_header, event, generation=generation)
            header = header_state(event, generation=generation)
        message = project_message(event) if surface is not None else None
        return _Plan(event, surface, structure, header, message)

    def _commit(self, plan: _Plan) -> None:
        event = plan.event
        undo = None
        if self._marks:
            undo = _Undo(
                plan,
                self._last_time,
                self._last_type,
                self._latest_header,
                self._stats.copy(),
                self._structure.snapshot() if plan.structure is not None else None,
            )
        if plan.surface is not None:
            shadowed = self._apply_messages(plan.surface, plan.message)
            if undo is not None:
                undo.shadowed_messages = shadowed
            apply_surface_plan(self._surface, plan.surface)
            self._surface_events[event.seq] = event
        apply_structure_plan(self._structure, plan.structure)
        if plan.header is not None:
            self._latest_header = plan.header
        self._stats.add(event)
        self._next_seq += 1
        self._last_time = event.time
        self._last_type = event.type
        if undo is not None:
            self._journal.append(undo)

    def _apply_messages(self, plan: SurfacePlan, message: JsonObject | None) -> list[JsonObject | None]:
        """Keep the projected-message list parallel to the surface; return what a replace removed."""
        if plan.kind == "append":
            self._messages.append(message)
            if message is None:
                self._none_messages += 1
            elif self._history is not None:
                self._history.append(message)
            return []
        shadowed = self._messages[plan.start_index : plan.end_index + 1]
        self._messages[plan.start_index : plan.end_index + 1] = [message]
        self._none_messages += (message is None) - sum(1 for m in shadowed if m is None)
        self._history = None
        return shadowed

    def _undo_messages(self, plan: SurfacePlan, shadowed: list[JsonObject | None]) -> None:
        if plan.kind == "append":
            message = self._messages.pop()
            if message is None:
                self._none_messages -= 1
            elif self._history is not None:
                self._history.pop()
            return
        removed = self._messages[plan.start_index]
        self._messages[plan.start_index : plan.start_index + 1] = shadowed
        self._none_messages += sum(1 for m in shadowed if m is None) - (removed is None)
        self._history = None

    def _event_at(self, seq: int) -> Event:
        return self._surface_events[seq]

    # ----------------------------------------------------------------- batches

    def checkpoint(self) -> int:
        """Start journalling; returns a mark (a unique token) to `rollback` to or `release`."""
        token = self._next_token
        self._next_token += 1
        self._marks.append((token, self._journal_base + len(self._journal)))
        return token

    def _find_mark(self, mark: int, verb: str) -> int:
        for index, (token, _) in enumerate(self._marks):
            if token == mark:
                return index
        raise ValueError(f"{verb}: {mark} is not a live checkpoint")

    def rollback(self, mark: int) -> None:
        """Undo every event applied since `mark` (newest first); marks taken after it are dropped."""
        index = self._find_mark(mark, "rollback")
        position = self._marks[index][1]
        while self._journal_base + len(self._journal) > position:
            self._undo(self._journal.pop())
        del self._marks[index:]
        self._trim_journal()

    def release(self, mark: int) -> None:
        """Forget `mark` (its batch is durable); journal older than every live mark is dropped.

        Call it for every mark that is not rolled back, or the journal keeps growing."""
        del self._marks[self._find_mark(mark, "release")]
        self._trim_journal()

    def _trim_journal(self) -> None:
        position = self._journal_base + len(self._journal)
        # Marks are taken in journal order, so the oldest live mark holds the lowest position.
        keep_from = self._marks[0][1] if self._marks else position
        drop = keep_from - self._journal_base
        if drop > 0:
            del self._journal[:drop]
            self._journal_base = keep_from

    def _undo(self, undo: _Undo) -> None:
        plan = undo.plan
        if plan.surface is not None:
            undo_surface_plan(self._surface, plan.surface)
            self._undo_messages(plan.surface, undo.shadowed_messages)
            del self._surface_events[plan.event.seq]
        if undo.structure is not None:
            self._structure.restore(undo.structure)
        self._latest_header = undo.header
        self._stats = undo.stats
        self._next_seq -= 1
        self._last_time = undo.last_time
        self._last_type = undo.last_type

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
        return bool(nodes) and self._surface_events[nodes[0]].type == SYSTEM_MESSAGE

    # ----------------------------------------------------------------- reads

    def surface_view(self) -> dict[str, Any]:
        """`{nodes, replaceGeneration}` (a copy)."""
        return self._surface.view()

    def model_history(self) -> list[JsonObject]:
        """The projected messages in surface order (a new list over shared message dicts)."""
        if self._history is None:
            self._history = [m for m in self._messages if m is not None]
        return list(self._history)

    def model_history_since(self, index: int) -> list[JsonObject]:
        """The messages from `index` on: O(returned messages) while no replace rebuilt the cache."""
        if self._history is None:
            self._history = [m for m in self._messages if m is not None]
        return self._history[index:]

    def message_count(self) -> int:
        """How many messages the model history holds, in O(1)."""
        return len(self._messages) - self._none_messages

    def request(self) -> dict[str, Any]:
        """`{"request", "sha256", "headerSeq"}` for the head of the log (see projections.request)."""
        return request_view(self._latest_header, self.model_history())

    def stats(self) -> dict[str, Any]:
        """The SPEC §5 stats of the whole log (see projections.stats for the rules)."""
        return self._stats.as_dict(events=self._next_seq, messages=self.message_count())

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
