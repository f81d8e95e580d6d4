"""Writer-side coalescing: runs of batches share a message, everything keeps its order."""

from __future__ import annotations

from sessionlog.core.events import NewEvent
from sessionlog.requests import (
    MAX_COALESCED_BATCHES,
    MAX_COALESCED_BYTES,
    batch_request,
    coalesce,
    header_write_request,
)


def test_runs_of_batches_merge_and_headers_keep_their_place() -> None:
    event = NewEvent(type="t/x", ignorable=True, event_id="e")
    requests = [
        batch_request(1, [event]),
        batch_request(2, [event]),
        header_write_request(3, {"config": {}}),
        batch_request(4, [event]),
    ]
    out = coalesce(requests)
    assert [r.WhichOneof("kind") for r in out] == ["batches", "header", "batch"]
    assert [b.batch_id for b in out[0].batches.batches] == [1, 2]
    assert out[1].header.batch_id == 3 and out[2].batch.batch_id == 4


def test_a_run_is_capped() -> None:
    event = NewEvent(type="t/x", ignorable=True, event_id="e")
    out = coalesce([batch_request(i, [event]) for i in range(MAX_COALESCED_BATCHES + 3)])
    assert [len(r.batches.batches) if r.WhichOneof("kind") == "batches" else 1 for r in out] == [
        MAX_COALESCED_BATCHES,
        3,
    ]


def test_a_run_stays_within_its_byte_bound() -> None:
    """Batches that each fit a server's message limit must not be merged past it: a run ends
    before the batch that would take it past `MAX_COALESCED_BYTES`, and a larger batch goes alone."""
    third = NewEvent(type="t/x", ignorable=True, event_id="e", data={"x": "y" * (MAX_COALESCED_BYTES // 3)})
    huge = NewEvent(type="t/x", ignorable=True, event_id="h", data={"x": "y" * (2 * MAX_COALESCED_BYTES)})
    small = NewEvent(type="t/x", ignorable=True, event_id="s")
    requests = [batch_request(i, [third]) for i in range(1, 5)] + [batch_request(5, [huge]), batch_request(6, [small])]
    out = coalesce(requests)
    runs = [
        [b.batch_id for b in r.batches.batches] if r.WhichOneof("kind") == "batches" else [r.batch.batch_id]
        for r in out
    ]
    assert runs == [[1, 2], [3, 4], [5], [6]]
    for request in out:
        if request.WhichOneof("kind") == "batches":
            assert sum(b.ByteSize() for b in request.batches.batches) <= MAX_COALESCED_BYTES
