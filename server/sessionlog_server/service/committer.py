"""Group commit: batches that arrive while a commit is running share the next transaction.

One commit loop per service instance. While it waits for the database to make a transaction
durable, new batches (from any session) queue up; the next transaction takes all of them, so
N concurrent writers pay for far fewer than N fsyncs. Batches of one session are committed in
the order they were submitted, because there is one loop and each group keeps queue order.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

import structlog

from sessionlog.core.errors import SessionLogError, Unavailable
from sessionlog_server.service.metrics import Metrics
from sessionlog_server.storage.recorder import EventRecorder
from sessionlog_server.storage.records import PendingBatch

P = ParamSpec("P")
T = TypeVar("T")
log = structlog.get_logger("sessionlog.commit")


@dataclass(slots=True)
class _Item:
    batch: PendingBatch
    done: asyncio.Future[None]
    queued_at: float


class GroupCommitter:
    """Commits PendingBatches in groups on a dedicated writer thread."""

    def __init__(self, recorder: EventRecorder, *, max_batches: int = 512, metrics: Metrics | None = None) -> None:
        self._metrics = metrics
        self._recorder = recorder
        self._max_batches = max_batches
        self._queue: list[_Item] = []
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sessionlog-writer")
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.groups_committed = 0
        self.batches_committed = 0

    def start(self) -> None:
        """Start the commit loop on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="group-committer")

    def enqueue(self, batch: PendingBatch) -> asyncio.Future[None]:
        """Queue a batch; the future resolves once it is durable (or fails with why it was not).

        A future rather than a coroutine: no task per batch, and a caller that goes away does
        not cancel the commit (an acknowledged-or-not outcome is resolved by eventId retries).
        """
        if self._closing:
            raise Unavailable("SHUTTING_DOWN", "the service is shutting down; retry against another instance")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Item(batch, done, time.perf_counter()))
        self._wakeup.set()
        return done

    async def run_in_writer(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run another write (lease, session creation) on the writer thread, in queue order; its
        result keeps `fn`'s type."""
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._queue:
                group = self._queue[: self._max_batches]
                del self._queue[: len(group)]
                try:
                    results = await loop.run_in_executor(
                        self._executor, self._recorder.commit_batches, [item.batch for item in group]
                    )
                except SessionLogError as exc:
                    results = [exc] * len(group)
                except Exception as exc:  # an unexpected failure: the outcome is unknown
                    log.exception("group commit failed", batches=len(group))
                    unknown = Unavailable(
                        "COMMIT_OUTCOME_UNKNOWN", f"commit failed: {exc}; retry with the same event ids"
                    )
                    results = [unknown] * len(group)
                self.groups_committed += 1
                if self._metrics is not None:
                    finished = time.perf_counter()
                    self._metrics.group_size.observe(len(group))
                    for item in group:
                        self._metrics.commit_latency.observe(finished - item.queued_at)
                for item, error in zip(group, results, strict=True):
                    if error is None:
                        self.batches_committed += 1
                        if not item.done.done():
                            item.done.set_result(None)
                    elif not item.done.done():
                        item.done.set_exception(error)
            if self._closing and not self._queue:
                return

    async def drain_and_stop(self) -> None:
        """Refuse new batches, commit those already queued, stop the loop."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        self._executor.shutdown(wait=True)
