"""The calls a server is running, so that its stop waits for those that can finish and cuts
those that cannot.

A graceful stop waits, up to its grace period, for every call to end. A subscription that the
stop ended while HTTP/2 flow control held one of its sends (its subscriber stopped reading)
cannot end: its status goes out behind that send, which waits for the subscriber. Such a call
is *held* (`hold`); once every call still running is a held one, nothing is left to wait for,
and the server cuts them (`only_held`), where it waited out the whole grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class RunningCalls:
    """How many of the service's calls are running, and how many of them are held."""

    def __init__(self) -> None:
        self.running = 0
        self.held = 0
        self._only_held = asyncio.Event()

    @contextlib.contextmanager
    def counted(self) -> Iterator[None]:
        """Count a call in while its handler runs."""
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self._update()

    def hold(self) -> None:
        """A running call ended for the stop, but its status waits behind a held send."""
        self.held += 1
        self._update()

    def release(self) -> None:
        """A held call is over (its handler returns; counted out next)."""
        self.held -= 1

    async def only_held(self) -> None:
        """Return once some calls are held and no other call runs."""
        await self._only_held.wait()

    def _update(self) -> None:
        if self.held and self.running == self.held:
            self._only_held.set()
