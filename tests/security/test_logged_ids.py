"""A caller cannot write what it likes into the service's log through a session id.

Each call's `rpc` line and each page request's `page` line name the session as it was asked for,
valid or not, so an operator sees what was tried. An "id" is the caller's to make: as long as a
message (256 MB by default over gRPC, for any token, read-only included) or a URL (64 KB, before
any token is checked). Each was copied into its line whole: a 1 MB id made a 1 MB line.
"""

from __future__ import annotations

import grpc
import pytest
from structlog.testing import capture_logs

from sessionlog.client import SessionLogClient
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.tenants import MALLORY, tenants_server
from tests.support.waiting import eventually
from tests.view.test_page_http import get

LONGEST_ID = 128


def test_a_log_line_keeps_no_more_of_a_session_id_than_an_id_can_hold(db_url: str) -> None:
    server = tenants_server(db_url, metrics_listen="127.0.0.1:0")
    try:
        with capture_logs() as logs:
            with SessionLogClient(server.target, token=MALLORY) as mallory, pytest.raises(grpc.RpcError):
                mallory.stub.GetSession(pb.GetSessionRequest(session_id="x" * 1_000_000))
            assert get(server, "/sessions/" + "y" * 60_000)[0] == 401  # no token at all
            # Both lines, each logged once its call has answered: the client can have the
            # refusal before the service logs it (a loaded machine once ran past the "rpc" line).
            eventually(lambda: {e["event"] for e in logs} >= {"rpc", "page"}, bool)
        named = {e["event"]: e["session_id"] for e in logs if e["event"] in ("rpc", "page")}
        assert named == {
            "rpc": "x" * LONGEST_ID + "… (1000000 characters)",
            "page": "y" * LONGEST_ID + "… (60000 characters)",
        }
    finally:
        server.stop()
