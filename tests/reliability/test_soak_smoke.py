"""The soak script, short (issue 7): ~15 s of 64 streaming writers and subscribers on SQLite
while the service is killed with SIGKILL and restarted every ~6 s.

It runs `python -m bench.soak` as a child process, exactly as a person would, and reads its
JSON report: zero losses, zero duplicates, every acknowledged event verified, subscribers saw
every event in order, and the restarts really happened. The long run (10 minutes) is the same
command with `--minutes 10`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from sessionlog.core.errors import Unavailable
from sessionlog.errors import ServerError, from_rpc_error, is_retryable
from tests.support.servers import ROOT

SECONDS = 15
RESTART_EVERY = 6


def test_soak_loses_and_duplicates_nothing_across_kills(tmp_path: Path) -> None:
    report_path = tmp_path / "soak.json"
    cmd = [
        sys.executable,
        "-m",
        "bench.soak",
        "--seconds",
        str(SECONDS),
        "--restart-every",
        str(RESTART_EVERY),
        "--db",
        "sqlite",
        "--json",
        str(report_path),
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=SECONDS + 240)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(report_path.read_text())
    assert report["result"] == "PASS", done.stdout
    assert report["losses"] == 0
    assert report["duplicates"] == 0
    assert report["misplaced"] == 0
    assert report["restarts"] >= SECONDS // RESTART_EVERY - 1, "the service was not killed and restarted"
    assert report["events_written_acknowledged"] > 1000
    assert report["events_verified"] == report["events_written_acknowledged"]
    resent = report["retries"] + report["reconnects"]  # the soak's own retries, or the writers' reconnects
    assert resent > 0, "no batch was ever re-sent: the kills did not hit the writers"
    assert report["subscriber_events"] > 0
    assert report["subscriber_gaps"] == report["subscriber_duplicates"] == report["subscriber_mismatches"] == 0
    assert report["rss_epochs"], "no RSS sample was taken"


class FakeRpcError(grpc.RpcError):
    """A finished call's error as grpc hands it over: code, details, trailing metadata."""

    def __init__(self, code: grpc.StatusCode, details: str, trailers: tuple[tuple[str, Any], ...] = ()) -> None:
        self._code, self._details, self._trailers = code, details, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._trailers


def test_a_transport_internal_error_is_retried_like_unavailable() -> None:
    """Bug (found by the first PostgreSQL soak): when the service was killed, the asyncio client
    sometimes reported a stream write as INTERNAL "Internal error from Core" (grpc/grpc#36066);
    it mapped to ServerError, so 7 of 64 writers gave up instead of reconnecting and re-sending
    with their eventIds. gRPC's own INTERNAL carries no sessionlog ErrorInfo: it is Unavailable."""
    transport = from_rpc_error(FakeRpcError(grpc.StatusCode.INTERNAL, "Internal error from Core"))
    assert isinstance(transport, Unavailable) and is_retryable(transport)
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason="INTERNAL", domain="sessionlog"))
    status = status_pb2.Status(code=code_pb2.INTERNAL, message="internal error", details=[info])
    trailers = (("grpc-status-details-bin", status.SerializeToString()),)
    service = from_rpc_error(FakeRpcError(grpc.StatusCode.INTERNAL, "internal error", trailers))
    assert isinstance(service, ServerError) and not is_retryable(service)  # a bug of the service: never retried
