"""The calls a server is running, so that its stop waits for those that can finish and cuts
those that cannot.

A graceful stop waits, up to its grace period, for every call to end. Two kinds never end by
themselves: a subscription that the stop ended while HTTP/2 flow control held one of its sends
(its subscriber stopped reading: its status goes out behind that send, which waits for the
subscriber), a *held* call (`hold`); and the streams of other services, which the service does
not count (a health `Watch`, as every gRPC client with client-side health checking holds open).
Once every call of the service's still running is a held one (`settled`), nothing is left to
wait for, and the server cuts what remains, where it waited out the whole grace period.
"""

from __future__ import annotations

import asyncio


class RunningCalls:
    """How many of the service's calls are running, and how many of them are held."""

    def __init__(self) -> None:
        self.running = 0
        self.held = 0
        self._settled = asyncio.Event()

    def __enter__(self) -> None:
        """Count a call in while its handler runs (`with calls:`; no generator per call, as
        `contextlib.contextmanager` makes: every call goes through here)."""
        self.running += 1

    def __exit__(self, *exc: object) -> None:
        self.running -= 1
        self._update()

    def hold(self) -> None:
        """A running call ended for the stop, but its status waits behind a held send."""
        self.held += 1
        self._update()

    def release(self) -> None:
        """A held call is over (its handler returns; counted out next)."""
        self.held -= 1

    async def settled(self) -> None:
        """Return once every running call is a held one (none running: at once)."""
        while self.running != self.held:
            self._settled.clear()
            await self._settled.wait()

    def _update(self) -> None:
        if self.running == self.held:
            self._settled.set()
