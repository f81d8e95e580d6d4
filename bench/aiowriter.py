"""A thin asyncio pipelining writer over the product's own stub and request builders.

Why not `sessionlog.aio.AsyncWriter`: in this checkout its reader task iterates the call
(`async for response in call`) after `_connect` used `await call.read()`, and grpc.aio refuses
to mix the two styles on one RPC (`UsageError`), so the reader dies and no batch is ever
acknowledged. Until that is fixed, the bench drives the same `Write` RPC with the same
`open_request` / `batch_request` messages, using `read()`/`write()` only. The wire traffic,
and so the server's work, is identical; only the client-side bookkeeping differs.
`bench.aiowriter.product_async_writer_works()` probes the product writer, so the report can
say which one was used.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from typing import Any

import grpc

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.core.events import NewEvent
from sessionlog.requests import CLOSE_REQUEST, batch_request, open_request


class BenchWriter:
    """One writer stream: `send` returns a future that resolves with the batch's ack."""

    def __init__(self, client: AsyncSessionLogClient, session_id: str, window: int) -> None:
        self._client = client
        self.session_id = session_id
        self._window = asyncio.Semaphore(window)
        self._pending: deque[tuple[int, asyncio.Future[Any]]] = deque()
        self._next_id = 0
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self.next_seq = 0

    async def open(self, *, create_if_missing: bool = True) -> BenchWriter:
        self._call = self._client.stub.Write()
        await self._call.write(open_request(self.session_id, None, False, create_if_missing))
        first = await self._call.read()
        if first is grpc.aio.EOF:
            raise RuntimeError(f"writer stream for {self.session_id} closed while opening")
        self.next_seq = first.opened.next_seq
        self._reader = asyncio.ensure_future(self._read())
        return self

    async def send(self, events: Sequence[NewEvent]) -> asyncio.Future[Any]:
        """Send one batch now (waiting only for a window slot); the future is its ack."""
        await self._window.acquire()
        self._next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((self._next_id, future))
        await self._call.write(batch_request(self._next_id, events))
        return future

    async def append(self, events: Sequence[NewEvent]) -> Any:
        return await (await self.send(events))

    async def _read(self) -> None:
        error: BaseException | None = None
        try:
            while True:
                response = await self._call.read()
                if response is grpc.aio.EOF:
                    break
                kind = response.WhichOneof("kind")
                if kind == "acks":  # several consecutive acknowledgements in one message
                    acks = list(response.acks.acks)
                elif kind == "ack":
                    acks = [response.ack]
                else:  # nothing this writer sends asks for other kinds; ignore them
                    continue
                for ack in acks:
                    self._settle(ack)
        except grpc.RpcError as exc:
            error = exc
        failure = error or RuntimeError(f"writer stream for {self.session_id} ended with batches unacknowledged")
        while self._pending:
            _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(failure)
            self._window.release()

    def cancel(self) -> None:
        """Abandon the stream (after a stall): cancel the RPC and every pending future."""
        if self._call is not None:
            self._call.cancel()
        for _, future in self._pending:
            future.cancel()

    def _settle(self, ack: Any) -> None:
        """Resolve the batch `ack` names (earlier unacknowledged ones cannot exist: the
        server acknowledges in order, so any skipped future is cancelled, not left waiting)."""
        while self._pending and self._pending[0][0] != ack.batch_id:
            self._pending.popleft()[1].cancel()
            self._window.release()
        if self._pending:
            _, future = self._pending.popleft()
            self.next_seq = ack.next_seq
            if not future.done():
                future.set_result(ack)
            self._window.release()

    async def close(self) -> None:
        """Wait for every ack, end the stream (the server releases the lease)."""
        for _, future in list(self._pending):
            with contextlib.suppress(BaseException):
                await future
        with contextlib.suppress(grpc.RpcError):
            await self._call.write(CLOSE_REQUEST)
            await self._call.done_writing()
        if self._reader is not None:
            await self._reader


async def product_async_writer_works(target: str, session_id: str, timeout: float = 5.0) -> bool:
    """Does `sessionlog.aio.AsyncWriter` acknowledge a pipelined batch within `timeout`?"""
    # The broken reader task's UsageError would otherwise be printed at garbage collection.
    asyncio.get_running_loop().set_exception_handler(lambda _loop, _context: None)
    async with AsyncSessionLogClient(target) as client:
        try:
            writer = await client.writer(session_id, create_if_missing=True)
        except Exception:
            return False
        try:
            event = {"type": "bench/probe", "data": {}, "ignorable": True}
            await asyncio.wait_for(writer.append([event]), timeout)
            await asyncio.wait_for(writer.close(), timeout)
            return True
        except Exception:
            writer._call.cancel()
            return False
