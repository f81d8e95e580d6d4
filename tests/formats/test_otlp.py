"""The OTLP/JSON export (issue 14): parsed with the official opentelemetry-proto classes, the
GenAI semantic-convention names checked against the official semconv package, token sums
checked against the stats projection."""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.semconv._incubating.attributes import error_attributes
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai

from sessionlog.core import jsonvalue
from sessionlog.core.events import Event
from sessionlog.core.formats.otlp import otlp_traces
from sessionlog.core.projections.stats import stats
from sessionlog.core.repair import commit_closers, open_turn_closers
from tests.support.scripted import REQUEST_SEQS, committed

SID = "sess-otlp"
GENAI_NAMES = {value for name, value in vars(genai).items() if name.startswith("GEN_AI_") and isinstance(value, str)}


def repaired() -> list[Event]:
    events = committed()
    return events + commit_closers(open_turn_closers(events, "interrupted"), len(events), events[-1].time)


def parse(document: dict[str, Any]) -> ExportTraceServiceRequest:
    """OTLP/JSON -> proto: ids are hex in OTLP/JSON but base64 in the generic mapping."""
    text = json.dumps(document)

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                key: (
                    base64.b64encode(bytes.fromhex(value)).decode()
                    if key in ("traceId", "spanId", "parentSpanId")
                    else rewrite(value)
                )
                for key, value in node.items()
            }
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        return node

    return json_format.Parse(json.dumps(rewrite(json.loads(text))), ExportTraceServiceRequest())


def attrs(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        which = kv.value.WhichOneof("value")
        value = getattr(kv.value, which)
        out[kv.key] = [getattr(v, v.WhichOneof("value")) for v in value.values] if which == "array_value" else value
    return out


def test_export_parses_and_uses_genai_names() -> None:
    events = repaired()
    message = parse(otlp_traces(events, SID))
    spans = list(message.resource_spans[0].scope_spans[0].spans)
    assert {len(s.trace_id) for s in spans} == {16} and {len(s.span_id) for s in spans} == {8}
    assert len({s.span_id for s in spans}) == len(spans)
    by_op: dict[str, list[Span]] = {}
    for span in spans:
        by_op.setdefault(attrs(span).get(genai.GEN_AI_OPERATION_NAME, "root"), []).append(span)
    assert len(by_op["invoke_agent"]) == stats(events)["turns"] == 4
    assert len(by_op["execute_tool"]) == stats(events)["toolCalls"] == 6
    chat = by_op["chat"]
    assert [attrs(s)["sessionlog.seq"] for s in chat] == [5, 10, 15, 22, 27, 31, 38, 43, 49]  # 31: the summariser
    first = attrs(chat[0])
    assert first[genai.GEN_AI_PROVIDER_NAME] == "acme" and first[genai.GEN_AI_REQUEST_MODEL] == "m-1"
    assert first[genai.GEN_AI_CONVERSATION_ID] == SID
    assert chat[0].name == "chat m-1" and chat[0].kind == Span.SPAN_KIND_CLIENT
    # Every gen_ai.* key we write is a name the conventions define.
    used = {key for span in spans for key in attrs(span) if key.startswith("gen_ai.")}
    assert used <= GENAI_NAMES, used - GENAI_NAMES
    assert {genai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, genai.GEN_AI_TOOL_CALL_ID, genai.GEN_AI_TOOL_NAME} <= used
    assert not any(key in used for key in (genai.GEN_AI_INPUT_MESSAGES, genai.GEN_AI_OUTPUT_MESSAGES))


def test_token_sums_equal_the_stats_projection() -> None:
    events = repaired()
    totals = stats(events)
    chat = [attrs(s) for s in parse(otlp_traces(events, SID)).resource_spans[0].scope_spans[0].spans]
    chat = [a for a in chat if a.get(genai.GEN_AI_OPERATION_NAME) == "chat"]
    # input_tokens counts cached tokens too (the conventions); Pi's input does not.
    assert sum(a[genai.GEN_AI_USAGE_INPUT_TOKENS] for a in chat) == (
        totals["inputTokens"] + totals["cacheReadTokens"] + totals["cacheWriteTokens"]
    )
    assert sum(a[genai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] for a in chat) == totals["cacheReadTokens"]
    assert sum(a[genai.GEN_AI_USAGE_OUTPUT_TOKENS] for a in chat) == totals["outputTokens"]
    assert abs(sum(a["sessionlog.cost_usd"] for a in chat) - totals["costUsd"]) < 1e-12


def test_tools_repairs_and_markers() -> None:
    spans = parse(otlp_traces(repaired(), SID)).resource_spans[0].scope_spans[0].spans
    tools = {attrs(s)[genai.GEN_AI_TOOL_CALL_ID]: s for s in spans if s.name.startswith("execute_tool")}
    assert attrs(tools["c5"])[error_attributes.ERROR_TYPE] == "TOOL_OUTCOME_UNKNOWN"
    assert tools["c5"].status.code == tools["c2"].status.code == 2  # STATUS_CODE_ERROR
    assert tools["c1"].status.code == 0
    turns = {s.span_id: s for s in spans if s.name == "invoke_agent"}
    assert tools["c1"].parent_span_id in turns
    root = next(s for s in spans if s.name == f"session {SID}")
    assert [e.name for e in root.events] == [
        "sessionlog.request_header",
        "sessionlog.request_header",
        "sessionlog.compaction",
        "sessionlog.surface_replace",
        "sessionlog.request_header",
        "sessionlog.repair",
    ]
    drops = [attrs(s).get("sessionlog.cache_drop.causes") for s in spans if s.name.startswith("chat")]
    assert [d for d in drops if d] == [["header"], ["replace"], ["none"]]


def test_export_is_deterministic_and_content_is_opt_in() -> None:
    events = repaired()
    assert jsonvalue.dumps(otlp_traces(events, SID)) == jsonvalue.dumps(otlp_traces(list(events), SID))
    assert (
        otlp_traces(events, SID)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
        != (otlp_traces(events, "other")["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"])
    )
    spans = parse(otlp_traces(events, SID, content=True)).resource_spans[0].scope_spans[0].spans
    chat = {attrs(s)["sessionlog.seq"]: attrs(s) for s in spans if s.name.startswith("chat")}
    inputs = json.loads(chat[REQUEST_SEQS[1]][genai.GEN_AI_INPUT_MESSAGES])
    assert [m["role"] for m in inputs] == ["system", "user", "assistant", "tool"]
    assert inputs[2]["parts"][0] == {"type": "tool_call", "id": "c1", "name": "read", "arguments": {"path": "x"}}
    output = json.loads(chat[REQUEST_SEQS[2]][genai.GEN_AI_OUTPUT_MESSAGES])
    assert output == [{"role": "assistant", "parts": [{"type": "text", "content": "Done."}]}]
