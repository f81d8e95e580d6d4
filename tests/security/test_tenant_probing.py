"""Access is checked before any per-session work (issue 11 §3).

A caller of another namespace who appends to, reports a header on, or renews a lease of a
session gets NOT_FOUND (as for a missing id) and makes the service do no work for that session:
its log is not loaded (folded) into memory. The check is on the session row alone, so the
answer costs the same whatever the size of the session.
"""

from __future__ import annotations

import grpc
import pytest

from sessionlog.client import SessionLogClient
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.events import note
from tests.support.servers import ServerThread
from tests.support.tenants import ALICE, MALLORY


async def _forget(server: ServerThread, sid: str) -> None:
    server.service.live.invalidate(sid)


def test_another_namespaces_session_is_not_loaded_by_writes_to_it(tenants: ServerThread, sid: str) -> None:
    with SessionLogClient(tenants.target, token=ALICE) as alice:
        alice.create_session(sid)
        with alice.writer(sid) as writer:
            writer.append([note(i) for i in range(50)]).result()
    tenants.call(_forget(tenants, sid))
    assert tenants.service.live.peek(sid) is None
    missing = f"{sid}-missing"
    with SessionLogClient(tenants.target, token=MALLORY) as mallory:
        stub = mallory.stub
        event = event_pb2.NewEvent(type="test/x", ignorable=True, data_json=b"{}")
        for target in (sid, missing):
            for call, request in [
                (stub.AppendEvents, pb.AppendEventsRequest(session_id=target, lease_token="guess", events=[event])),
                (
                    stub.ReportRequestHeader,
                    pb.ReportRequestHeaderRequest(session_id=target, lease_token="guess", header_json=b'{"config":{}}'),
                ),
                (stub.RenewLease, pb.RenewLeaseRequest(session_id=target, lease_token="guess")),
                (stub.AcquireLease, pb.AcquireLeaseRequest(session_id=target)),
            ]:
                with pytest.raises(grpc.RpcError) as refused:
                    call(request)
                assert refused.value.code() == grpc.StatusCode.NOT_FOUND, (type(request).__name__, target)
                assert refused.value.details() == f"session {target!r} not found"
    assert tenants.service.live.peek(sid) is None  # nothing of alice's session was loaded
