"""Reading an OTLP/JSON traces document in tests: its spans, their times and attributes; and
`Receiver`, an OTLP/HTTP traces endpoint on loopback that keeps what it is sent."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def spans_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The spans of a document holding one resource and one scope (what the export writes)."""
    spans: list[dict[str, Any]] = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    return spans


def span_ms(span: dict[str, Any]) -> tuple[int, int]:
    """A span's start and end in epoch ms (OTLP/JSON writes nanoseconds as decimal strings)."""
    return int(span["startTimeUnixNano"]) // 1_000_000, int(span["endTimeUnixNano"]) // 1_000_000


def span_attr(span: dict[str, Any], key: str) -> Any:
    """The value of attribute `key` (None when absent); an OTLP/JSON intValue as an int."""
    value = next((item["value"] for item in span["attributes"] if item["key"] == key), None)
    if value is None:
        return None
    return int(value["intValue"]) if "intValue" in value else next(iter(value.values()))


class Receiver:
    """An OTLP/HTTP traces endpoint on loopback that keeps what it was sent."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.answer_after_s = 0.0
        """How long a request is kept before it is answered (after it is kept)."""
        self.refuse = 0
        """How many of the next requests are answered 500 and not kept (a collector in trouble)."""
        self.refused = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf"
                if ok and receiver.refuse > 0:
                    receiver.refuse -= 1
                    receiver.refused += 1
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if ok:
                    receiver.requests.append(ExportTraceServiceRequest.FromString(body))
                time.sleep(receiver.answer_after_s)
                self.send_response(200 if ok else 400)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/traces"

    def spans(self, trace: str | None = None) -> list[tuple[str, str, str, str]]:
        """(trace id, span id, parent id, name) of every span received (of one trace, if given),
        in arrival order."""
        return [
            (s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name)
            for request in self.requests
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
            if trace is None or s.trace_id.hex() == trace
        ]

    def timed(self, trace: str) -> list[tuple[str, str, str, int, int]]:
        """(span id, parent id, name, start, end in ns) of every span of `trace` received."""
        return [
            (s.span_id.hex(), s.parent_span_id.hex(), s.name, s.start_time_unix_nano, s.end_time_unix_nano)
            for request in self.requests
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
            if s.trace_id.hex() == trace
        ]

    def resources(self, trace: str) -> list[dict[str, str]]:
        """The (string) attributes of the resource of every batch of spans of `trace` received,
        in arrival order: one per batch the exporter sent."""
        return [
            {kv.key: kv.value.string_value for kv in rs.resource.attributes}
            for request in self.requests
            for rs in request.resource_spans
            if any(s.trace_id.hex() == trace for ss in rs.scope_spans for s in ss.spans)
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
