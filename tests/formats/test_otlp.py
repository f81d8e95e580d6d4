"""The OTLP/JSON export (issue 14): parsed with the official opentelemetry-proto classes, the
GenAI semantic-convention names checked against the official semconv package, token sums
checked against the stats projection."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv._incubating.attributes import error_attributes
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai

from sessionlog.core import jsonvalue
from sessionlog.core.costs import SessionCost, total_figures
from sessionlog.core.events import Event, NewEvent
from sessionlog.core.formats.otlp import (
    DURATION_UNKNOWN,
    FORK_PARENT,
    FORK_SEQ,
    NAMESPACE,
    RESOURCE,
    SCOPE_NAME,
    ForkOrigin,
    otlp_traces,
    span_id,
    trace_id,
)
from sessionlog.core.projections.stats import stats
from sessionlog.core.repair import commit_closers, fork_seed, open_turn_closers
from sessionlog.core.usage import total_cost
from sessionlog.otlp_live import SessionExport, readable_span
from tests.support.events import (
    assistant,
    priced_and_unpriced,
    step_end,
    step_start,
    system,
    tool_result,
    turn_end,
    turn_start,
    user,
)
from tests.support.otlp import span_attr, span_ms, spans_of
from tests.support.scripted import REQUEST_SEQS, SUMMARY_SEQ, committed, usage

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


def test_a_summary_from_another_model_is_the_span_of_that_model() -> None:
    """A compaction's summariser may be a smaller model than the conversation's: its chat span
    named the header's model, giving the summariser's spend to the chat model in a collector
    that groups cost by model."""
    events = repaired()
    summary = events[SUMMARY_SEQ]
    data = {**summary.data, "provider": "tiny-co", "model": "m-small"}
    events[SUMMARY_SEQ] = dataclasses.replace(summary, data=data, data_text=None)
    spans = parse(otlp_traces(events, SID)).resource_spans[0].scope_spans[0].spans
    span = next(s for s in spans if attrs(s).get("sessionlog.seq") == SUMMARY_SEQ)
    assert span.name == "chat m-small"
    assert attrs(span)[genai.GEN_AI_REQUEST_MODEL] == "m-small"
    assert attrs(span)[genai.GEN_AI_PROVIDER_NAME] == "tiny-co"
    others = [attrs(s) for s in spans if s.name.startswith("chat ") and s is not span]
    assert others and {a[genai.GEN_AI_REQUEST_MODEL] for a in others} == {"m-1"}


def test_a_call_without_a_price_has_no_cost_and_is_counted_unpriced() -> None:
    """A model call whose usage has tokens but no cost (no pricing for the model) is exported
    with no `sessionlog.cost_usd` and `sessionlog.unpriced_events` 1, and the root span carries
    the session's `unpricedEvents` beside its `costUsd`, where the call said `cost_usd` 0.0 and
    the root nothing, a free model's figures: a collector could not tell the cost was partial."""
    events = [NewEvent.from_json(e).committed(n, 1000 + n) for n, e in enumerate(priced_and_unpriced())]
    spans = spans_of(otlp_traces(events, SID))
    chat = [span for span in spans if span["name"].startswith("chat")]
    assert [span_attr(span, "sessionlog.cost_usd") for span in chat] == [0.25, None]
    assert [span_attr(span, "sessionlog.unpriced_events") for span in chat] == [None, 1]
    assert [span_attr(span, "gen_ai.usage.output_tokens") for span in chat] == [4, 4]
    (root,) = [span for span in spans if "parentSpanId" not in span or not span["parentSpanId"]]
    totals = stats(events)
    assert span_attr(root, "sessionlog.cost_usd") == totals["costUsd"] == 0.25
    assert span_attr(root, "sessionlog.unpriced_events") == totals["unpricedEvents"] == 1


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


def test_a_trace_the_service_names_carries_every_id_and_the_name_stays_the_id() -> None:
    """A session the service knows under a key of its namespace (`alice:s1`) is exported under
    the trace id the service tells (`Session.trace_id`): every span carries it, every span id
    follows it (another tenant's `s1` shares none), and the spans still name the session by
    its id. Without one, the id is hashed, as the service hashes a default-namespace key."""
    events = repaired()
    alice, mallory = trace_id(f"alice:{SID}"), trace_id(f"mallory:{SID}")
    spans = spans_of(otlp_traces(events, SID, trace=alice))
    assert {s["traceId"] for s in spans} == {alice}
    assert {span_attr(s, "gen_ai.conversation.id") for s in spans} == {SID}
    assert spans[0]["name"] == f"session {SID}"
    others = spans_of(otlp_traces(events, SID, trace=mallory))
    assert not {s["spanId"] for s in spans} & {s["spanId"] for s in others}
    assert [s["name"] for s in others] == [s["name"] for s in spans]
    assert otlp_traces(events, SID) == otlp_traces(events, SID, trace=trace_id(SID))


def resource_of(document: dict[str, Any]) -> dict[str, str]:
    """The (string) resource attributes of a document's one resource, as a collector reads them."""
    [resource_spans] = parse(document).resource_spans
    return {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}


def test_the_namespace_the_service_keeps_a_session_in_is_its_resource() -> None:
    """A tenant's session (`alice:s1`) is written under a resource that names its namespace, so
    a collector fed several tenants' sessions filters, groups or routes them by it; the spans
    are those of the session without it (it is the resource's, not a span's). An export that
    knows no namespace (a log in hand, an older service) writes the resource it always did."""
    events = repaired()
    trace = trace_id(f"alice:{SID}")
    named = otlp_traces(events, SID, trace=trace, namespace="alice")
    assert resource_of(named) == {"service.name": "sessionlog", NAMESPACE: "alice"}
    assert spans_of(named) == spans_of(otlp_traces(events, SID, trace=trace))
    assert resource_of(otlp_traces(events, SID, trace=trace_id(f"mallory:{SID}"), namespace="mallory"))[NAMESPACE] == (
        "mallory"
    )
    assert otlp_traces(events, SID)["resourceSpans"][0]["resource"] == {
        "attributes": [{"key": "service.name", "value": {"stringValue": "sessionlog"}}]
    }
    again = otlp_traces(list(events), SID, trace=trace, namespace="alice")
    assert jsonvalue.dumps(again) == jsonvalue.dumps(named)  # a re-export is byte-identical


def test_following_sends_every_span_under_the_exports_resource() -> None:
    """The follower (and the service's live export, which is one) sends each turn's spans and
    the root under the resource the OTLP/JSON export writes, the namespace included."""
    events = repaired()
    exporter = InMemorySpanExporter()
    export = SessionExport(SID, exporter, trace=trace_id(f"alice:{SID}"), namespace="alice")
    for event in events:
        export.add(event)
    export.finish()
    sent = exporter.get_finished_spans()
    assert len(sent) == len(spans_of(otlp_traces(events, SID)))
    want = resource_of(otlp_traces(events, SID, namespace="alice"))
    assert want[NAMESPACE] == "alice"
    assert all(dict(span.resource.attributes) == want for span in sent)


def test_an_empty_namespace_is_refused() -> None:
    """A namespace is never empty (the service refuses a token of one); unknown is None."""
    with pytest.raises(ValueError, match="namespace must be a non-empty string"):
        otlp_traces(repaired(), SID, namespace="")


@pytest.mark.parametrize("trace", ["", "0" * 32, "A" * 32, "a" * 31, "g" * 32])
def test_a_trace_id_that_is_not_32_hex_digits_is_refused(trace: str) -> None:
    with pytest.raises(ValueError, match="not 32 lowercase hex digits"):
        otlp_traces(repaired(), SID, trace=trace)


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


# --- where spans lie in time ---------------------------------------------------------------

IMPORTED_AT = 1_800_000_000_000
"""The commit time of an import: one instant for the whole file."""
FORKED_AT = IMPORTED_AT + 60_000
R = 1_700_000_000_000
"""The recorded times of the hand-made imported logs below are R + an offset (ms)."""


def laid(spans: list[dict[str, Any]], origin: int, unit: int = 1) -> list[tuple[str, Any, float, float]]:
    """(name, seq or call id, start, end) of every span, times as (ms - origin) / unit."""
    out = []
    for span in spans:
        start, end = span_ms(span)
        what = span_attr(span, "gen_ai.tool.call.id") or span_attr(span, "sessionlog.seq")
        out.append((span["name"], what, (start - origin) / unit, (end - origin) / unit))
    return out


def recorded(envelope: dict[str, Any], at: int) -> dict[str, Any]:
    """`envelope` carrying the time its source recorded, R + `at` ms."""
    return {**envelope, "data": {**envelope["data"], "recordedTime": R + at}}


def imported_log(*timed: tuple[dict[str, Any], int | None], time: int = IMPORTED_AT, seq: int = 0) -> list[Event]:
    """Envelopes committed at one instant from `seq` on, each with its recorded time (None: none)."""
    return [
        NewEvent.from_json(recorded(envelope, at) if at is not None else envelope).committed(seq + n, time)
        for n, (envelope, at) in enumerate(timed)
    ]


def imported_fork() -> list[Event]:
    """An imported session forked in its second turn, and the fork's own third turn: the head (seq
    0) and what the fork wrote (`fork_seed`: the end-seed and the closers of turn 2) carry no
    recorded time; everything the file had does."""
    shared = imported_log(
        (system("prompt"), None),  # 0: the head the service inserts, no time of Pi's
        (user("q1"), 0),
        (turn_start(1), 0),
        (step_start(1, 1), 1_000),  # the request went out
        (assistant(1, 1, calls=(("c1", "read"),), usage=usage(100, 0, 5)), 3_000),
        (tool_result(1, 1, "c1", "x"), 3_500),
        (step_end(1, 1), 4_000),
        (step_start(1, 2), 4_000),
        (assistant(1, 2, text="a1", usage=usage(100, 100, 5)), 6_000),
        (step_end(1, 2), 6_000),
        (turn_end(1), 6_000),
        (user("q2"), 10_000),  # 11
        (turn_start(2), 10_000),
        (step_start(2, 1), 11_000),
        (assistant(2, 1, calls=(("c2", "bash"),), usage=usage(100, 100, 5)), 12_000),  # 14
    )
    seed = commit_closers(fork_seed(shared), len(shared), FORKED_AT)  # 15..18, the service's clock
    own = imported_log(
        (user("q3"), 20_000),
        (turn_start(3), 20_000),
        (step_start(3, 1), 21_000),
        (assistant(3, 1, text="a3", usage=usage(100, 100, 5)), 23_000),
        (step_end(3, 1), 23_000),
        (turn_end(3), 23_000),
        time=FORKED_AT,
        seq=len(shared) + len(seed),
    )
    return shared + seed + own


def test_a_live_sessions_trace_lies_on_commit_times() -> None:
    """A live session (no recorded times) keeps the trace it always had: every span on commit
    times (the scripted log commits an event a second), none marked unknown-duration but those
    that end at a closer the repair wrote (it commits when the repair runs, not when what it
    closes ended: a span to it read as the call's or the turn's length). Pinned."""
    events = repaired()
    spans = spans_of(otlp_traces(events, SID))
    assert laid(spans, events[0].time, 1000) == [
        (f"session {SID}", None, 0, 50),
        ("invoke_agent", None, 3, 17),
        ("invoke_agent", None, 20, 29),
        ("invoke_agent", None, 36, 45),
        ("invoke_agent", None, 47, 50),  # the repair's closers commit at the last event's time
        *[("chat m-1", seq, seq - 1, seq) for seq in (5, 10, 15, 22, 27, 31, 38, 43, 49)],
        ("execute_tool read", "c1", 6, 7),  # from its tool/call to its result
        ("execute_tool read", "c2", 11, 12),
        ("execute_tool bash", "c3", 23, 24),
        ("execute_tool read", "c4", 39, 40),
        ("execute_tool bash", "c5", 50, 50),
        ("execute_tool bash", "c6", 49, 50),  # never started: from the message that asked for it
    ]
    root = spans[0]
    assert [(int(e["timeUnixNano"]) // 1_000_000 - events[0].time) // 1000 for e in root["events"]] == [
        0,
        19,
        31,
        32,
        34,
        50,
    ]
    placed = zip(spans, laid(spans, events[0].time, 1000), strict=True)
    unknown = [at for span, at in placed if span_attr(span, DURATION_UNKNOWN) is not None]
    assert unknown == [
        ("invoke_agent", None, 47, 50),  # turn 4, ended `interrupted` by the repair
        ("execute_tool bash", "c5", 50, 50),  # answered TOOL_OUTCOME_UNKNOWN
        ("execute_tool bash", "c6", 49, 50),  # answered TOOL_NOT_STARTED
    ]


def test_an_imported_sessions_spans_lie_on_its_recorded_times() -> None:
    """Spans are laid on the times the source recorded: the import's one commit instant gave every
    span zero length. What carries no recorded time (the head, what the fork wrote) lies at the
    latest recorded time before it (the head: the earliest after it), its span marked
    unknown-duration, never months away on the service's clock."""
    events = imported_fork()
    spans = spans_of(otlp_traces(events, SID))
    assert laid(spans, R) == [
        (f"session {SID}", None, 0, 23_000),  # from the first recorded time: the head lies there
        ("invoke_agent", None, 0, 6_000),
        ("invoke_agent", None, 10_000, 12_000),  # closed by the fork: it ends at its last known time
        ("invoke_agent", None, 20_000, 23_000),
        ("chat", 4, 1_000, 3_000),  # from the request (step/start) to the answer
        ("chat", 8, 4_000, 6_000),
        ("chat", 14, 11_000, 12_000),
        ("chat", 22, 21_000, 23_000),
        ("execute_tool read", "c1", 3_000, 3_500),
        ("execute_tool bash", "c2", 12_000, 12_000),  # answered by the fork's closer
    ]
    unknown = [
        (s["name"], span_attr(s, "sessionlog.seq")) for s in spans if span_attr(s, "sessionlog.duration_unknown")
    ]
    assert unknown == [("invoke_agent", None), ("execute_tool bash", 14)]
    markers = {e["name"]: int(e["timeUnixNano"]) // 1_000_000 - R for e in spans[0]["events"]}
    assert markers == {"sessionlog.fork": 12_000, "sessionlog.repair": 12_000}


def test_a_span_the_recorded_times_put_outside_its_turn_is_kept_inside_it() -> None:
    """A source's times need not follow the log's order (a request stamped before the prompt
    that opened its turn was written): the span is cut to its turn and marked unknown-duration,
    so the trace still nests."""
    events = imported_log(
        (system("prompt"), None),
        (user("q1"), 0),
        (turn_start(1), 0),
        (step_start(1, 1), -5),  # the request went out 5 ms before the prompt's entry was stamped
        (assistant(1, 1, text="a1", usage=usage(100, 0, 5)), 2_000),
        (step_end(1, 1), 2_000),
        (turn_end(1), 2_000),
    )
    spans = spans_of(otlp_traces(events, SID))
    assert laid(spans, R) == [
        (f"session {SID}", None, -5, 2_000),
        ("invoke_agent", None, 0, 2_000),
        ("chat", 4, 0, 2_000),
    ]
    assert [span_attr(s, "sessionlog.duration_unknown") for s in spans] == [None, None, True]


def unanswered() -> list[Event]:
    """A live session whose step ended without a result for its call, and a later turn."""
    script = [system("prompt"), user("q1"), turn_start(1), step_start(1, 1)]
    script += [assistant(1, 1, calls=(("c1", "read"),), usage=usage(100, 0, 5)), step_end(1, 1), turn_end(1)]
    script += [user("q2"), turn_start(2), step_start(2, 1), assistant(2, 1, text="a2"), step_end(2, 1), turn_end(2)]
    return committed(script)


def test_an_unanswered_tool_call_ends_with_its_step() -> None:
    """A call whose step ended without a result ran to the end of the log, outside its turn, and
    a follower (which sends it when its turn ends) gave it another end than the export."""
    events = unanswered()
    spans = spans_of(otlp_traces(events, SID))
    tool = next(s for s in spans if s["name"] == "execute_tool read")
    assert span_attr(tool, "sessionlog.tool.outcome") == "unanswered"
    assert laid([tool], events[0].time, 1000) == [("execute_tool read", "c1", 4, 5)]  # the message, step/end


def followed(events: list[Event], fork: ForkOrigin | None = None) -> list[tuple[Any, ...]]:
    """The spans `SessionExport` (the follower and the service's live export) sends, a turn at a
    time, then the rest with the root, through a real SDK exporter held in memory."""
    exporter = InMemorySpanExporter()
    export = SessionExport(SID, exporter, fork=fork)
    for event in events:
        export.add(event)
    export.finish()
    return sorted(sdk_span(span) for span in exporter.get_finished_spans())


def exported(events: list[Event], fork: ForkOrigin | None = None) -> list[tuple[Any, ...]]:
    """The spans of `otlp_traces`, as the SDK spans the follower sends would be."""
    resource, scope = Resource(RESOURCE), InstrumentationScope(SCOPE_NAME, "")
    spans = spans_of(otlp_traces(events, SID, fork=fork))
    return sorted(sdk_span(readable_span(s, resource, scope)) for s in spans)


def sdk_span(span: ReadableSpan) -> tuple[Any, ...]:
    assert span.context is not None
    parent = span.parent.span_id if span.parent is not None else None
    events = [(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events]
    attributes = dict(span.attributes or {})
    links = [(link.context.trace_id, link.context.span_id) for link in span.links]
    return (span.context.span_id, parent, span.name, span.start_time, span.end_time, attributes, events, links)


@pytest.mark.parametrize("log", [repaired, imported_fork, unanswered], ids=lambda f: f.__name__)
def test_following_sends_the_spans_of_the_export(log: Any) -> None:
    """Sent turn by turn as each ends, every span is the one the whole export has: ids, times,
    attributes and markers alike (the live tests compare ids and names through a receiver)."""
    events = log()
    assert followed(events) == exported(events)


# --- forks: a fork's trace holds what the fork itself wrote --------------------------------------

PARENT, FORK, FORK2 = "sess-parent", "sess-fork", "sess-fork2"


def continued(log: list[Event], script: list[dict[str, Any]]) -> list[Event]:
    """`log` and then `script`, committed a second apart after its last event."""
    start, time = len(log), log[-1].time
    return log + [NewEvent.from_json(e).committed(start + n, time + 1000 * (n + 1)) for n, e in enumerate(script)]


def forked(source: list[Event], cut: int) -> list[Event]:
    """A fork of `source` at seq `cut`: the shared prefix, then what the service writes (the
    inherited seed, and the closers of a turn open at the cut, `forked`), a second later."""
    shared = source[: cut + 1]
    return shared + commit_closers(fork_seed(shared), len(shared), shared[-1].time + 1000)


def family() -> tuple[list[Event], list[Event], list[Event], int, int]:
    """A parent, its fork cut inside turn 2 while call c2 is pending (the fork's seed and closers
    at 11..14, then its own turn 3), and a fork of that fork cut inside turn 3 while c3 is
    pending, past the first fork's seed: its log holds two seeds, the last its own. Returns the
    three logs and the two cuts."""
    turn1 = [system("prompt"), user("q1"), turn_start(1), step_start(1, 1)]
    turn1 += [assistant(1, 1, text="a1", usage=usage(100, 0, 5)), step_end(1, 1), turn_end(1)]
    turn2 = [user("q2"), turn_start(2), step_start(2, 1)]
    turn2 += [assistant(2, 1, calls=(("c2", "bash"),), usage=usage(200, 100, 10))]  # 10: the cut
    parent = committed(turn1 + turn2)
    cut = len(parent) - 1
    rest = [tool_result(2, 1, "c2", "ok"), step_end(2, 1), step_start(2, 2)]
    rest += [assistant(2, 2, text="a2", usage=usage(300, 200, 10)), step_end(2, 2), turn_end(2)]
    parent = continued(parent, rest)
    turn3 = [user("q3"), turn_start(3), step_start(3, 1)]
    turn3 += [assistant(3, 1, calls=(("c3", "read"),), usage=usage(400, 0, 7))]  # 18: the second cut
    fork = continued(forked(parent, cut), turn3)
    cut2 = len(fork) - 1
    rest = [tool_result(3, 1, "c3", "x"), step_end(3, 1), step_start(3, 2)]
    rest += [assistant(3, 2, text="a3", usage=usage(500, 400, 9)), step_end(3, 2), turn_end(3)]
    fork = continued(fork, rest)
    turn4 = [user("q4"), turn_start(4), step_start(4, 1)]
    turn4 += [assistant(4, 1, text="a4", usage=usage(600, 500, 11)), step_end(4, 1), turn_end(4)]
    fork2 = continued(forked(fork, cut2), turn4)
    return parent, fork, fork2, cut, cut2


def fork_traces() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The spans of the family's three traces, each fork told its parent and cut."""
    parent, fork, fork2, cut, cut2 = family()
    return (
        spans_of(otlp_traces(parent, PARENT)),
        spans_of(otlp_traces(fork, FORK, fork=ForkOrigin(PARENT, cut))),
        spans_of(otlp_traces(fork2, FORK2, fork=ForkOrigin(FORK, cut2))),
    )


def chat_seqs(spans: list[dict[str, Any]]) -> list[int]:
    return [span_attr(s, "sessionlog.seq") for s in spans if span_attr(s, "gen_ai.operation.name") == "chat"]


def test_a_forks_trace_holds_its_own_spans_and_the_turn_it_cut() -> None:
    """The fork sent its parent's chat spans again (under new ids, in its own trace) and its
    root carried the whole log's cost. Now: chat and tool spans of its own events only, the turn
    it cut and closed (`forked`) under its own id, its own markers, and a root that names the
    parent and cut, links to the parent's root and spans the cut turn and its own events."""
    parent, fork, _, cut, _ = family()
    spans = spans_of(otlp_traces(fork, FORK, fork=ForkOrigin(PARENT, cut)))
    assert chat_seqs(spans) == [18, 22] and all(seq > cut for seq in chat_seqs(spans))
    tools = [s for s in spans if s["name"].startswith("execute_tool")]
    # c2 was asked in the prefix: its span is the parent's.
    assert [(span_attr(s, "gen_ai.tool.call.id"), span_attr(s, "sessionlog.seq")) for s in tools] == [("c3", 18)]
    turns = [s for s in spans if s["name"] == "invoke_agent"]
    assert [(span_attr(t, "sessionlog.turn"), span_attr(t, "sessionlog.turn.end_kind")) for t in turns] == [
        (2, "forked"),
        (3, "completed"),
    ]
    assert turns[0]["spanId"] == span_id(trace_id(FORK), "turn", 8)  # the cut turn began at 8, in the prefix
    assert turns[0]["spanId"] not in {s["spanId"] for s in spans_of(otlp_traces(parent, PARENT))}
    root = spans[0]
    assert [e["name"] for e in root["events"]] == ["sessionlog.fork", "sessionlog.repair"]
    assert (span_attr(root, FORK_PARENT), span_attr(root, FORK_SEQ)) == (PARENT, cut)
    assert span_attr(root, "sessionlog.events") == len(fork) - cut - 1
    assert root["links"] == [
        {"traceId": trace_id(PARENT), "spanId": spans_of(otlp_traces(parent, PARENT))[0]["spanId"]}
    ]
    assert span_ms(root) == (span_ms(turns[0])[0], fork[-1].time)  # from the cut turn's start
    assert all(span_ms(root)[0] <= span_ms(s)[0] <= span_ms(s)[1] <= span_ms(root)[1] for s in spans)


def test_a_forks_root_costs_what_costs_counts_as_its_own_and_a_family_adds_up() -> None:
    """Adding the roots of a session and its forks counted each inherited prefix again; each
    root now carries what `sessionlog costs` counts as the session's own, so they add up to the
    family's total, a fork of a fork (two seeds in its log) included."""
    parent, fork, fork2, cut, cut2 = family()
    rows = [
        SessionCost.of(PARENT, None, None, stats(parent)),
        SessionCost.of(FORK, PARENT, cut, stats(fork), stats(parent[: cut + 1])),
        SessionCost.of(FORK2, FORK, cut2, stats(fork2), stats(fork[: cut2 + 1])),
    ]
    roots = [spans[0] for spans in fork_traces()]
    for root, row in zip(roots, rows, strict=True):
        assert span_attr(root, "sessionlog.cost_usd") == row.own["costUsd"]
        assert span_attr(root, "sessionlog.unpriced_events") == row.own["unpricedEvents"]
        assert span_attr(root, "sessionlog.events") == row.own["events"]
    costs = [span_attr(root, "sessionlog.cost_usd") for root in roots]
    assert total_cost(costs) == total_figures(rows)["costUsd"]
    assert total_cost(costs) < total_cost([row.stats["costUsd"] for row in rows])  # each prefix once
    assert [span_attr(root, FORK_SEQ) for root in roots] == [None, cut, cut2]


def test_a_fork_of_a_fork_holds_only_what_it_wrote() -> None:
    """The fork of a fork inherits its parent's seed and own turn 3 up to the cut: its trace has
    its own chat spans, its own turn and the turn 3 it cut, not its parent's chat at 18."""
    _, _, fork2, _, cut2 = family()
    spans = fork_traces()[2]
    assert chat_seqs(spans) == [len(fork2) - 3] and all(seq > cut2 for seq in chat_seqs(spans))
    turns = [(span_attr(s, "sessionlog.turn"), span_attr(s, "sessionlog.turn.end_kind")) for s in spans]
    assert [t for t in turns if t[0] is not None] == [(3, "forked"), (4, "completed")]
    assert not any("tool" in s["name"] for s in spans)  # c3 was asked by its parent
    assert [e["name"] for e in spans[0]["events"]] == ["sessionlog.fork", "sessionlog.repair"]  # its own seed only
    assert spans[0]["links"][0]["traceId"] == trace_id(FORK)


def test_a_fork_told_no_cut_is_exported_whole_and_a_session_that_is_no_fork_as_before() -> None:
    """`fork=None` is the trace of the whole log, as always (the rule needs the cut named)."""
    parent, fork, _, _, _ = family()
    assert otlp_traces(parent, PARENT, fork=None) == otlp_traces(parent, PARENT)
    assert chat_seqs(spans_of(otlp_traces(fork, FORK)))[0] == 4
    with pytest.raises(ValueError, match="at least 0"):
        ForkOrigin(PARENT, -1)


def fork_logs() -> list[tuple[list[Event], ForkOrigin]]:
    _parent, fork, fork2, cut, cut2 = family()
    return [(fork, ForkOrigin(PARENT, cut)), (fork2, ForkOrigin(FORK, cut2, trace_id(FORK)))]


@pytest.mark.parametrize("which", [0, 1], ids=["fork", "fork-of-fork"])
def test_following_a_fork_sends_the_spans_of_its_export(which: int) -> None:
    """The follower (`sessionlog otlp`, the service's live export) and the export send one set of
    spans for a fork: the same ids, times, attributes, markers and link."""
    events, fork = fork_logs()[which]
    assert followed(events, fork) == exported(events, fork)
    assert any(s[2] == "invoke_agent" and s[5]["sessionlog.turn.end_kind"] == "forked" for s in followed(events, fork))


def test_a_fork_followed_in_two_runs_sends_each_span_once() -> None:
    """A follower stopped inside the fork's own turn, and a run that goes on from its
    `resume_from` (`--from`), send the export's spans, each turn once; the root goes out each
    time (with the whole log's figures the second time)."""
    events, fork = fork_logs()[0]
    first, second = InMemorySpanExporter(), InMemorySpanExporter()
    stop = len(events) - 3  # inside turn 3, after its first answer
    export = SessionExport(SID, first, fork=fork)
    for event in events[:stop]:
        export.add(event)
    export.finish(open_turn=False)
    again = SessionExport(SID, second, fork=fork, from_seq=export.next_seq)
    for event in events:
        again.add(event)
    again.finish()
    sent = [sdk_span(s) for s in [*first.get_finished_spans(), *second.get_finished_spans()] if s.parent is not None]
    assert sorted(sent) == [s for s in exported(events, fork) if s[1] is not None]
