"""A session as OTLP/JSON traces with the OpenTelemetry GenAI semantic conventions (issue 14).

One trace per session, built from `timeline()` so the figures are the page's figures:

- a root span `session {id}` (INTERNAL) spanning the log, carrying the markers as span events
  (`sessionlog.request_header`, `sessionlog.compaction`, `sessionlog.surface_replace`,
  `sessionlog.repair`, `sessionlog.fork`, `sessionlog.resume`);
- an `invoke_agent` span per turn (INTERNAL; a turn is one execution of the agent loop);
- a `chat {model}` span (CLIENT) per model request, and per other event that carries usage
  (a compaction's summariser call), so the spans' token sums equal the stats projection;
  `gen_ai.usage.input_tokens` counts cached tokens too, as the conventions ask (Pi's `input`
  does not: it is input + cacheRead + cacheWrite here);
- an `execute_tool {name}` span (INTERNAL) per tool call, child of its turn.

Span times: a request starts at the event before its response (its prefix was complete then)
and ends at the response; a tool call runs from its `tool/call` (else the assistant message)
to its result, or to the `step/end` that left it without one (unanswered: it ran past its turn
to the end of the log before, and a follower, which sends it when its turn ends, gave it another
end than the export). An open turn or pending call ends at the end of the log.

Each of those events lies where `clock.SessionClock` puts it: at its commit time in a live
session, at the time its source recorded (`data.recordedTime`) in an imported one, where every
commit time is the one instant of the import. An event an imported session holds without a
recorded time (the head, a fork's seed and closers, an importer's end-of-branch closers) lies at
the latest recorded time before it (the head: at the first one), and a span that starts or ends
at such an event, or ends at a closer repair wrote (it lies at the repair's time, not when what
it closes ended), is marked `sessionlog.duration_unknown` (its length is not the time between its
two events, which the timeline calls unknown too): a turn a fork closed ends at the last thing
known to have happened in it, a call the fork answered is zero-length. The trace nests: the root
spans every event's time, turns lie in it, and a model or tool call whose times fall outside its
turn's (a source clock that does not follow the log's order) is cut to the turn and marked as
well. A turn, and the calls in it, are laid from the events up to its `turn/end`, so a follower
that sends them when the turn ends sends the spans the whole export has (the root, and what is
still open, it sends at the end, from the whole log).

Ids are derived, so a re-export is byte-identical, and a session has one trace whichever way its
spans are sent: the trace id is the first 16 bytes of sha256("sessionlog/trace\\0" + key), where
the key is the session's key in the service (`namespace:id`, the bare id in the default
namespace: two tenants' sessions `s1` differ), which the service tells its clients as
`Session.trace_id`, and a session read without a service is keyed by its id; a span id is the
first 8 bytes of sha256("sessionlog/span\\0" + trace id + "\\0" + what + "\\0" + seq), so
it follows the trace. OTLP/JSON writes them as hex (not base64, unlike the generic protobuf
JSON mapping), 64-bit integers as decimal strings, enums as integers.

The session's namespace (its tenant on a service with bearer-token tenants; `default` without
them), when known, is the resource attribute `sessionlog.namespace`: every span of the session
is under one resource, which names who the spans belong to, so a collector receiving several
tenants' sessions filters, groups or routes them by it (the OpenTelemetry conventions have no
tenant attribute; `service.namespace` qualifies the service's name, and the one service serves
every tenant). The service knows it (and tells it clients as `Session.namespace`); a log read
without a service has none, and its export carries no such attribute.

A fork's trace holds what the fork itself wrote, the events `sessionlog costs` counts as its own
(docs/repair.md#fork): its log's prefix 0..fork_seq is its parent's, and in its parent's trace
already. Its caller names the cut (`ForkOrigin`: the service knows every session's `fork_seq`, a
client reads it with `GetSession`); it is not guessed from the events, since a fork of a fork
holds its parent's seed in its prefix, and a follower would have sent the parent's own turns
before it met the fork's own seed. So a fork's trace has a `chat` span for each event after
the cut, an `execute_tool` span for each call asked after it, an `invoke_agent` span for each
turn that ends after it or is still open (the turn the fork cut and closed `forked` is in the
fork's trace, under the fork's own span id: it began in the prefix, but the fork ended it), and
root markers for the events after it. Its root carries the fork's own figures, as `costs` has
them (`costs.own_figures`: its `sessionlog.cost_usd`, `sessionlog.unpriced_events` and
`sessionlog.events`), so the roots of a session and its forks add up to the family's total, spans
the times of its own events and of the turns it holds, names its parent and cut
(`sessionlog.fork.parent_id`, `sessionlog.fork.seq`) and, when the parent's trace is known,
links to the parent's root span. A session that is no fork owns all of its log: its trace is
what it always was.

Message content is left out unless asked (`content=True`): then chat spans carry
`gen_ai.input.messages` (the exact request's messages) and `gen_ai.output.messages` as JSON
strings in the conventions' `{role, parts}` shape.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sessionlog.core import jsonvalue
from sessionlog.core.clock import Placement, SessionClock
from sessionlog.core.costs import Figures, own_figures
from sessionlog.core.events import Event, JsonObject
from sessionlog.core.messages import message_of
from sessionlog.core.projections.stats import usage_of
from sessionlog.core.projections.timeline import TimelineFold, usage_view
from sessionlog.core.repair import is_repair_closer
from sessionlog.core.surface import surface_messages
from sessionlog.core.vocabulary import STEP_END

SCOPE_NAME = "sessionlog"
RESOURCE: dict[str, Any] = {"service.name": "sessionlog"}
"""The resource attributes of every export; a session's resource adds its namespace (`resource`)."""
NAMESPACE = "sessionlog.namespace"
"""The resource attribute naming the session's namespace (tenant), when it is known."""
FORK_PARENT = "sessionlog.fork.parent_id"
"""The root span's attribute naming a fork's parent (by the id its callers know it by)."""
FORK_SEQ = "sessionlog.fork.seq"
"""The root span's attribute naming a fork's cut: the parent's events 0..it are inherited."""
DURATION_UNKNOWN = "sessionlog.duration_unknown"
"""The attribute (true) of a span whose length is not the time between its two events."""
SPAN_KIND_INTERNAL = 1
SPAN_KIND_CLIENT = 3
STATUS_ERROR = 2

MARKER_EVENTS = {
    "header": "sessionlog.request_header",
    "compaction": "sessionlog.compaction",
    "replace": "sessionlog.surface_replace",
    "repair": "sessionlog.repair",
    "fork": "sessionlog.fork",
    "resume": "sessionlog.resume",
}


def trace_id(key: str) -> str:
    """The trace id (32 lowercase hex digits) of the session of key `key`: its key in the service
    (`namespace:id`; the id alone in the default namespace), which the service hashes and tells
    clients as `Session.trace_id`, or its id when no service names it (an offline log)."""
    return hashlib.sha256(b"sessionlog/trace\0" + key.encode("utf-8")).hexdigest()[:32]


def resource(namespace: str | None) -> dict[str, Any]:
    """The resource attributes of the spans of a session of namespace `namespace` (None: not
    known, so not named)."""
    return dict(RESOURCE) if namespace is None else {**RESOURCE, NAMESPACE: namespace}


def span_id(trace: str, what: str, seq: int | str) -> str:
    """A span id (16 hex digits) for `what` at `seq` in the session of trace id `trace`."""
    key = f"sessionlog/span\0{trace}\0{what}\0{seq}".encode()
    return hashlib.sha256(key).hexdigest()[:16]


def root_span_id(trace: str) -> str:
    """The span id of the root span `session {id}` of the session of trace id `trace`."""
    return span_id(trace, "session", 0)


def is_trace_id(value: str) -> bool:
    """32 lowercase hex digits, not all zero (OTLP's invalid trace id)."""
    return len(value) == 32 and all(c in "0123456789abcdef" for c in value) and value != "0" * 32


def _nanos(ms: int) -> str:
    return str(ms * 1_000_000)


def _value(value: Any) -> JsonObject:
    """An OTLP AnyValue: bool, int (decimal string), double, string, or array of those."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_value(item) for item in value]}}
    return {"stringValue": str(value)}


def attributes(values: dict[str, Any]) -> list[JsonObject]:
    """OTLP key/value attributes, None values left out, in the given order."""
    return [{"key": key, "value": _value(value)} for key, value in values.items() if value is not None]


def _tokens(value: int | float) -> int:
    return int(value)


def semconv_message(message: JsonObject) -> JsonObject:
    """A Pi-shaped message in the GenAI conventions' `{role, parts}` shape."""
    role = message.get("role")
    if role == "toolResult":
        response = message.get("content")
        part = {"type": "tool_call_response", "id": message.get("toolCallId"), "response": response}
        return {"role": "tool", "parts": [part]}
    content = message.get("content")
    parts: list[JsonObject] = []
    if isinstance(content, str):
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                parts.append({"type": "text", "content": block.get("text", "")})
            elif kind == "thinking":
                parts.append({"type": "reasoning", "content": block.get("thinking", "")})
            elif kind == "toolCall":
                call = {"id": block.get("id"), "name": block.get("name"), "arguments": block.get("arguments")}
                parts.append({"type": "tool_call", **call})
            else:
                parts.append({"type": str(kind)})
    return {"role": role if isinstance(role, str) else "user", "parts": parts}


@dataclass(frozen=True, slots=True)
class Extent:
    """A span's start and end (epoch ms), and whether its length is the time between its two
    events (`measured`)."""

    start: int
    end: int
    measured: bool


def extent(start: Placement, end: Placement, within: Extent | None = None) -> Extent:
    """The span from `start` to `end`, cut to `within` (its parent's extent) so the trace nests.
    Its length is measured when both ends lie at their own times on the session's clock and
    nothing was cut (an end before the start is cut to a zero-length span at the start)."""
    low, high = (within.start, within.end) if within is not None else (start.ms, max(start.ms, end.ms))
    first = min(max(start.ms, low), high)
    last = min(max(end.ms, first), high)
    return Extent(first, last, start.timed and end.timed and (first, last) == (start.ms, end.ms))


def _span(
    trace: str,
    span: str,
    parent: str | None,
    name: str,
    kind: int,
    when: Extent,
    attrs: dict[str, Any],
) -> JsonObject:
    out: JsonObject = {"traceId": trace, "spanId": span}
    if parent is not None:
        out["parentSpanId"] = parent
    out.update(
        name=name,
        kind=kind,
        startTimeUnixNano=_nanos(when.start),
        endTimeUnixNano=_nanos(when.end),
        attributes=attributes({**attrs, DURATION_UNKNOWN: None if when.measured else True}),
    )
    return out


@dataclass(frozen=True, slots=True)
class ForkOrigin:
    """Where a fork came from: its parent (`parent_id`, the id its callers know it by), the cut
    (`seq`, its `fork_seq`: the parent's events 0..seq are the fork's inherited prefix), and the
    parent's trace id when known (the parent's `Session.trace_id`; None: hashed from the parent's
    id when the fork's own trace is hashed from its id, else not known and not linked)."""

    parent_id: str
    seq: int
    parent_trace: str | None = None

    def __post_init__(self) -> None:
        if self.seq < 0:
            raise ValueError(f"a fork's seq is at least 0, not {self.seq}")
        if self.parent_trace is not None and not is_trace_id(self.parent_trace):
            raise ValueError(f"trace id {self.parent_trace!r} is not 32 lowercase hex digits")


def fork_origin(parent_id: str | None, fork_seq: int | None, parent_trace: str | None = None) -> ForkOrigin | None:
    """The origin of a session that names its parent and fork seq (as `GetSession` and the
    service's session record do); None for a session that is no fork."""
    if parent_id is None or fork_seq is None:
        return None
    return ForkOrigin(parent_id, fork_seq, parent_trace)


def _between(records: list[JsonObject], key: str, first: int, last: int) -> list[JsonObject]:
    """The records (sorted by `key`) whose `key` lies in first..last."""
    low = bisect.bisect_left(records, first, key=lambda record: int(record[key]))
    high = bisect.bisect_right(records, last, key=lambda record: int(record[key]))
    return records[low:high]


class OtlpFold:
    """The spans of one session, folded event by event: `add` each event in seq order, then
    take `spans` of the whole log (an export) or of the seqs since the last call (a follower
    exporting each turn as it ends). Both give the same span for the same thing."""

    def __init__(
        self,
        session_id: str,
        *,
        trace: str | None = None,
        namespace: str | None = None,
        content: bool = False,
        fork: ForkOrigin | None = None,
    ) -> None:
        """`session_id` names the session in the spans (`session ID`, `gen_ai.conversation.id`);
        `trace` is its trace id as the service tells it (`Session.trace_id`), which every id
        derives from; None (no service, or one that predates the field): hashed from the id.
        `namespace` is the namespace the service keeps it in (`Session.namespace`), named by the
        resource of its spans (`resource`); None (no service, or an older one): not named.
        `fork` says where a fork came from (None: a session that is no fork, or a fork exported
        whole, as before): its trace then holds its own events only (the module docstring)."""
        if trace is not None and not is_trace_id(trace):
            raise ValueError(f"trace id {trace!r} is not 32 lowercase hex digits")
        if namespace == "":
            raise ValueError("namespace must be a non-empty string (None when it is not known)")
        self.session_id = session_id
        self.trace = trace_id(session_id) if trace is None else trace
        self.resource = resource(namespace)
        """The resource attributes every span of the session is sent or written under."""
        self.content = content
        self.fold = TimelineFold()
        self.clock = SessionClock()
        self.inputs: dict[int, list[JsonObject]] = {}
        self.root = root_span_id(self.trace)
        self.step_ends: dict[tuple[int, int], int] = {}
        """The seq of the `step/end` that closed each step (by `(turn, step)`): where a call its
        step ended without a result ends."""
        self.fork = fork
        self.own_from = 0 if fork is None else fork.seq + 1
        """The first seq of the session's own events: after a fork's cut, else the log's start."""
        self.inherited: JsonObject | None = None
        """A fork's stats at its cut (what it inherited), once folded that far."""
        self.parent_trace = None if fork is None else fork.parent_trace
        if fork is not None and self.parent_trace is None and trace is None:
            self.parent_trace = trace_id(fork.parent_id)  # both hashed from ids, as without a service

    @property
    def events(self) -> list[Event]:
        return self.fold.events

    def at(self, seq: int) -> Placement:
        """Where event `seq` lies in the trace; a repair's closer at its own time, but not as the
        time what it closes ended (`is_repair_closer`): a span that ends there is unmeasured."""
        placed = self.clock.at(seq)
        if placed.timed and is_repair_closer(self.fold.events[seq]):
            return Placement(placed.ms, False)
        return placed

    def end_of_log(self) -> Placement:
        """Where an open turn or a pending call ends: the latest time an event lies at."""
        events = self.fold.events
        return Placement(self.clock.bounds()[1], self.at(len(events) - 1).timed if events else True)

    def owns(self, seq: int) -> bool:
        """Whether event `seq` is the session's own: for a fork, one after its cut."""
        return seq >= self.own_from

    def holds_turn(self, turn: JsonObject) -> bool:
        """Whether the session's trace holds a turn: one it ended, or still open (a fork holds
        the turn it cut, which its closers ended, not the turns its parent ended)."""
        return turn["endSeq"] is None or self.owns(turn["endSeq"])

    def add(self, event: Event) -> None:
        """Fold one event (seqs 0, 1, 2, … in order)."""
        if self.content and self.owns(event.seq) and usage_of(event) is not None:
            # The request's messages: the surface of the prefix before the response.
            self.inputs[event.seq] = surface_messages(self.fold.surface.nodes, self.fold.event_at)
        if event.type == STEP_END:
            step = (event.data.get("turn"), event.data.get("step"))
            if step in self.fold.open_steps:
                self.step_ends[step] = event.seq
        self.fold.add(event)
        self.clock.add(event)
        if event.seq == self.own_from - 1:
            self.inherited = self.fold.stats()

    def common(self, operation: str) -> dict[str, Any]:
        return {"gen_ai.operation.name": operation, "gen_ai.conversation.id": self.session_id}

    def spans(self, first: int = 0, last: int | None = None, *, root: bool = True) -> list[JsonObject]:
        """The root span (when asked), then the spans of what seqs first..last hold: turns that
        start there, model calls answered there, tool calls asked for there; of a fork, those
        its trace holds (`holds_turn`, `owns`)."""
        events = self.fold.events
        last = len(events) - 1 if last is None else last
        out = [self.root_span()] if root else []
        turns = _between(self.fold.turns, "startSeq", first, last)
        out += [self.turn(turn) for turn in turns if self.holds_turn(turn)]
        first = max(first, self.own_from)
        requests = {request["seq"]: request for request in _between(self.fold.requests, "seq", first, last)}
        for event in events[first : last + 1]:
            usage = usage_of(event)
            if usage is not None or event.seq in requests:
                out.append(self.chat(event, requests.get(event.seq), usage))
        out += [self.tool(call) for call in _between(self.fold.tool_calls, "blockSeq", first, last)]
        return out

    def own_figures(self) -> Figures:
        """The session's own figures, as `sessionlog costs` counts them (`costs.own_figures`):
        a fork's totals less those at its cut, all of them for a session that is no fork."""
        whole = self.fold.stats()
        if self.fork is None:
            return own_figures(whole, None)
        return own_figures(whole, whole if self.inherited is None else self.inherited)  # None: not folded past the cut

    def root_extent(self) -> Extent:
        """The root spans every event's time; a fork's, the times of its own events and of the
        turns its trace holds (the turn it cut began in the prefix), so its spans nest in it."""
        low, high = self.clock.bounds()
        if self.fork is None:
            return Extent(low, high, True)
        times = [self.at(seq).ms for seq in range(self.own_from, len(self.fold.events))]
        for turn in filter(self.holds_turn, self.fold.turns):
            held = self.turn_extent(turn)
            times += [held.start, held.end]
        return Extent(min(times), max(times), True) if times else Extent(low, high, True)

    def root_span(self) -> JsonObject:
        """The span `session {id}`: the session's own figures and markers; a fork's names its
        parent and cut, and links to its parent's root when the parent's trace is known."""
        own = self.own_figures()
        fork = self.fork
        root = _span(
            self.trace,
            self.root,
            None,
            f"session {self.session_id}",
            SPAN_KIND_INTERNAL,
            self.root_extent(),
            {
                "gen_ai.conversation.id": self.session_id,
                "sessionlog.events": own["events"],
                "sessionlog.cost_usd": own["costUsd"],
                "sessionlog.unpriced_events": own["unpricedEvents"],
                FORK_PARENT: None if fork is None else fork.parent_id,
                FORK_SEQ: None if fork is None else fork.seq,
            },
        )
        root["events"] = [self.marker(marker) for marker in self.fold.markers if self.owns(marker["seq"])]
        if self.parent_trace is not None:
            root["links"] = [{"traceId": self.parent_trace, "spanId": root_span_id(self.parent_trace)}]
        return root

    def marker(self, marker: JsonObject) -> JsonObject:
        values = {
            "sessionlog.seq": marker["seq"],
            "sessionlog.header.reason": marker.get("reason"),
            "sessionlog.header.changed_fields": marker.get("fields") or None,
            "sessionlog.replace.start_seq": marker.get("startSeq"),
            "sessionlog.replace.end_seq": marker.get("endSeq"),
            "sessionlog.replace.source_kind": marker.get("sourceKind"),
            "sessionlog.turn.end_kind": marker.get("endKind"),
        }
        name = MARKER_EVENTS[marker["kind"]]
        return {"timeUnixNano": _nanos(self.at(marker["seq"]).ms), "name": name, "attributes": attributes(values)}

    def turn_extent(self, turn: JsonObject) -> Extent:
        """A turn's span: from its `turn/start` to its `turn/end`, else to the end of the log."""
        end = self.at(turn["endSeq"]) if turn["endSeq"] is not None else self.end_of_log()
        return extent(self.at(turn["startSeq"]), end)

    def turn(self, turn: JsonObject) -> JsonObject:
        span = span_id(self.trace, "turn", turn["startSeq"])
        out = _span(
            self.trace,
            span,
            self.root,
            "invoke_agent",
            SPAN_KIND_INTERNAL,
            self.turn_extent(turn),
            {
                **self.common("invoke_agent"),
                "sessionlog.turn": turn["turn"],
                "sessionlog.turn.end_kind": turn["endKind"],
            },
        )
        if turn["endKind"] not in (None, "completed"):
            out["status"] = {"code": STATUS_ERROR, "message": f"turn ended: {turn['endKind']}"}
        return out

    def parent_of(self, turn: Any) -> tuple[str, Extent | None]:
        """The span of turn number `turn` (turns are numbered 1, 2, … in log order) and its
        extent, else the root (whose extent holds every event's time: nothing to cut to)."""
        turns = self.fold.turns
        if isinstance(turn, int) and 0 < turn <= len(turns) and turns[turn - 1]["turn"] == turn:
            record = turns[turn - 1]
            return span_id(self.trace, "turn", record["startSeq"]), self.turn_extent(record)
        return self.root, None

    def chat(self, event: Event, request: JsonObject | None, usage: JsonObject | None) -> JsonObject:
        data = event.data
        message = message_of(event) or {}
        model = (request or {}).get("model") or data.get("model") or message.get("model")
        provider = (request or {}).get("provider") or data.get("provider") or message.get("provider")
        tokens = (request or {}).get("usage")
        if tokens is None and usage is not None:
            tokens = usage_view(usage)
        stop = message.get("stopReason")
        attrs: dict[str, Any] = {
            **self.common("chat"),
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.response.model": message.get("model"),
            "gen_ai.response.finish_reasons": [stop] if isinstance(stop, str) else None,
            "sessionlog.seq": event.seq,
            "sessionlog.event_type": event.type,
        }
        if tokens is not None:
            attrs.update(
                {
                    "gen_ai.usage.input_tokens": _tokens(tokens["context"]),
                    "gen_ai.usage.cache_read.input_tokens": _tokens(tokens["cacheRead"]),
                    "gen_ai.usage.cache_creation.input_tokens": _tokens(tokens["cacheWrite"]),
                    "gen_ai.usage.output_tokens": _tokens(tokens["output"]),
                    # A call with no price has no cost, and counts as one unpriced event.
                    "sessionlog.cost_usd": None if tokens["cost"] is None else float(tokens["cost"]),
                    "sessionlog.unpriced_events": 1 if tokens["cost"] is None else None,
                }
            )
        drop = (request or {}).get("drop")
        if drop is not None:
            attrs["sessionlog.cache_drop.causes"] = list(drop["causes"])
        error = data.get("error") if request is not None and request["kind"] == "attempt" else None
        if error is not None:
            attrs["error.type"] = str(error.get("code", "error")) if isinstance(error, dict) else "error"
        if self.content and event.seq in self.inputs:
            attrs["gen_ai.input.messages"] = jsonvalue.dumps([semconv_message(m) for m in self.inputs[event.seq]])
            if message:
                output = semconv_message(message)
                if isinstance(stop, str):
                    output["finish_reason"] = stop
                attrs["gen_ai.output.messages"] = jsonvalue.dumps([output])
        start = self.at(event.seq - 1 if event.seq > 0 else event.seq)
        name = f"chat {model}" if model else "chat"
        parent, within = self.parent_of(data.get("turn"))
        out = _span(
            self.trace,
            span_id(self.trace, "chat", event.seq),
            parent,
            name,
            SPAN_KIND_CLIENT,
            extent(start, self.at(event.seq), within),
            attrs,
        )
        if error is not None:
            out["status"] = {"code": STATUS_ERROR, "message": attrs["error.type"]}
        return out

    def call_end(self, call: JsonObject) -> int | None:
        """The seq a tool call's span ends at: its result, else the `step/end` that left it without
        one (unanswered, dropped), else None: still pending, it runs to the end of the log."""
        if call["resultSeq"] is not None:
            return int(call["resultSeq"])
        return self.step_ends.get((call["turn"], call["step"]))

    def tool(self, call: JsonObject) -> JsonObject:
        end_seq = self.call_end(call)
        end = self.at(end_seq) if end_seq is not None else self.end_of_log()
        start = self.at(call["callSeq"] if call["callSeq"] is not None else call["blockSeq"])
        parent, within = self.parent_of(call["turn"])
        attrs: dict[str, Any] = {
            **self.common("execute_tool"),
            "gen_ai.tool.name": call["name"],
            "gen_ai.tool.call.id": call["callId"],
            "gen_ai.tool.type": "function",
            "sessionlog.seq": call["blockSeq"],
            "sessionlog.tool.outcome": call["outcome"],
        }
        failed = call["outcome"] in ("error", "repaired")
        if failed:
            attrs["error.type"] = call["errorCode"] or "tool_error"
        out = _span(
            self.trace,
            span_id(self.trace, "tool", f"{call['blockSeq']}/{call['callId']}"),
            parent,
            f"execute_tool {call['name']}",
            SPAN_KIND_INTERNAL,
            extent(start, end, within),
            attrs,
        )
        if failed:
            out["status"] = {"code": STATUS_ERROR, "message": attrs["error.type"]}
        return out


def document(spans: list[JsonObject], version: str = "", resource: dict[str, Any] = RESOURCE) -> JsonObject:
    """An OTLP `ExportTraceServiceRequest` (OTLP/JSON) holding `spans`, under the resource of
    attributes `resource` (a session's: `OtlpFold.resource`)."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": attributes(resource)},
                "scopeSpans": [{"scope": {"name": SCOPE_NAME, "version": version}, "spans": spans}],
            }
        ]
    }


def otlp_traces(
    events: Sequence[Event],
    session_id: str,
    *,
    trace: str | None = None,
    namespace: str | None = None,
    content: bool = False,
    version: str = "",
    fork: ForkOrigin | None = None,
) -> JsonObject:
    """The session as an OTLP `ExportTraceServiceRequest` in OTLP/JSON (see the module docstring);
    `trace`, `namespace` and `fork` as `OtlpFold` takes them."""
    fold = OtlpFold(session_id, trace=trace, namespace=namespace, content=content, fork=fork)
    for event in events:
        fold.add(event)
    return document(fold.spans(), version, fold.resource)


def is_traces_url(value: str) -> bool:
    """An OTLP/HTTP traces endpoint is `http://` or `https://` with a host (and a port, if any,
    from 0 to 65535). The exporter takes anything and fails on every export, later; the service's
    setting and `sessionlog otlp --endpoint` both check with this at start."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number up to 65535
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
