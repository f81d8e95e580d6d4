"""The client conformance scenario (tests/conformance/README.md) against both Python clients.

The same steps and the same expected log as the TypeScript client's
client/typescript/test/conformance.test.ts: a server killed mid-stream, a retry, a takeover, a
lost unary lease, a crashed writer resumed with repair, and a subscriber that follows the whole
scenario across the kill.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import OwnershipLost
from sessionlog.core.events import Event
from sessionlog.requests import CaughtUp
from tests.support.events import (
    assistant,
    note,
    step_end,
    step_start,
    system,
    tool_call,
    tool_result,
    turn_end,
    turn_start,
    user,
)
from tests.support.servers import ServerProcess

EXPECTED = json.loads((Path(__file__).parent / "expected_log.json").read_text())

# The scenario's batches (README steps 2-7).
OPENING = [
    system("be brief"),
    turn_start(1),
    user("hello"),
    step_start(1, 1),
    assistant(1, 1, calls=(("c1", "bash"),)),
    tool_call(1, 1, "c1", "bash"),
]
PIPELINED = [tool_result(1, 1, "c1", "ok"), step_end(1, 1), step_start(1, 2)]
FINISH = [assistant(1, 2, "done"), step_end(1, 2), turn_end(1)]
#: Step 8: bytes the service buffers per subscriber, and the notes that overflow it.
SUBSCRIBER_BUFFER = 16 * 1024
SLOW_NOTES = 200
NOTE_TEXT = "x" * 1000
HEAD = 24 + SLOW_NOTES


def slow_note(i: int) -> dict[str, Any]:
    return {"type": "test/note", "data": {"n": 100 + i, "text": NOTE_TEXT}, "ignorable": True, "eventId": f"e-slow-{i}"}


def _was_cut_off(server: ServerProcess) -> bool:
    """Whether the service ended a subscription for falling behind (its log line for the RPC)."""
    return any('"SubscribeEvents"' in line and '"RESOURCE_EXHAUSTED"' in line for line in server.log)


CRASHING = [user("again"), step_start(2, 1), assistant(2, 1, calls=(("c2", "edit"),)), tool_call(2, 1, "c2", "edit")]


def normalise(events: list[Event]) -> list[dict[str, Any]]:
    """The log as the scenario compares it (see the README): times go, message timestamps become
    "<time>", client-generated eventIds "<generated>" (each unique), chosen and repair ids stay,
    events the service wrote without one have null."""
    seen: set[str] = set()
    out = []
    for event in events:
        row = json.loads(json.dumps(event.to_json()))
        del row["time"]
        event_id = row.get("eventId")
        if event_id is not None:
            assert event_id not in seen, f"eventId {event_id} appears twice"
            seen.add(event_id)
            if not event_id.startswith(("e-", "repair-")):
                row["eventId"] = "<generated>"
        row.setdefault("eventId", None)
        message = row["data"].get("message")
        if isinstance(message, dict) and isinstance(message.get("timestamp"), int):
            message["timestamp"] = "<time>"
        out.append(row)
    return out


def _check(log: list[Event], seen: list[Event | CaughtUp]) -> None:
    assert normalise(log) == EXPECTED
    delivered = [item.seq for item in seen if isinstance(item, Event)]
    assert delivered == [event.seq for event in log], "the subscriber saw every event once, in order"
    assert sum(isinstance(item, CaughtUp) for item in seen) == 1


def _eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)


# --- sync ----------------------------------------------------------------------------------


def run_sync(server: ServerProcess, sid: str) -> tuple[list[Event], list[Event | CaughtUp]]:
    with SessionLogClient(server.target) as client:
        client.create_session(sid)  # 1. subscribe
        subscription = client.subscribe(sid)
        seen: list[Event | CaughtUp] = []
        follower = threading.Thread(target=lambda: [seen.append(item) for item in subscription], daemon=True)
        follower.start()

        w1 = client.writer(sid, writer_id="w1")  # 2. stream
        assert w1.report_header({"config": {"model": "m1"}}).result().reason == "initial"
        w1.append(OPENING).result()

        pipelined = w1.append(PIPELINED)  # 3. kill
        server.kill()
        server.start()
        assert pipelined.result(timeout=120).seqs == [7, 8, 9]

        assert w1.append([note(1, eventId="e-retry")]).result().seqs == [10]  # 4. retry
        again = w1.append([note(1, eventId="e-retry"), note(2, eventId="e-after")]).result()
        assert again.seqs == [10, 11]

        w2 = client.writer(sid, writer_id="w2", takeover=True)  # 5. takeover
        for n in (3, 4):
            with pytest.raises(OwnershipLost):
                w1.append([note(n)]).result(timeout=60)
        w2.append(FINISH).result()
        w2.close()

        u1 = client.lease_writer(sid, writer_id="u1", heartbeat=0.1)  # 6. lease loss
        u1.append([turn_start(2)])
        u2 = client.lease_writer(sid, writer_id="u2", takeover=True)
        with pytest.raises(OwnershipLost):
            u1.append([note(5)])

        u2.append(CRASHING)  # 7. crash (u2 is abandoned), then resume with repair
        w3 = client.writer(sid, writer_id="w3", resume=True, takeover=True)
        assert w3.resumed is not None and w3.resumed.repair_seqs == [20, 21, 22]

        slow_subscription = client.subscribe(sid)  # 8. a slow subscriber is cut off, and resumes
        slow = iter(slow_subscription)
        slow_seen = [item for item in itertools.takewhile(lambda i: not isinstance(i, CaughtUp), slow)]
        for future in [w3.append([slow_note(i)]) for i in range(SLOW_NOTES)]:
            future.result()
        w3.close()
        while len(slow_seen) < HEAD:
            item = next(slow)
            if isinstance(item, Event):
                slow_seen.append(item)
        slow_subscription.cancel()
        assert _was_cut_off(server)
        assert [e.seq for e in slow_seen] == list(range(HEAD)), "the slow subscriber saw every event once"

        log = list(client.read_events(sid))  # 9. check
        _eventually(lambda: sum(isinstance(i, Event) for i in seen) >= len(log))
        subscription.cancel()
        follower.join(timeout=30)
        return log, seen


# --- asyncio -------------------------------------------------------------------------------


async def run_async(server: ServerProcess, sid: str) -> tuple[list[Event], list[Event | CaughtUp]]:
    async with AsyncSessionLogClient(server.target) as client:
        await client.create_session(sid)  # 1. subscribe
        seen: list[Event | CaughtUp] = []

        async def follow() -> None:
            async for item in client.subscribe(sid):
                seen.append(item)

        follower = asyncio.ensure_future(follow())

        w1 = await client.writer(sid, writer_id="w1")  # 2. stream
        assert (await (await w1.report_header({"config": {"model": "m1"}}))).reason == "initial"
        await (await w1.append(OPENING))

        pipelined = await w1.append(PIPELINED)  # 3. kill
        await asyncio.to_thread(server.kill)
        await asyncio.to_thread(server.start)
        assert (await asyncio.wait_for(pipelined, 120)).seqs == [7, 8, 9]

        assert (await (await w1.append([note(1, eventId="e-retry")]))).seqs == [10]  # 4. retry
        again = await (await w1.append([note(1, eventId="e-retry"), note(2, eventId="e-after")]))
        assert again.seqs == [10, 11]

        w2 = await client.writer(sid, writer_id="w2", takeover=True)  # 5. takeover
        for n in (3, 4):
            with pytest.raises(OwnershipLost):
                await asyncio.wait_for(await w1.append([note(n)]), 60)
        await (await w2.append(FINISH))
        await w2.close()

        u1 = await client.lease_writer(sid, writer_id="u1", heartbeat=0.1)  # 6. lease loss
        await u1.append([turn_start(2)])
        u2 = await client.lease_writer(sid, writer_id="u2", takeover=True)
        with pytest.raises(OwnershipLost):
            await u1.append([note(5)])

        await u2.append(CRASHING)  # 7. crash (u2 is abandoned), then resume with repair
        w3 = await client.writer(sid, writer_id="w3", resume=True, takeover=True)
        assert w3.resumed is not None and w3.resumed.repair_seqs == [20, 21, 22]

        slow = client.subscribe(sid)  # 8. a slow subscriber is cut off, and resumes
        slow_seen: list[Event] = []
        async for item in slow:
            if isinstance(item, CaughtUp):
                break
            slow_seen.append(item)
        for future in [await w3.append([slow_note(i)]) for i in range(SLOW_NOTES)]:
            await future
        await w3.close()
        while len(slow_seen) < HEAD:
            item = await anext(slow)
            if isinstance(item, Event):
                slow_seen.append(item)
        await slow.aclose()
        assert _was_cut_off(server)
        assert [e.seq for e in slow_seen] == list(range(HEAD)), "the slow subscriber saw every event once"

        log = [event async for event in client.read_events(sid)]  # 9. check
        deadline = time.monotonic() + 10
        while sum(isinstance(i, Event) for i in seen) < len(log) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        return log, seen


@pytest.fixture
def killable(fresh_db: str) -> Iterator[ServerProcess]:
    # A small per-subscriber buffer, so step 8's subscriber that stops reading is cut off.
    server = ServerProcess(fresh_db, env={"SESSIONLOG_SUBSCRIBER_BUFFER_BYTES": str(SUBSCRIBER_BUFFER)}).start()
    try:
        yield server
    finally:
        server.kill()


def test_sync_client_conformance(killable: ServerProcess, tmp_path: Path) -> None:
    _check(*run_sync(killable, f"conformance-sync-{tmp_path.name[-8:]}"))


def test_async_client_conformance(killable: ServerProcess, tmp_path: Path) -> None:
    _check(*asyncio.run(run_async(killable, f"conformance-aio-{tmp_path.name[-8:]}")))
