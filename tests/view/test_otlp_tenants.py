"""One session, one trace: on a server with tenants, the spans the service sends live and those
its clients send (`sessionlog otlp`) or write (`sessionlog export --format otlp-json`) carry the
trace id the service tells them (`Session.trace_id`), and two tenants' sessions of one id are
two traces. Their spans are under a resource that names the session's namespace
(`sessionlog.namespace`), whichever sends or writes them, so a collector that receives several
tenants' sessions tells them apart.

The service keys a tenant's session `s1` as `alice:s1`; its live export hashed that key while
the clients hashed `s1`, so an auditor holding the live traces got a second trace from a client
export, and two tenants' clients sent their `s1` spans into one trace, with the same span ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from sessionlog.client import SessionLogClient
from tests.support.events import assistant, step_end, step_start, system, turn_end, turn_start, user
from tests.support.otlp import Receiver, spans_of
from tests.support.scripted import usage
from tests.support.servers import ServerThread
from tests.support.tenants import ALICE, MALLORY, tenants_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def live() -> Iterator[Receiver]:
    """The collector the service sends to."""
    running = Receiver()
    yield running
    running.close()


@pytest.fixture
def collector() -> Iterator[Receiver]:
    """The collector the clients send to."""
    running = Receiver()
    yield running
    running.close()


def two_turns(client: SessionLogClient, sid: str) -> None:
    """A session of two closed turns, a model call in each."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    for n in (1, 2):
        answer = assistant(n, 1, text=f"answer {n}", usage=usage(100 * n, 50 * n, 10))
        events = [user(f"question {n}"), turn_start(n), step_start(n, 1), answer, step_end(n, 1), turn_end(n)]
        client.append(sid, lease, ([system("prompt")] if n == 1 else []) + events)
    client.release_lease(lease)


def received(receiver: Receiver, trace: str) -> list[Span]:
    """The spans of `trace` that `receiver` holds."""
    return [
        span
        for request in receiver.requests
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
        if span.trace_id.hex() == trace
    ]


def cli(server: ServerThread, token: str, *args: str) -> str:
    """`sessionlog ARGS` as the holder of `token`; its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "sessionlog", "--server", server.target, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "SESSIONLOG_TOKEN": token},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def exported(server: ServerThread, token: str, sid: str) -> set[tuple[str, str, str, str]]:
    """(trace id, span id, parent id, name) of every span `sessionlog export --format otlp-json` writes."""
    document = json.loads(cli(server, token, "export", sid, "--format", "otlp-json"))
    return {(s["traceId"], s["spanId"], s.get("parentSpanId", ""), s["name"]) for s in spans_of(document)}


def exported_resource(server: ServerThread, token: str, sid: str) -> dict[str, str]:
    """The resource attributes `sessionlog export --format otlp-json` writes the spans under."""
    document = json.loads(cli(server, token, "export", sid, "--format", "otlp-json"))
    [resource_spans] = document["resourceSpans"]
    return {kv["key"]: kv["value"]["stringValue"] for kv in resource_spans["resource"]["attributes"]}


def ids(spans: list[Span]) -> set[tuple[str, str, str, str]]:
    return {(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name) for s in spans}


def test_a_tenants_session_is_one_trace_live_and_from_its_clients(
    db_url: str, sid: str, live: Receiver, collector: Receiver
) -> None:
    server = tenants_server(db_url, otlp_endpoint=live.url)
    try:
        with SessionLogClient(server.target, token=ALICE) as alice:
            two_turns(alice, sid)
            trace = alice.get_session(sid).trace_id
            deadline = time.monotonic() + 30
            while sum(1 for s in received(live, trace) if s.name == "invoke_agent") < 2:
                assert time.monotonic() < deadline, ids(received(live, trace))
                time.sleep(0.05)
        assert cli(server, ALICE, "otlp", sid, "--endpoint", collector.url).strip() == '{"spans":5}'
        written = exported(server, ALICE, sid)
        written_resource = exported_resource(server, ALICE, sid)
    finally:
        server.stop()
    sent = received(collector, trace)
    assert len(sent) == 5  # root, two turns, two model calls: every span the client sent, in this trace
    # Each span the service sent live is the client's, byte for byte (ids, names, attributes:
    # the session is named `sid` in both, never by the service's key); the root is not sent live.
    live_spans = {str(s) for s in received(live, trace)}  # text format: a failure reads
    client_spans = {str(s) for s in sent}
    assert len(live_spans) == 4 and live_spans < client_spans
    assert written == ids(sent)  # the file's trace is the one sent, span for span
    # Every batch, live, sent by the client or written, is under the one resource naming the
    # tenant, so a collector fed several tenants' sessions tells alice's apart.
    resource = {"service.name": "sessionlog", "sessionlog.namespace": "alice"}
    assert live.resources(trace) and collector.resources(trace)
    for batch in [*live.resources(trace), *collector.resources(trace), written_resource]:
        assert batch == resource


def test_two_tenants_sessions_of_one_id_are_two_traces(db_url: str, sid: str, collector: Receiver) -> None:
    server = tenants_server(db_url)
    try:
        with (
            SessionLogClient(server.target, token=ALICE) as alice,
            SessionLogClient(server.target, token=MALLORY) as mallory,
        ):
            two_turns(alice, sid)
            two_turns(mallory, sid)
            sessions = [alice.get_session(sid), mallory.get_session(sid)]
        files = [exported(server, token, sid) for token in (ALICE, MALLORY)]
        for token in (ALICE, MALLORY):
            cli(server, token, "otlp", sid, "--endpoint", collector.url)
    finally:
        server.stop()
    assert [info.namespace for info in sessions] == ["alice", "mallory"]  # each told its own
    traces = [info.trace_id for info in sessions]
    assert None not in traces and len(set(traces)) == 2
    for info, file in zip(sessions, files, strict=True):
        trace = info.trace_id
        assert trace is not None and {span[0] for span in file} == {trace}
        assert ids(received(collector, trace)) == file  # one tenant's spans alone in its trace
        # ... under a resource that names the tenant: a collector groups or routes on it.
        resource = {"service.name": "sessionlog", "sessionlog.namespace": info.namespace}
        assert collector.resources(trace) and all(batch == resource for batch in collector.resources(trace))
    assert not {span[1] for span in files[0]} & {span[1] for span in files[1]}  # no span id shared
