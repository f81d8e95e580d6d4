"""A subscription's sends, which the service's stop does not wait for.

A send completes once HTTP/2 flow control lets it out: to a subscriber that stopped reading
(busy, paused in a debugger) with its window full, not until that subscriber reads again. A
subscription waiting there never saw the stop (`SubscriptionHub.end_all`), and the stop waited
out its whole grace period, then cut the stream in the middle of a message.

So each send races the stop: when the service stops first, the subscription ends with
SHUTTING_DOWN at once, the send left to complete or fail with the call. That status can only
follow the held message, so the call is marked held (`RunningCalls.hold`): once nothing else
runs, the server cuts it. The subscriber reads what reached it, then resubscribes from the seq
after its last event, losing nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc

from sessionlog_server.service.subscriptions import shutting_down
from sessionlog_server.transport.calls import RunningCalls


class StopAwareSender:
    """Sends one subscription's responses until the service stops (`stopping` is set)."""

    def __init__(
        self, context: grpc.aio.ServicerContext, stopping: asyncio.Event, session_id: str, calls: RunningCalls
    ) -> None:
        self._context = context
        self._session_id = session_id
        self._calls = calls
        self._held = False
        self._stopped = asyncio.ensure_future(stopping.wait())

    async def send(self, response: Any, first_seq: int) -> None:
        """Send `response`, whose first event is `first_seq` (the caught-up marker: its next
        seq). Raises SHUTTING_DOWN, resumable from `first_seq`, when the service stops before
        the subscriber took it."""
        if self._stopped.done():
            raise shutting_down(self._session_id, first_seq)
        write = asyncio.ensure_future(self._context.write(response))
        try:
            await asyncio.wait((write, self._stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not write.done():
                # The stop came first, or the caller went away: the call ends without this send,
                # whose failure then is no news (retrieved, so asyncio does not report it).
                write.add_done_callback(_forget)
        if not write.done():
            self._held = True
            self._calls.hold()
            raise shutting_down(self._session_id, first_seq)
        write.result()

    def close(self) -> None:
        """The subscription is over: stop watching for the service's stop."""
        self._stopped.cancel()
        if self._held:
            self._calls.release()


def _forget(write: asyncio.Future[Any]) -> None:
    with contextlib.suppress(BaseException):
        write.exception()
