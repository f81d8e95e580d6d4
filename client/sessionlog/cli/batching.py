"""Cutting a run of events into batches the service accepts (docs/errors.md, BATCH_TOO_LARGE).

A batch may carry at most `max_batch_events` events whose serialised data together is at most
`max_batch_bytes` (`sessionlog.core.limits`; the server's defaults are `DEFAULT_LIMITS`). The
commands that append what a file or stdin holds cut it here, so a long input is many batches
instead of one refused whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sessionlog.core import validate
from sessionlog.core.events import NewEvent
from sessionlog.core.limits import DEFAULT_LIMITS, Limits


def batch_bounds(
    events: Sequence[NewEvent], *, max_events: int | None = None, limits: Limits = DEFAULT_LIMITS
) -> Iterator[tuple[int, int]]:
    """`(start, end)` of consecutive batches of `events`, in order, each within the limits (and
    `max_events`, when smaller). An event alone over `max_batch_bytes` is a batch of its own:
    the service refuses it with the reason that names it."""
    most = min(limits.max_batch_events, max_events or limits.max_batch_events)
    start, size = 0, 0
    for index, event in enumerate(events):
        event_bytes = validate.data_size(event)
        if index > start and (index - start >= most or size + event_bytes > limits.max_batch_bytes):
            yield start, index
            start, size = index, 0
        size += event_bytes
    if start < len(events):
        yield start, len(events)
