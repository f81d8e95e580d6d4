"""What the asyncio client's `writer()` and `lease_writer()` return: the opening of a writer,
to await or to enter.

The sync client's writers open in a `with` statement (`with client.writer(ID) as writer:`), so
the asyncio client's open in `async with` the same way (`async with client.writer(ID) as
writer:`), where the bare coroutine they were raised TypeError there. Awaiting it still gives
the writer (`writer = await client.writer(ID)`, `async with await client.writer(ID)`), and it
is still a coroutine, so `asyncio.create_task` and `wait_for` take it as before.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, Protocol, TypeVar


class AsyncClosing(Protocol):
    """A writer: an async context manager that closes it on exit."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> None: ...


W = TypeVar("W", bound=AsyncClosing)


class Opening(Coroutine[Any, Any, W]):
    """The coroutine that opens a writer (`opening`), usable as one (await it, make a task of
    it) or in `async with`, which awaits it, enters the writer and exits it at the block's end."""

    __slots__ = ("_opened", "_opening")

    def __init__(self, opening: Coroutine[Any, Any, W]) -> None:
        self._opening = opening
        self._opened: W | None = None

    def send(self, value: Any) -> Any:
        return self._opening.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        return self._opening.throw(typ, val, tb)

    def close(self) -> None:
        self._opening.close()

    def __await__(self) -> Generator[Any, None, W]:
        return self._opening.__await__()

    async def __aenter__(self) -> W:
        self._opened = await self._opening
        await self._opened.__aenter__()
        return self._opened

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        assert self._opened is not None, "exited before it was entered"
        await self._opened.__aexit__(exc_type, exc, traceback)
