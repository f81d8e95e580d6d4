"""The calls a server is running, so that its stop waits for those that can finish and cuts
those that cannot.

A graceful stop waits, up to its grace period, for every call to end. Some never end by
themselves: a subscription whose send HTTP/2 flow control holds (its subscriber stopped
reading, with its window full: the send completes only when it reads again, so the
subscription never sees the stop), and the streams of other services, which the service does
not count (a health `Watch`, as every gRPC client with client-side health checking holds open).
Once every call of the service's still running waits in such a send (`settled`), nothing is
left that can finish, and the server cuts what remains, where it waited out the whole grace
period and then cut them anyway. A cut subscriber reads what reached it, then resubscribes
from the seq after its last event, losing nothing.
"""

from __future__ import annotations

import asyncio


class RunningCalls:
    """How many of the service's calls are running, and how many of them wait in a send to
    their peer (`sends`)."""

    def __init__(self) -> None:
        self.running = 0
        self.sending = 0
        self.sends = _Sends(self)
        """`with calls.sends:` around a subscription's send (`context.write`)."""
        self._settled = asyncio.Event()

    def __enter__(self) -> None:
        """Count a call in while its handler runs (`with calls:`; no generator per call, as
        `contextlib.contextmanager` makes: every call goes through here)."""
        self.running += 1

    def __exit__(self, *exc: object) -> None:
        self.running -= 1
        self._update()

    async def settled(self) -> None:
        """Return once every running call waits in a send (none running: at once)."""
        while self.running != self.sending:
            self._settled.clear()
            await self._settled.wait()

    def _update(self) -> None:
        if self.running == self.sending:
            self._settled.set()


class _Sends:
    """Counts the sends under way (inline: a task per send put each message one turn of the
    event loop later, behind the writer's acknowledgement)."""

    def __init__(self, calls: RunningCalls) -> None:
        self._calls = calls

    def __enter__(self) -> None:
        self._calls.sending += 1
        self._calls._update()

    def __exit__(self, *exc: object) -> None:
        self._calls.sending -= 1
