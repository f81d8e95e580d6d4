"""Writer-side coalescing: runs of batches share a message, everything keeps its order."""

from __future__ import annotations

from sessionlog.core.events import NewEvent
from sessionlog.requests import MAX_COALESCED_BATCHES, batch_request, coalesce, header_write_request


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
