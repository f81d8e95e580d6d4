"""The timeline of a session (issue 14): per-request usage, turns, steps, tool calls, markers, and
the named cause of every prompt-cache drop. A pure function of the log, in one pass.

What it reuses instead of restating: token and cost sums are `StatsAccumulator` (so the
cumulative cost at the last request plus later usage is exactly `stats().costUsd`), the surface
fold is `plan_surface_event`/`apply_surface_plan`, header changes are `changed_fields`, surface
changes are `SurfaceDelta` (request_diff.py), repair closers are recognised by the error codes
`repair.py` writes.

Definitions (each recomputable if it proves wrong, SPEC §1.6):

- A **request** is one model call (`stats.is_model_call`, so there are `modelCalls` of them).
  Its `seq` is the response event's seq; the request itself is the
  projection of the prefix before it (`atSeq = seq - 1`, as `sessionlog request --at`).
  The `requests` list also holds a row, of kind `summary`, for each other event that carries
  usage (a compaction's summariser call, `compaction/summary`; `other` for any other type): not
  a request of the conversation (no cache drop is measured against it, `counts.requests` leaves
  it out), but a call that was paid for, so the list's costs add up to `stats().costUsd` and
  the export's chat spans are its rows.
- A row's **cumulativeCost** is `stats().costUsd` of the prefix ending with it, and
  **cumulativeUnpriced** its `unpricedEvents`: while that is not 0 the cost is a lower bound.
- **context** = input + cacheRead + cacheWrite tokens: everything the model read, cached or
  not (Pi's `input` excludes cached tokens). **cacheShare** = cacheRead / context.
- A **cache drop** is a request whose cacheRead tokens are fewer than those of the previous
  request that carried usage: the cached prefix got shorter. (The share alone also falls
  when a long tool result is appended after a perfect hit, which breaks nothing.) Its
  **cause** compares the two requests: `header` (fields of the request that differ, `tools`
  included; `adapterDefaults` is not sent, so a change of it alone is no cause),
  `replace` (which surface range, by which event), or `none`: the request bytes kept the old
  prefix, so the provider's cache expired or was cold (`gapMs` says how long it waited).
- A tool call's **outcome**: `ok`, `error` (`isError`), `repaired` (a crash-repair or fork
  closer: `TOOL_OUTCOME_UNKNOWN` / `TOOL_NOT_STARTED`), `dropped` (a replace took its `toolCall`
  block off the surface without restating it, as the append checks and crash repair decide it:
  `structure.plan_restated_calls`; a copy that restates it makes it pending again),
  `unanswered` (its step ended without a result), or `pending` (no result yet, step open).
  The records are the calls of `assistant/message`s, the ones the structure pairs with their
  results by id; a fallback `user/message` carrying an assistant message (`pi-unstructured`:
  its calls lack ids or repeat one) has calls no result can answer, and gets no record.
  **durationMs** runs from its `tool/call` (else from the assistant message that asked for it)
  to its result.
- **counts** that `stats` also reports are counted by its rules, so the page and `stats` agree:
  `requests` are its `modelCalls` (`stats.is_model_call`), `toolCalls` its `toolCalls`
  (`stats.tool_call_count`: a fallback `user/message` carrying an assistant message's calls
  included, though they get no record) and `toolErrors` its `toolErrors` (`stats.is_tool_error`:
  every appended tool result with `isError`, a fallback carrying one included, not a count of
  the outcomes above). `turns` and `steps` count the `turn/start` and `step/start` records, as
  many as `stats` counts in any stored log (the append checks require their `turn` and `step`).
  `repairs` (the `repaired` outcomes) and `cacheDrops` are the timeline's own; `stats` has none.
- Every duration (`durationMs` of turns, steps and tool calls, a drop's `gapMs`) runs between
  the two events' moments (`clock.moment`: the time an import recorded, else the commit time)
  and is None, unknown, when they are on different clocks (`clock.elapsed_ms`), or when the
  end is a closer repair wrote (`repair.is_repair_closer`: it lies at the repair's time). The records'
  `time`, `startTime` and `endTime` stay commit times; the OTLP export lays its spans by
  `clock.SessionClock` instead, from the seqs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionlog.core.clock import Moment, elapsed_ms, moment
from sessionlog.core.events import Event, JsonObject, Replace
from sessionlog.core.headers import HeaderState, changed_fields, header_state
from sessionlog.core.messages import is_copy, message_of, project_message, source_kind, tool_call_blocks
from sessionlog.core.projections.stats import (
    StatsAccumulator,
    is_model_call,
    is_tool_error,
    name_text,
    tool_call_count,
    usage_of,
)
from sessionlog.core.repair import TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN, is_repair_closer
from sessionlog.core.request_diff import SurfaceDelta, describe, header_change
from sessionlog.core.structure import StructureState, apply_structure_plan, trusted_structure_plan
from sessionlog.core.surface import (
    SurfaceNode,
    SurfacePlan,
    SurfaceState,
    apply_surface_plan,
    plan_surface_event,
    surface_node,
)
from sessionlog.core.usage import is_unpriced, number, round_cost, usage_cost
from sessionlog.core.vocabulary import (
    ASSISTANT_ATTEMPT,
    COMPACTION_SUMMARY,
    REQUEST_HEADER,
    SESSION_END_SEED,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
)

REPAIR_CODES: frozenset[str] = frozenset({TOOL_OUTCOME_UNKNOWN, TOOL_NOT_STARTED})
REPAIR_TURN_ENDS: frozenset[str] = frozenset({"interrupted", "forked"})


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(slots=True)
class _Previous:
    """The latest request that carried usage: what a cache drop is measured against."""

    seq: int
    moment: Moment
    cache_read: int | float
    header: HeaderState | None


@dataclass(slots=True)
class TimelineFold:
    """The one-pass fold behind `timeline`; `add` each event in seq order, then `result`.

    Its own figures need no past event: it counts what `result` reports as it goes and keeps
    only the replace events a pending cache-drop diff may name. With `keep_events=False` it
    keeps no event at all, and a caller that streams the records out (the session page) may
    take them from `requests`, `markers`, `turns`, `steps` and `tool_calls` and clear those
    lists (a record still in `open_turns`, `open_steps` or `open_calls` may change later), so
    a fold of any length holds its surface's seqs, its open records and nothing else.
    """

    keep_events: bool = True
    events: list[Event] = field(default_factory=list)
    """Every event folded (seq order), when `keep_events`; what the OTLP export reads."""
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("events", "turns", "steps", "requests", "toolCalls", "toolErrors", "repairs", "cacheDrops"), 0
        )
    )
    message_nodes: set[int] = field(default_factory=set)
    """The surface nodes that project to a model message (the stats' `messages`)."""
    replacers: dict[int, Event] = field(default_factory=dict)
    """The replace events since the latest request with usage: what a cache drop's diff names."""
    surface: SurfaceState = field(default_factory=SurfaceState)
    totals: StatsAccumulator = field(default_factory=StatsAccumulator)
    header: HeaderState | None = None
    since_request: SurfaceDelta = field(default_factory=SurfaceDelta)
    since_usage: SurfaceDelta = field(default_factory=SurfaceDelta)
    previous: _Previous | None = None
    requests: list[JsonObject] = field(default_factory=list)
    turns: list[JsonObject] = field(default_factory=list)
    steps: list[JsonObject] = field(default_factory=list)
    tool_calls: list[JsonObject] = field(default_factory=list)
    markers: list[JsonObject] = field(default_factory=list)
    open_turns: dict[int, JsonObject] = field(default_factory=dict)
    open_steps: dict[tuple[int, int], JsonObject] = field(default_factory=dict)
    open_calls: dict[str, JsonObject] = field(default_factory=dict)
    structure: StructureState = field(default_factory=StructureState)
    """Which calls of the open step the model still sees (the append path's rule)."""
    turn_starts: dict[int, Moment] = field(default_factory=dict)
    step_starts: dict[tuple[int, int], Moment] = field(default_factory=dict)
    call_starts: dict[str, Moment] = field(default_factory=dict)
    """When each open turn, step and tool call started (by turn, `(turn, step)`, call id): what its
    `durationMs` is measured from (`clock.moment`, not its commit-time `startTime`)."""

    def event_at(self, seq: int) -> Event:
        return self.events[seq]

    def node_at(self, seq: int) -> SurfaceNode:
        return surface_node(self.events[seq])

    def add(self, event: Event) -> SurfacePlan | None:
        """Fold one event (seqs 0, 1, 2, … in order); its surface plan (None: log-only)."""
        if self.keep_events:
            self.events.append(event)
        self.counts["events"] += 1
        kind = event.type
        # A request is the prefix before its response: measure it before the response lands.
        request = self._request(event) if is_model_call(event) else self._paid_call(event)
        plan = plan_surface_event(self.surface, event, self.node_at, validate=False)
        apply_surface_plan(self.surface, plan)
        if plan is not None:
            self._surface_moved(event, plan)
        self.since_request.record(event, plan)
        self.since_usage.record(event, plan)
        self.totals.add(event)
        self.counts["toolCalls"] += tool_call_count(event)
        self.counts["toolErrors"] += is_tool_error(event)
        if request is not None:
            request["cumulativeCost"] = self.totals.cost_usd()
            request["cumulativeUnpriced"] = self.totals.unpriced_events  # the cost is a lower bound while not 0
        if kind == REQUEST_HEADER:
            self._header(event)
        elif isinstance(event.surface_op, Replace):
            self._marker(event, "replace")
        elif kind == COMPACTION_SUMMARY:
            self._marker(event, "compaction")
        elif kind == SESSION_END_SEED:
            inherited = event.data.get("inherited") is True
            self._marker(event, "fork" if inherited else "resume")
        self._structure(event)
        self._calls_on_surface(event, plan)
        return plan

    def _calls_on_surface(self, event: Event, plan: SurfacePlan | None) -> None:
        """A replace or copy that takes a call's block off the surface, or restates it, makes the
        call `dropped` or `pending` again (the structure fold decides, as at append)."""
        shadowed = plan.shadowed if plan is not None else ()
        moved = trusted_structure_plan(self.structure, event, shadowed)
        apply_structure_plan(self.structure, moved)
        if moved is None or moved.kind != "restate_calls":
            return
        for call in moved.calls:
            record = self.open_calls.get(call.call_id)
            if record is not None and record["resultSeq"] is None:
                record["outcome"] = "pending" if call.on_surface else "dropped"

    def _surface_moved(self, event: Event, plan: SurfacePlan) -> None:
        if plan.kind == "replace":
            self.message_nodes.difference_update(plan.shadowed)
            self.replacers[event.seq] = event
        if project_message(event) is not None:
            self.message_nodes.add(event.seq)

    # --- headers and markers ----------------------------------------------------------

    def _header(self, event: Event) -> None:
        state = header_state(event, generation=self.surface.replace_generation)
        fields = changed_fields(self.header.header, state.header) if self.header is not None else []
        self.header = state
        marker = self._marker(event, "header")
        marker["reason"] = state.reason
        marker["fields"] = fields

    def _marker(self, event: Event, kind: str) -> JsonObject:
        marker: JsonObject = {"seq": event.seq, "time": event.time, "kind": kind, "type": event.type}
        op = event.surface_op
        if isinstance(op, Replace):
            marker.update(startSeq=op.start_seq, endSeq=op.end_seq, sourceKind=source_kind(event))
        self.markers.append(marker)
        return marker

    # --- requests ---------------------------------------------------------------------

    def _row(self, event: Event, kind: str) -> JsonObject:
        """A row of the request list for `event`, from the state of the prefix before it; its
        delta runs from the row before it, so the deltas compose over any two rows (the diff)."""
        row: JsonObject = {
            "seq": event.seq,
            "atSeq": event.seq - 1,
            "time": event.time,
            "kind": kind,
            "turn": _int(event.data.get("turn")),
            "step": _int(event.data.get("step")),
            "model": self.totals.model,
            "provider": self.totals.provider,
            "headerSeq": self.header.seq if self.header is not None else None,
            "nodes": len(self.surface.nodes),
            "delta": self.since_request.to_json(),
            "cumulativeCost": 0,
            "cumulativeUnpriced": 0,
            "usage": None,
            "drop": None,
        }
        self.since_request = SurfaceDelta()
        self.requests.append(row)
        return row

    def _request(self, event: Event) -> JsonObject:
        """The record of the request answered by `event`."""
        usage = usage_of(event)
        request = self._row(event, "attempt" if event.type == ASSISTANT_ATTEMPT else "message")
        self.counts["requests"] += 1
        if event.type == ASSISTANT_ATTEMPT and isinstance(event.data.get("error"), (dict, str)):
            request["error"] = event.data.get("error")
        if usage is None:
            return request
        request["usage"] = usage_view(usage)
        cache_read = request["usage"]["cacheRead"]
        if self.previous is not None and cache_read < self.previous.cache_read:
            request["drop"] = self._drop(event, cache_read)
            self.counts["cacheDrops"] += 1
        self.previous = _Previous(event.seq, moment(event), cache_read, self.header)
        self.since_usage = SurfaceDelta()
        self.replacers = {}
        return request

    def _paid_call(self, event: Event) -> JsonObject | None:
        """The row of an event that carries usage and is no request (see the module docstring):
        no cache drop is measured against it, nor is it counted as a request."""
        usage = usage_of(event)
        if usage is None:
            return None
        row = self._row(event, "summary" if event.type == COMPACTION_SUMMARY else "other")
        row["usage"] = usage_view(usage)
        # A summariser may be another model than the conversation's (events.md: the summary
        # carries its `provider` and `model`); the row, and the export's chat span, name the
        # one that was called and paid for.
        row["model"] = name_text(event.data.get("model")) or row["model"]
        row["provider"] = name_text(event.data.get("provider")) or row["provider"]
        return row

    def _drop(self, event: Event, cache_read: int | float) -> JsonObject:
        previous = self.previous
        assert previous is not None
        fields = header_change(previous.header, self.header)
        diff = describe(self.since_usage, fields, previous.header, self.header, self.replacers.__getitem__)
        hits = (("header", bool(fields)), ("replace", bool(diff["messages"]["replaced"])))
        causes = [name for name, hit in hits if hit]
        return {
            "previousSeq": previous.seq,
            "cacheReadBefore": previous.cache_read,
            "cacheReadAfter": cache_read,
            "gapMs": elapsed_ms(previous.moment, moment(event)),
            "causes": causes or ["none"],
            "diff": diff,
        }

    # --- turns, steps, tool calls -----------------------------------------------------

    def _structure(self, event: Event) -> None:
        data, kind = event.data, event.type
        turn, step = _int(data.get("turn")), _int(data.get("step"))
        if kind == TURN_START and turn is not None:
            record: JsonObject = {"turn": turn, "startSeq": event.seq, "startTime": event.time}
            record.update(endSeq=None, endTime=None, durationMs=None, endKind=None, steps=0, requests=0)
            self.turns.append(record)
            self.counts["turns"] += 1
            self.open_turns[turn] = record
            self.turn_starts[turn] = moment(event)
        elif kind == TURN_END and turn is not None and turn in self.open_turns:
            record = self.open_turns.pop(turn)
            reason = data.get("reason")
            end_kind = reason.get("kind") if isinstance(reason, dict) else None
            record.update(endSeq=event.seq, endTime=event.time, endKind=end_kind)
            record["durationMs"] = _elapsed(self.turn_starts.pop(turn, None), event)
            if end_kind in REPAIR_TURN_ENDS:
                self._marker(event, "repair")["endKind"] = end_kind
        elif kind == STEP_START and turn is not None and step is not None:
            record = {"turn": turn, "step": step, "startSeq": event.seq, "startTime": event.time}
            record.update(endSeq=None, durationMs=None, requests=[], toolCalls=0)
            self.steps.append(record)
            self.counts["steps"] += 1
            self.open_steps[(turn, step)] = record
            self.step_starts[(turn, step)] = moment(event)
            if turn in self.open_turns:
                self.open_turns[turn]["steps"] += 1
        elif kind == STEP_END and turn is not None and step is not None and (turn, step) in self.open_steps:
            record = self.open_steps.pop((turn, step))
            record.update(endSeq=event.seq, durationMs=_elapsed(self.step_starts.pop((turn, step), None), event))
            self._close_calls(turn, step)
        elif is_model_call(event):
            self._response(event, turn, step)
        elif kind == TOOL_CALL:
            call = self.open_calls.get(str(data.get("callId")))
            if call is not None and call["callSeq"] is None:
                call.update(callSeq=event.seq, startTime=event.time)
                self.call_starts[call["callId"]] = moment(event)
        elif kind == TOOL_RESULT and _appended(event):
            self._result(event)

    def _response(self, event: Event, turn: int | None, step: int | None) -> None:
        owner = self.open_steps.get((turn, step)) if turn is not None and step is not None else None
        if owner is not None:
            owner["requests"].append(event.seq)
        if turn is not None and turn in self.open_turns:
            self.open_turns[turn]["requests"] += 1
        for block in tool_call_blocks(event):
            call_id = block.get("id")
            call: JsonObject = {
                "callId": call_id if isinstance(call_id, str) else None,
                "name": block.get("name") if isinstance(block.get("name"), str) else None,
                "turn": turn,
                "step": step,
                "blockSeq": event.seq,
                "callSeq": None,
                "resultSeq": None,
                "startTime": event.time,
                "durationMs": None,
                "outcome": "pending",
                "errorCode": None,
            }
            self.tool_calls.append(call)
            if owner is not None:
                owner["toolCalls"] += 1
            if isinstance(call_id, str):
                self.open_calls[call_id] = call
                self.call_starts[call_id] = moment(event)

    def _close_calls(self, turn: int, step: int) -> None:
        """The step ended: its calls without a result get none now (`unanswered`, or `dropped`
        if the model no longer saw them)."""
        ended = [key for key, call in self.open_calls.items() if (call["turn"], call["step"]) == (turn, step)]
        for key in ended:
            call = self.open_calls.pop(key)
            self.call_starts.pop(key, None)
            if call["outcome"] == "pending":
                call["outcome"] = "unanswered"

    def _result(self, event: Event) -> None:
        message = message_of(event) or {}
        call = self.open_calls.pop(str(message.get("toolCallId")), None)
        if call is None:
            return
        error = event.data.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        outcome = "repaired" if code in REPAIR_CODES else "error" if message.get("isError") is True else "ok"
        call.update(resultSeq=event.seq, outcome=outcome, errorCode=code if isinstance(code, str) else None)
        call["durationMs"] = _elapsed(self.call_starts.pop(call["callId"], None), event)
        self.counts["repairs"] += outcome == "repaired"

    # --- result -----------------------------------------------------------------------

    def stats(self) -> JsonObject:
        """The stats of the events folded so far (`stats()` of that prefix)."""
        return self.totals.as_dict(events=self.counts["events"], messages=len(self.message_nodes))

    def result(self) -> JsonObject:
        """The timeline of the events folded so far (the record lists as they stand)."""
        counts = self.counts
        return {
            "stats": self.stats(),
            "counts": {key: value for key, value in counts.items() if key != "events"},
            "requests": self.requests,
            "turns": self.turns,
            "steps": self.steps,
            "toolCalls": self.tool_calls,
            "markers": self.markers,
            "surfaceGeneration": self.surface.replace_generation,
        }


def _elapsed(start: Moment | None, end: Event) -> int | None:
    """The duration of a record that started at `start` and that `end` closes (None: unknown,
    as when repair closed it: `is_repair_closer`)."""
    if start is None or is_repair_closer(end):
        return None
    return elapsed_ms(start, moment(end))


def _appended(event: Event) -> bool:
    return event.surface_op == "append" and not is_copy(event)


def usage_view(usage: JsonObject) -> JsonObject:
    """The per-request token figures the chart and the export need. `cost` is None for usage
    with tokens and no price (`usage.is_unpriced`, an event `unpricedEvents` counts): its cost
    is not known, which 0, a free model's, would not say."""
    input_tokens = number(usage.get("input"))
    cache_read = number(usage.get("cacheRead"))
    cache_write = number(usage.get("cacheWrite"))
    context = input_tokens + cache_read + cache_write
    return {
        "input": input_tokens,
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
        "output": number(usage.get("output")),
        "context": context,
        "cacheShare": (cache_read / context) if context else 0.0,
        # Rounded as the stats' costs are: a cost summed from its parts carried float noise
        # (0.008924999999999999) to the page and the export.
        "cost": None if is_unpriced(usage) else round_cost(usage_cost(usage)),
    }


def timeline(events: Sequence[Event]) -> JsonObject:
    """The timeline of a log prefix (seqs 0..n-1, blobs resolved); see the module docstring.

    Returns `{"stats", "counts", "requests", "turns", "steps", "toolCalls", "markers",
    "surfaceGeneration"}`; `stats` equals `projections.stats.stats(events)`.
    """
    fold = TimelineFold()
    for event in events:
        fold.add(event)
    return fold.result()
