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
"""

from __future__ import annotations

from dataclasses import dataclass
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


def is_epoch_ms(value: Any) -> TypeGuard[int]:
    """An integer, as the envelope's `time` is (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_recorded_time(data: JsonObject) -> None:
    """A `data.recordedTime` that is present is an integer (epoch ms): a malformed one would leave
    the event on the commit clock unnoticed, so it is refused at append (BAD_TIME)."""
    if RECORDED_TIME in data and not is_epoch_ms(data[RECORDED_TIME]):
        raise ValidationError(
            "BAD_TIME", f"data.{RECORDED_TIME} must be an integer (epoch ms)", field=f"data.{RECORDED_TIME}"
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


__all__ = ["RECORDED_TIME", "Moment", "check_recorded_time", "elapsed_ms", "is_epoch_ms", "moment"]
