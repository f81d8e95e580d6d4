"""Group commit: batches that arrive while a commit is running share the next transaction.

One writer thread per service instance. While it waits for the database to make a transaction
durable, new batches (from any session) queue up; the next transaction takes all of them, so
N concurrent writers pay for far fewer than N fsyncs. Batches of one session are committed in
the order they were submitted, because there is one thread and each group keeps queue order.
Other writes (leases, session creation: `run_in_writer`) take their turn in the same queue.

The event loop only appends to the queue and, once per group, receives the outcomes in one
callback that hands each batch's outcome straight to the batch's own callback: no asyncio task
wakes to hand a group over, and no future or loop callback is made per batch, so a unary append
costs two thread hops (there and back), not more.

What is queued and not yet settled is bounded (`backlog.py`): appends wait before they are planned
while the backlog is over `commit_backlog_bytes`.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import structlog

from sessionlog.core.errors import SessionLogError, Unavailable
from sessionlog_server.service import access
from sessionlog_server.service.backlog import CommitBacklog
from sessionlog_server.service.metrics import Metrics
from sessionlog_server.storage.recorder import EventRecorder
from sessionlog_server.storage.records import PendingBatch

P = ParamSpec("P")
T = TypeVar("T")
log = structlog.get_logger("sessionlog.commit")


STALL_WARN_S = 5.0
"""A write the writer thread has waited on this long for the database is logged while it waits
("database write waiting"), and its end once it is answered ("database write answered")."""
STALL_CHECK_S = 1.0
"""How often the event loop looks whether the writer thread is waiting that long."""

Settled = Callable[[SessionLogError | None], None]
"""Told a batch's outcome on the event loop: None once it is durable, else why it is not."""


@dataclass(slots=True, init=False)
class _Item:
    batch: PendingBatch
    settled: Settled
    queued_at: float
    charge: int
    """What the batch counts for in the backlog, freed when it is settled."""

    # Written out: one is built per batch (docs/architecture/compiled-build.md).
    def __init__(self, batch: PendingBatch, settled: Settled, queued_at: float, charge: int) -> None:
        self.batch = batch
        self.settled = settled
        self.queued_at = queued_at
        self.charge = charge


@dataclass(slots=True)
class _Call:
    fn: Callable[[], Any]
    done: asyncio.Future[Any]


def _shutting_down() -> Unavailable:
    return Unavailable("SHUTTING_DOWN", "the service is shutting down; retry against another instance")


class GroupCommitter:
    """Commits PendingBatches in groups on a dedicated writer thread."""

    def __init__(
        self,
        recorder: EventRecorder,
        *,
        max_batches: int,
        backlog_bytes: int,
        metrics: Metrics | None = None,
    ) -> None:
        self._metrics = metrics
        self.backlog = CommitBacklog(backlog_bytes, metrics.backlog_waits.inc if metrics is not None else lambda: None)
        """Batches queued and not yet settled; appends wait for `backlog.room()` while it is full."""
        self._recorder = recorder
        self._max_batches = max_batches
        self._queue: deque[_Item | _Call] = deque()
        self._queue_lock = threading.RLock()
        self._wakeup = threading.Condition(self._queue_lock)
        """Wakes the writer thread for a new item. A `with` takes the lock underneath
        (`_queue_lock`), whose enter and exit are C, where the Condition's are Python calls; an
        RLock, as a Condition's own is, whose wait and notify helpers are C too (a plain Lock's
        are Python calls)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writer_thread = threading.Thread(target=self._run, name="sessionlog-writer", daemon=True)
        self._stopping = False
        """Shutdown: no new batches; the thread ends once the queue is empty."""
        self._stopped = False
        self._busy_since: float | None = None
        """When the writer thread began its current write (monotonic), None while it is idle."""
        self._stalled_since: float | None = None
        """The start of the write logged as not answered, until it is answered."""
        self._stall_check: asyncio.TimerHandle | None = None
        self.groups_committed = 0
        self.batches_committed = 0

    def start(self) -> None:
        """Start the writer thread; outcomes are delivered to the running event loop."""
        self._loop = asyncio.get_running_loop()
        self._writer_thread.start()
        self._stall_check = self._loop.call_later(STALL_CHECK_S, self._check_stall)

    def enqueue(self, batch: PendingBatch, settled: Settled) -> None:
        """Queue a batch; `settled` is called on the event loop with its outcome, exactly once.

        A callback rather than a coroutine or a future: no task and no scheduled callback per
        batch, and a caller that goes away does not cancel the commit (an acknowledged-or-not
        outcome is resolved by eventId retries). Every queued batch is settled, also at shutdown
        (the queue is committed before the thread ends).
        """
        if self._stopping:
            raise _shutting_down()
        assert self._loop is not None, "start the committer first"
        charge = CommitBacklog.charge(batch.stored_bytes, len(batch.events))
        self._put(_Item(batch, settled, time.perf_counter(), charge))
        self.backlog.add(charge)

    def create_future(self) -> asyncio.Future[Any]:
        """A future of the loop this committer settles batches on, for a batch's outcome.

        Made for every batch: `asyncio.get_running_loop()`, which would find the same loop,
        asks the kernel for the process id each time (its check for a fork), and py-spy put
        that system call in 3-10 % of the event loop's samples under the 16-stream load.
        """
        assert self._loop is not None, "start the committer first"
        return self._loop.create_future()

    async def run_in_writer(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run another write (lease, session creation) on the writer thread, in queue order; its
        result keeps `fn`'s type."""
        done: asyncio.Future[T] = self.create_future()
        self._put(_Call(functools.partial(fn, *args, **kwargs), done))
        return await done

    def _put(self, item: _Item | _Call) -> None:
        with self._queue_lock:
            if self._stopped:
                raise _shutting_down()
            self._queue.append(item)
            self._wakeup.notify()

    # --- the writer thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._queue_lock:
                while not self._queue and not self._stopping:
                    self._wakeup.wait()
                if not self._queue:
                    self._stopped = True
                    return
                head = self._queue[0]
                if isinstance(head, _Call):
                    self._queue.popleft()
                    call, group = head, None
                else:
                    call, group = None, self._take_group()
            self._busy_since = time.monotonic()
            if call is not None:
                self._run_call(call)
            elif group is not None:
                self._commit(group)
            self._busy_since = None
            # While it waits for more, the thread holds nothing of this (a group's events).
            del head, call, group

    def _take_group(self) -> list[_Item]:
        """The batches at the head of the queue, up to `max_batches` (called under the lock)."""
        group: list[_Item] = []
        while self._queue and len(group) < self._max_batches:
            head = self._queue[0]
            if not isinstance(head, _Item):
                break
            group.append(head)
            self._queue.popleft()
        return group

    def _run_call(self, call: _Call) -> None:
        try:
            result = call.fn()
        except BaseException as exc:  # handed to the caller, as an executor would
            self._deliver(_settle, call.done, None, exc)
        else:
            self._deliver(_settle, call.done, result, None)

    def _commit(self, group: list[_Item]) -> None:
        results: list[SessionLogError | None]
        try:
            results = self._recorder.commit_batches([item.batch for item in group])
        except SessionLogError as exc:
            results = [exc] * len(group)
        except Exception as exc:  # an unexpected failure: the outcome is unknown
            log.exception("group commit failed", batches=len(group))
            unknown = Unavailable("COMMIT_OUTCOME_UNKNOWN", f"commit failed: {exc}; retry with the same event ids")
            results = [unknown] * len(group)
        _log_unavailable(results)
        self._deliver(self._settle_group, group, results, time.perf_counter())

    def _deliver(self, callback: Callable[..., None], *args: Any) -> None:
        """Hand outcomes to the event loop: one callback for a whole group."""
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed: no one is waiting any more
            log.warning("outcome dropped: the event loop is closed")

    # --- back on the event loop -----------------------------------------------------------

    @property
    def stalled(self) -> bool:
        """Whether a database write has gone unanswered for STALL_WARN_S (until it answers):
        every append waits behind it meanwhile."""
        return self._stalled_since is not None

    def _check_stall(self) -> None:
        """Log a write the database has not answered for STALL_WARN_S, once, and its end.

        A database that stops answering on an open connection (a hung host, a stalled link)
        holds the writer thread in its statement, raising nothing, until it answers or TCP
        gives up (minutes); every append waits behind it. Nothing else says so: the log was
        silent however long it lasted."""
        self._tell_answered()
        busy_since, now = self._busy_since, time.monotonic()
        if self._stalled_since is None and busy_since is not None and now - busy_since >= STALL_WARN_S:
            self._stalled_since = busy_since
            log.warning("database write waiting", waited_s=round(now - busy_since, 1), queued=len(self._queue))
        assert self._loop is not None
        self._stall_check = self._loop.call_later(STALL_CHECK_S, self._check_stall)

    def _tell_answered(self) -> None:
        """Log the end of a write told as `database write waiting`, once it was answered."""
        if self._stalled_since is not None and self._busy_since != self._stalled_since:
            log.warning("database write answered", waited_s=round(time.monotonic() - self._stalled_since, 1))
            self._stalled_since = None

    def _settle_group(self, group: list[_Item], results: list[SessionLogError | None], finished: float) -> None:
        self.groups_committed += 1
        if self._metrics is not None:
            self._metrics.group_size.observe(len(group))
            for item, error in zip(group, results, strict=True):
                if error is None:  # submission to durable commit: a refused batch has none
                    self._metrics.commit_latency.observe(finished - item.queued_at)
        self.backlog.settle(sum(item.charge for item in group))
        for item, error in zip(group, results, strict=True):
            if error is None:
                item.batch.committed_at = finished  # its subscribers' lag runs from here
                self.batches_committed += 1
            try:
                item.settled(error)
            except Exception:  # one batch's follow-up must not keep the rest of the group unsettled
                log.exception("settling a committed batch failed", **access.session_log_fields(item.batch.session_id))

    async def drain_and_stop(self) -> None:
        """Refuse new batches, commit those already queued, stop the writer thread."""
        if self._stall_check is not None:
            self._stall_check.cancel()
        with self._queue_lock:
            self._stopping = True
            self._wakeup.notify()
        if self._writer_thread.is_alive():
            await asyncio.get_running_loop().run_in_executor(None, self._writer_thread.join)
        with self._queue_lock:
            self._stopped = True
        self._tell_answered()  # the stall check no longer runs: a write answered while draining told here


def _log_unavailable(results: list[SessionLogError | None]) -> None:
    """Warn of a group the database failed (a full disk, a lost connection), with what it said:
    each call's line names only the reason, and the driver's words are the operator's clue."""
    failed = [error for error in results if isinstance(error, Unavailable)]
    if failed:
        log.warning("commit failed", reason=failed[0].reason, error=failed[0].message, batches=len(failed))


def _settle(done: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Resolve a caller's future with its outcome (unless the caller cancelled it meanwhile)."""
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)
