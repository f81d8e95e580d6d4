"""Cutting a run of events into batches the service accepts (docs/errors.md, BATCH_TOO_LARGE).

A batch may carry at most `max_batch_events` events whose serialised data together is at most
`max_batch_bytes` (`sessionlog.core.limits`; the server's defaults are `DEFAULT_LIMITS`). The
commands that append what a file or stdin holds cut it here, so a long input is many batches
instead of one refused whole.

A server may be configured with lower limits than the defaults, and no call tells a client its
limits: `Appender` learns them from the refusal itself, whose `limit` metadata is the server's
bound, and sends the refused batch again, cut to fit, with what followed it, in order, through a
new writer. The batches are the CLI's own cuts of its input (a library caller's batch is atomic
and is never split), every event carries its eventId from the first send, so one sent again is
not appended twice, and a batch sent with the seq it must start at keeps it.

A batch refused RATE_LIMITED (the namespace's events per second, docs/errors.md) goes again the
same way, once the refusal's `retry_after_ms` is out: a long input is appended at the rate the
service allows, where the command stopped at the first refusal with the rest of its input unsent.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sessionlog.core import validate
from sessionlog.core.errors import SessionLogError
from sessionlog.core.events import NewEvent
from sessionlog.core.limits import DEFAULT_LIMITS, Limits
from sessionlog.requests import AppendResult, HeaderReport, with_event_ids

if TYPE_CHECKING:  # the CLI loads gRPC only when it connects (cli/common.py `connect`)
    from sessionlog.client import Writer

#: The refusals of a batch too big for the service that say, in `limit`, how big one may be.
SPLITTABLE = ("BATCH_TOO_LARGE", "BATCH_OVER_RATE_BURST")


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


def learned_limits(limits: Limits, error: SessionLogError) -> Limits | None:
    """`limits` lowered to the server's, as a refusal of a batch too big states them (`limit`,
    with `size` for a bound on bytes, without it for one on events), or None when the refusal
    states no bound."""
    limit = error.metadata.get("limit", "")
    if error.reason not in SPLITTABLE or not limit.isdigit() or int(limit) < 1:
        return None
    if "size" in error.metadata:
        return replace(limits, max_batch_bytes=min(limits.max_batch_bytes, int(limit)))
    return replace(limits, max_batch_events=min(limits.max_batch_events, int(limit)))


RATE_WAIT_MIN_S = 0.01
"""The least a RATE_LIMITED batch waits before it goes again: a `retry_after_ms` of 0 (the
bucket all but full) would have it sent again at once, to the same refusal."""


def rate_wait(error: SessionLogError) -> float | None:
    """Seconds to wait before sending again a batch `error` refused as RATE_LIMITED, from its
    `retry_after_ms`; None for any other refusal."""
    after = error.metadata.get("retry_after_ms", "")
    if error.reason != "RATE_LIMITED" or not after.isdigit():
        return None
    return max(RATE_WAIT_MIN_S, int(after) / 1000)


@dataclass(eq=False)
class Sent:
    """A batch (or a header report) sent and not yet taken by `Appender.results`: what it
    carries, the input lines (or other labels) of its events, and the seq it must start at."""

    events: list[NewEvent] | None
    header: dict[str, Any] | None
    lines: list[int]
    expected_next_seq: int | None
    future: Future[Any] = field(default_factory=Future)

    @property
    def first_line(self) -> int:
        return self.lines[0]


class BatchFailed(Exception):
    """A batch (or header report) failed for good: `error` is the service's, `sent` the batch."""

    def __init__(self, sent: Sent, error: SessionLogError) -> None:
        super().__init__(str(error))
        self.sent = sent
        self.error = error


class Appender:
    """Appends runs of events (and header reports) in order through a streaming writer, in
    batches within the limits known so far (`max_events` caps them further), and hands back
    each one's result in order (`results`), from one thread while another sends.

    A batch the service refuses as too big, when its `limit` makes the batch smaller, is not a
    failure: the writer, which the refusal closed, is replaced by `reopen()`, and that batch and
    every one sent after it go again, cut by the learned limits. Nor is one refused RATE_LIMITED:
    they go again as they were, once its `retry_after_ms` is out (`rate_wait`). A single event
    over the limit, or any other refusal, fails (`BatchFailed`) with the service's error. The service gave the
    lease back when it ended the refused stream, so the new writer holds a new lease: a header
    reported after the refused batch is that lease's first, and is logged (`resume`) even when
    unchanged (docs/headers.md), as after any new writer.
    """

    def __init__(self, writer: Writer, reopen: Callable[[], Writer], *, max_events: int | None = None) -> None:
        self.writer = writer
        self.limits = DEFAULT_LIMITS
        self._reopen = reopen
        self._max_events = max_events
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._unsettled: deque[Sent] = deque()
        self._finished = False

    def append(self, events: Sequence[NewEvent], lines: Sequence[int], *, expected_next_seq: int | None = None) -> None:
        """Send `events` (each read from the input line in `lines`) in batches; the first lands
        at `expected_next_seq` when given."""
        if not events:
            return
        whole = Sent(with_event_ids(events), None, list(lines), expected_next_seq)
        with self._lock:
            self._send_cut(whole)

    def report_header(self, header: dict[str, Any], line: int) -> None:
        """Report a request header, in order with the batches (docs/headers.md)."""
        with self._lock:
            self._send(Sent(None, header, [line], None))

    def finish(self) -> None:
        """Nothing more will be sent: `results` ends once everything sent is taken."""
        with self._lock:
            self._finished = True
            self._ready.notify_all()

    def results(self, *, wait: bool = True) -> Iterator[tuple[Sent, AppendResult | HeaderReport]]:
        """Each batch or report with its result, in the order sent, as each becomes durable
        (until `finish`); a refusal the learned limits get round is sent again meanwhile.
        `wait=False` takes only what is already settled (for a sender between its sends)."""
        while True:
            with self._lock:
                while wait and not self._unsettled and not self._finished:
                    self._ready.wait()
                if not self._unsettled or not (wait or self._unsettled[0].future.done()):
                    return
                head = self._unsettled[0]
            try:
                result = head.future.result()
            except SessionLogError as exc:
                self._again_or_fail(head, exc)
                continue
            with self._lock:
                self._unsettled.popleft()
            yield head, result

    def settle(self, *, wait: bool, on_durable: Callable[[Sent], object] | None = None) -> None:
        """Take the results (all of them once `finish`ed, with `wait`; else those settled so
        far), telling `on_durable` of each; a batch that failed for good raises its error."""
        try:
            for sent, _ in self.results(wait=wait):
                if on_durable is not None:
                    on_durable(sent)
        except BatchFailed as exc:
            raise exc.error from None

    def close(self) -> None:
        """Close the writer (flushing it, giving the lease back)."""
        self.writer.close()

    def abandon(self) -> None:
        """End the writer without waiting for what is in flight (the lease is given back), as
        leaving its `with` block on an error does: the sender failed."""
        self.writer.__exit__(RuntimeError, None, None)

    # --- inside the lock ----------------------------------------------------------------

    def _send_cut(self, whole: Sent) -> None:
        assert whole.events is not None
        for start, end in batch_bounds(whole.events, max_events=self._max_events, limits=self.limits):
            expected = None if whole.expected_next_seq is None else whole.expected_next_seq + start
            self._send(Sent(whole.events[start:end], None, whole.lines[start:end], expected))

    def _send(self, sent: Sent) -> None:
        try:
            if sent.events is not None:
                future: Future[Any] = self.writer.append(sent.events, expected_next_seq=sent.expected_next_seq)
            else:
                assert sent.header is not None
                future = self.writer.report_header(sent.header)
        except SessionLogError as exc:  # the writer failed earlier: sent again, or failed, with it
            future = Future()
            future.set_exception(exc)
        sent.future = future
        self._unsettled.append(sent)
        self._ready.notify_all()

    def _again_or_fail(self, head: Sent, error: SessionLogError) -> None:
        """`head`, the oldest batch not taken, failed with `error`: send it and everything after
        it again through a new writer if the learned limits cut it smaller, or once the rate
        limit's wait is out, else fail. The sender waits too (it needs the lock to send)."""
        with self._lock:
            wait = rate_wait(error)
            if wait is None:
                limits = learned_limits(self.limits, error)
                if limits is None or head.events is None or not self._smaller(head.events, limits):
                    raise BatchFailed(head, error)
                self.limits = limits
            again = list(self._unsettled)
            self._unsettled.clear()
            with contextlib.suppress(SessionLogError):
                self.writer.close()  # the refusal ended its stream: this only ends it here
            if wait is not None:
                time.sleep(wait)
            try:
                self.writer = self._reopen()
            except SessionLogError as exc:
                raise BatchFailed(head, exc) from None
            for sent in again:
                if sent.events is not None:
                    self._send_cut(sent)
                else:
                    self._send(sent)

    def _smaller(self, events: list[NewEvent], limits: Limits) -> bool:
        """Whether `limits` cut `events` into more than one batch."""
        return next(iter(batch_bounds(events, max_events=self._max_events, limits=limits))) != (0, len(events))
