"""Fold snapshots: snapshot + tail gives what a full replay gives, at every prefix.

The logs come from the simulated harness of test_properties (compactions, trims, prompt
changes, headers, tool calls); the naive folds there are the oracle. A snapshot is taken at a
random point, stored (encoded, decoded) and then every later event is *validated* onto the
restored fold, so the rules that look at earlier nodes (tool-result trims, the system head)
are exercised from the snapshot's compact node records, not from the events.
"""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionlog.core import jsonvalue
from sessionlog.core.events import APPEND, Event, Replace
from sessionlog.core.fold import SessionFold
from sessionlog.core.projections.request import request, request_view
from sessionlog.core.snapshot import FOLD_VERSION, SnapshotUnusable, decode_snapshot, encode_snapshot
from tests.core.builders import Log, assistant, user
from tests.core.test_properties import SETTINGS, logs, naive_history, naive_nodes, naive_stats


def restored(events: list[Event], cut: int) -> SessionFold:
    """A message-less fold of `events[:cut]`, through a stored snapshot."""
    fold = SessionFold.replay(events[:cut], validate=False, keep_messages=False)
    return SessionFold.from_snapshot(decode_snapshot(encode_snapshot(fold.snapshot())))


def assert_same_state(fold: SessionFold, prefix: list[Event]) -> None:
    """Every projection of a message-less fold equals the naive fold of `prefix`."""
    history = [prefix[seq].data["message"] for seq in fold.history_seqs()]
    assert history == naive_history(prefix)
    assert fold.stats() == naive_stats(prefix)
    assert fold.surface_view()["nodes"] == naive_nodes(prefix)[0]
    reference = SessionFold.replay(prefix)
    assert fold.next_seq == reference.next_seq
    assert fold.last_time == reference.last_time
    assert fold.last_event_type == reference.last_event_type
    assert (fold.open_turn, fold.open_step, fold.pending_calls) == (
        reference.open_turn,
        reference.open_step,
        reference.pending_calls,
    )
    assert fold.latest_header == reference.latest_header
    assert fold.replace_generation == reference.replace_generation
    generations = range(reference.replace_generation + 1)
    assert [fold.first_changed_message(g) for g in generations] == [
        reference.first_changed_message(g) for g in generations
    ]
    assert fold.has_system_head == reference.has_system_head
    assert request_view(fold.latest_header, history) == request(prefix)


@SETTINGS
@given(logs, st.integers(0, 1000))
def test_snapshot_plus_validated_tail_matches_a_full_replay_at_every_prefix(events: list[Event], at: int) -> None:
    cut = at % (len(events) + 1)
    fold = restored(events, cut)
    assert_same_state(fold, events[:cut])
    for k in range(cut, len(events)):
        fold.apply(events[k])  # validated: the rules run against the snapshot's node records
        assert_same_state(fold, events[: k + 1])


@SETTINGS
@given(logs, st.integers(0, 1000), st.integers(0, 1000))
def test_a_snapshot_of_a_restored_fold_is_as_good_as_the_first(events: list[Event], a: int, b: int) -> None:
    first, second = sorted((a % (len(events) + 1), b % (len(events) + 1)))
    fold = restored(events, first)
    fold.extend(events[first:second])
    again = SessionFold.from_snapshot(decode_snapshot(encode_snapshot(fold.snapshot())))
    again.extend(events[second:])
    assert_same_state(again, events)


@SETTINGS
@given(logs, st.integers(0, 1000), st.integers(0, 1000))
def test_rollback_on_a_restored_fold_restores_it(events: list[Event], a: int, b: int) -> None:
    cut = a % (len(events) + 1)
    fold = restored(events, cut)
    before = encode_snapshot(fold.snapshot())
    mark = fold.checkpoint()
    fold.extend(events[cut : cut + b % 40])
    fold.rollback(mark)
    assert encode_snapshot(fold.snapshot()) == before


def _stored(events: list[Event]) -> bytes:
    return encode_snapshot(SessionFold.replay(events, validate=False, keep_messages=False).snapshot())


@SETTINGS
@given(logs)
def test_a_snapshot_of_another_fold_version_is_refused(events: list[Event]) -> None:
    body = jsonvalue.loads(zlib.decompress(_stored(events)))
    body["v"] = FOLD_VERSION + 1
    with pytest.raises(SnapshotUnusable, match="fold version"):
        decode_snapshot(zlib.compress(jsonvalue.dumps_bytes(body)))


@SETTINGS
@given(logs, st.integers(0, 10_000), st.integers(1, 255))
def test_a_damaged_snapshot_is_refused_never_misread(events: list[Event], where: int, flip: int) -> None:
    blob = bytearray(_stored(events))
    blob[where % len(blob)] ^= flip
    try:
        snapshot = decode_snapshot(bytes(blob))
    except SnapshotUnusable:
        return
    # zlib's checksum makes a silent misread all but impossible; if a flip still decodes, the
    # state must be the true one (the flip hit a byte that does not change the content).
    fold = SessionFold.from_snapshot(snapshot)
    assert_same_state(fold, events)


def test_a_snapshot_with_the_wrong_shape_is_refused() -> None:
    for body in ({"v": FOLD_VERSION}, {"v": FOLD_VERSION, "nodes": "x"}, [FOLD_VERSION], "v"):
        with pytest.raises(SnapshotUnusable):
            decode_snapshot(zlib.compress(jsonvalue.dumps_bytes(body)))
    with pytest.raises(SnapshotUnusable):
        decode_snapshot(b"not zlib at all")


def test_a_snapshot_without_replace_starts_decodes_and_remembers_none() -> None:
    # The first snapshots of version 5 did not keep them: such a fold answers a copy older than
    # the snapshot with the whole history (first_changed_message None), as it did.
    log = Log()
    log.head()
    log.say("u1")
    log.add("user/message", user("u1 heard"), op=Replace(1, 1), sources=(1,))
    body = jsonvalue.loads(zlib.decompress(_stored(log.events)))
    assert body["replaceStarts"] == [1]
    del body["replaceStarts"]
    fold = SessionFold.from_snapshot(decode_snapshot(zlib.compress(jsonvalue.dumps_bytes(body))))
    assert fold.first_changed_message(0) is None and fold.replace_generation == 1


def test_a_snapshot_of_fold_version_8_is_refused_and_the_log_refolded_instead() -> None:
    # Version 8 kept neither the nodes a call's block was carried by nor what a copy cites, so a
    # fold restored from one would match copies to calls by id alone: such snapshots are ignored
    # (the loader then folds from an older snapshot or from seq 0), and their layout is not
    # misread as this version's either.
    log = Log()
    log.in_step(("a", "ls"))
    log.add("assistant/message", assistant(1, 1, ("a", "ls"), source={"kind": "copy"}), op=APPEND, sources=(4,))
    body = jsonvalue.loads(zlib.decompress(encode_snapshot(log.fold.snapshot())))
    body["copyNodes"] = [int(seq) for seq in body.pop("copySources")]
    body["structure"][4] = [call[:-1] for call in body["structure"][4]]  # no carried_by
    for version, refusal in ((8, "fold version 8"), (FOLD_VERSION, "wrong shape")):
        body["v"] = version
        with pytest.raises(SnapshotUnusable, match=refusal):
            decode_snapshot(zlib.compress(jsonvalue.dumps_bytes(body)))
    assert SessionFold.replay(log.events, validate=False).pending_calls == log.fold.pending_calls


def test_a_snapshot_of_fold_version_9_is_refused_and_the_log_refolded_instead() -> None:
    # Version 9 let a replace put a dropped call back by its id alone: a trim of step 1's message
    # keeping its a revived step 2's dropped a, which such a snapshot holds as on the surface
    # (pending, so repair would answer it). It is ignored, and the log folded again.
    log = Log()
    log.in_step(("a", "ls"))
    log.result(1, 1, "a")
    log.end_step(1, 1)
    log.step(1, 2)
    log.reply(1, 2, ("a", "ls"))
    log.add("assistant/message", assistant(1, 2, text="I'll", interrupted=True), op=Replace(8, 8), sources=(8,))
    log.add("assistant/message", assistant(1, 1, ("a", "ls"), text="trimmed"), op=Replace(4, 4), sources=(4,))
    body = jsonvalue.loads(zlib.decompress(encode_snapshot(log.fold.snapshot())))
    (call,) = body["structure"][4]
    call[4], call[7], call[9] = 10, True, [8, 10]  # block_seq, on_surface, carried_by as version 9 had them
    body["v"] = 9
    with pytest.raises(SnapshotUnusable, match="fold version 9"):
        decode_snapshot(zlib.compress(jsonvalue.dumps_bytes(body)))
    assert SessionFold.replay(log.events, validate=False).pending_calls == log.fold.pending_calls == []
