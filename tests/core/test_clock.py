"""Where an event lies on its session's time axis (`clock.SessionClock`), the rule the OTLP trace
is laid by."""

from __future__ import annotations

import pytest

from sessionlog.core.clock import MAX_EPOCH_MS, Placement, SessionClock, check_recorded_time, moment
from sessionlog.core.errors import ValidationError
from sessionlog.core.events import Event, NewEvent


def note(seq: int, time: int, recorded: int | None = None) -> Event:
    data = {} if recorded is None else {"recordedTime": recorded}
    return NewEvent("test/note", data, ignorable=True).committed(seq, time)


def folded(*events: Event) -> SessionClock:
    clock = SessionClock()
    for event in events:
        clock.add(event)
    return clock


def test_a_live_session_lies_on_its_commit_times() -> None:
    clock = folded(note(0, 100), note(1, 150), note(2, 400))
    assert [clock.at(seq) for seq in range(3)] == [Placement(100, True), Placement(150, True), Placement(400, True)]
    assert not clock.recorded and clock.bounds() == (100, 400)


def test_an_event_without_a_recorded_time_borrows_the_nearest_recorded_one() -> None:
    """The head lies at the first recorded time, a closer at the latest before it; the bounds
    are the recorded times' (which need not follow seq order), never a commit time."""
    at = 9_000_000  # the import's one commit instant, months after the file
    clock = folded(note(0, at), note(1, at, 50), note(2, at, 70), note(3, at, 60), note(4, at + 5), note(5, at, 80))
    assert [clock.at(seq) for seq in range(6)] == [
        Placement(50, False),  # the head: the first recorded time after it
        Placement(50, True),
        Placement(70, True),
        Placement(60, True),
        Placement(60, False),  # a fork's seed: the latest recorded time before it
        Placement(80, True),
    ]
    assert clock.recorded and clock.bounds() == (50, 80)


def test_the_first_recorded_time_moves_the_events_before_it() -> None:
    """Until a session has a recorded time it is on the commit clock (a follower lays what it
    sends then on commit times); the first one moves the events before it there."""
    clock = folded(note(0, 100))
    assert clock.at(0) == Placement(100, True)
    clock.add(note(1, 100, 7))
    assert clock.at(0) == Placement(7, False)


@pytest.mark.parametrize("recorded", [-1, MAX_EPOCH_MS + 1, 10**23])
def test_a_recorded_time_no_trace_can_carry_is_refused_and_not_placed(recorded: int) -> None:
    """OTLP's times are unsigned nanoseconds: a recorded time before 1970 or past the year 2554
    made every OTLP export of its session fail to encode. Refused at append; one stored before
    this rule is read as no recorded time (the commit clock), as a malformed one is."""
    with pytest.raises(ValidationError) as refused:
        check_recorded_time({"recordedTime": recorded})
    assert refused.value.reason == "BAD_TIME" and refused.value.field == "data.recordedTime"
    assert moment(note(0, 100, recorded)).recorded is False


@pytest.mark.parametrize("recorded", [0, MAX_EPOCH_MS])
def test_recorded_times_from_1970_to_the_last_a_trace_carries_are_kept(recorded: int) -> None:
    check_recorded_time({"recordedTime": recorded})
    assert moment(note(0, 100, recorded)).ms == recorded
