"""When an event happened, and the one rule that measures the time between two events.

An event's envelope `time` is its commit time: the service stamps it when the event lands. For a
live writer that is when the thing happened, give or take the network. For an import it is not:
a file of a month's work lands in one batch, every event at the same millisecond, so every
duration measured with commit times would be 0. An importer therefore puts the time the source
file records for an event into its data, as `data.recordedTime` (epoch ms, the clock of the
harness that wrote the file).

An event's **moment** is its recorded time when it has one, else its commit time, and says
which of the two clocks it is on. A duration is measured only between two moments on the same
clock: from a recorded time to a commit time (an imported turn the service closed when it forked
the session) it is unknown, never the months between the file and the import.

Where an event lies on a time axis (the OTLP trace) follows from the same rule
(`SessionClock`): a session is on the recorded clock once one of its events has a recorded
time, else on the commit clock. An event on the session's clock lies at its moment; one that is
not (the head the service inserts, what a fork or crash repair writes into an imported session)
lies at the latest recorded moment before it, or, in the prefix before the first one, at that
first one: never months away on the other clock, and marked as borrowed (`Placement.timed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeGuard

from sessionlog.core.errors import ValidationError
from sessionlog.core.events import Event, JsonObject

RECORDED_TIME = "recordedTime"
"""The data key of an event's recorded time (epoch ms), which an importer carries over."""


@dataclass(frozen=True, slots=True)
class Moment:
    """When an event happened (epoch ms), and whether the source recorded it (else: committed)."""

    ms: int
    recorded: bool


MAX_EPOCH_MS = (2**64 - 1) // 1_000_000
"""The latest time a trace can carry (OTLP's times are unsigned 64-bit nanoseconds; the year
2554). A recorded time outside 0 to this broke every OTLP export of its session."""


def is_epoch_ms(value: Any) -> TypeGuard[int]:
    """An integer from 0 to MAX_EPOCH_MS, as the envelope's `time` is (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_EPOCH_MS


def check_recorded_time(data: JsonObject) -> None:
    """A `data.recordedTime` that is present is epoch ms (`is_epoch_ms`): a malformed one would
    leave the event on the commit clock unnoticed, so it is refused at append (BAD_TIME)."""
    if RECORDED_TIME in data and not is_epoch_ms(data[RECORDED_TIME]):
        raise ValidationError(
            "BAD_TIME",
            f"data.{RECORDED_TIME} must be an integer of epoch ms from 0 to {MAX_EPOCH_MS}",
            field=f"data.{RECORDED_TIME}",
        )


def moment(event: Event) -> Moment:
    """The event's recorded time when its data carries a well-formed one, else its commit time."""
    recorded = event.data.get(RECORDED_TIME)
    if is_epoch_ms(recorded):
        return Moment(recorded, True)
    return Moment(event.time, False)


def elapsed_ms(start: Moment, end: Moment) -> int | None:
    """Milliseconds from `start` to `end`, or None (unknown) when they are on different clocks."""
    if start.recorded != end.recorded:
        return None
    return end.ms - start.ms


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an event lies on its session's time axis (epoch ms), and whether that is its own
    time on the session's clock (`timed`) or borrowed from the nearest event that has one."""

    ms: int
    timed: bool


@dataclass(slots=True)
class SessionClock:
    """The placement of a session's events (see the module docstring), folded event by event.

    `add` each event in seq order; `at(seq)` depends on the events folded so far only while the
    session is on the commit clock: the first recorded time moves the events before it (on the
    commit clock until then) to that time. Only an importer writes recorded times, and an import
    records one from its second event on (the head is the first), so a session is on one clock
    from its start; a live session that later got recorded times would see its earlier events
    move once (a follower that sent them before keeps the spans it sent).
    """

    moments: list[Moment] = field(default_factory=list)
    latest: list[int | None] = field(default_factory=list)
    """The latest recorded moment at or before each seq (None: none yet)."""
    first_recorded: int | None = None
    recorded_span: tuple[int, int] | None = None
    """The earliest and latest recorded moments (the source's clock need not follow seq order)."""
    committed_span: tuple[int, int] | None = None

    def add(self, event: Event) -> None:
        """Fold one event (seqs 0, 1, 2, … in order)."""
        when = moment(event)
        self.moments.append(when)
        if when.recorded:
            if self.first_recorded is None:
                self.first_recorded = when.ms
            self.recorded_span = _widened(self.recorded_span, when.ms)
        else:
            self.committed_span = _widened(self.committed_span, when.ms)
        self.latest.append(when.ms if when.recorded else (self.latest[-1] if self.latest else None))

    @property
    def recorded(self) -> bool:
        """Whether the session is on the recorded clock (an event of it has a recorded time)."""
        return self.first_recorded is not None

    def at(self, seq: int) -> Placement:
        """Where event `seq` lies: its moment when it is on the session's clock, else the latest
        recorded moment before it (the first one, for a prefix without any), borrowed."""
        when = self.moments[seq]
        if self.first_recorded is None or when.recorded:
            return Placement(when.ms, True)
        latest = self.latest[seq]
        return Placement(self.first_recorded if latest is None else latest, False)

    def bounds(self) -> tuple[int, int]:
        """The earliest and latest time an event lies at ((0, 0) with none): every placement is
        a moment on the session's clock, so they hold them all."""
        span = self.recorded_span if self.recorded else self.committed_span
        return span if span is not None else (0, 0)


def _widened(span: tuple[int, int] | None, ms: int) -> tuple[int, int]:
    return (ms, ms) if span is None else (min(span[0], ms), max(span[1], ms))


__all__ = [
    "MAX_EPOCH_MS",
    "RECORDED_TIME",
    "Moment",
    "Placement",
    "SessionClock",
    "check_recorded_time",
    "elapsed_ms",
    "is_epoch_ms",
    "moment",
]
