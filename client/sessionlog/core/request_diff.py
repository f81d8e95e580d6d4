"""What changed between two model requests of one session (issue 14): the prompt-cache view.

A request is `{...header.config, messages, tools}` (SPEC §5), so between two log prefixes A < B
it can change in two ways only: a different header (config fields, the tool list; a header's
`adapterDefaults` is not sent) or a different surface (messages appended, surface ranges
replaced). Appends keep A's
request a prefix of B's, which a prompt cache can reuse; a header change or a replace inside
A's surface breaks that prefix.

`SurfaceDelta` is THE rule for the surface part: it records, event by event, which surface
nodes entered, which of the starting surface's nodes left (and which replace took each off),
and the first surface position a replace touched. `merge` composes two consecutive deltas, so
the timeline keeps one small delta per request and any two requests can be compared by
composing the deltas between them (the session page does exactly that in the browser, and the
browser test checks it against `request_diff`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionlog.core.errors import ValidationError, seq_not_found
from sessionlog.core.events import Event, JsonObject
from sessionlog.core.headers import HeaderState, header_state, request_changed_fields
from sessionlog.core.messages import source_kind
from sessionlog.core.surface import SurfacePlan, SurfaceState, apply_surface_plan, event_nodes, plan_surface_event
from sessionlog.core.vocabulary import REQUEST_HEADER


@dataclass(slots=True)
class SurfaceDelta:
    """How the surface moved over a run of events.

    `added`: seqs that entered the surface (appended or replacing), in seq order, minus those
    that left again within the run. `replaced`: node seq -> the replace seq that took it off,
    for nodes that were on the surface when the run began. `first_changed`: the lowest surface
    position a replace touched (None when there was no replace), i.e. how many leading nodes
    of the starting surface are still the request's prefix. `headers`: `request/header` seqs
    logged in the run.
    """

    added: list[int] = field(default_factory=list)
    replaced: dict[int, int] = field(default_factory=dict)
    first_changed: int | None = None
    headers: list[int] = field(default_factory=list)

    def record(self, event: Event, plan: SurfacePlan | None) -> None:
        """Fold one event (and its surface plan, already applied by the caller)."""
        if event.type == REQUEST_HEADER:
            self.headers.append(event.seq)
        if plan is None:
            return
        if plan.kind == "replace":
            self._leave(plan.shadowed, plan.seq)
            if self.first_changed is None or plan.start_index < self.first_changed:
                self.first_changed = plan.start_index
        self.added.append(plan.seq)

    def _leave(self, seqs: Sequence[int], replacer: int) -> None:
        gone = set(seqs)
        fresh = [seq for seq in self.added if seq in gone]
        if fresh:
            # Nodes that entered within this run and left again were never on the start surface.
            self.added = [seq for seq in self.added if seq not in gone]
            gone.difference_update(fresh)
        for seq in seqs:
            if seq in gone:
                self.replaced.setdefault(seq, replacer)

    def merge(self, later: SurfaceDelta) -> SurfaceDelta:
        """This run followed by `later` (a new delta; neither is changed)."""
        out = SurfaceDelta(list(self.added), dict(self.replaced), self.first_changed, list(self.headers))
        for seq, replacer in later.replaced.items():
            out._leave([seq], replacer)
        out.added.extend(later.added)
        if later.first_changed is not None and (out.first_changed is None or later.first_changed < out.first_changed):
            out.first_changed = later.first_changed
        out.headers.extend(later.headers)
        return out

    def to_json(self) -> JsonObject:
        return {
            "added": list(self.added),
            "replaced": [[seq, by] for seq, by in sorted(self.replaced.items())],
            "firstChanged": self.first_changed,
            "headers": list(self.headers),
        }


def header_change(before: HeaderState | None, after: HeaderState | None) -> list[str]:
    """The header fields that differ between two header states in the request
    (`request_changed_fields`: config keys and `tools`, not `adapterDefaults`, which is not
    sent); `["header"]` when one side has no header at all."""
    if before is None and after is None:
        return []
    if before is None or after is None:
        return ["header"]
    if before.seq == after.seq or before.canonical_bytes() == after.canonical_bytes():
        return []
    return request_changed_fields(before.header, after.header)


def describe(
    delta: SurfaceDelta,
    fields: list[str],
    before_header: HeaderState | None,
    after_header: HeaderState | None,
    event_at: Any,
) -> JsonObject:
    """The JSON diff of two requests from their surface delta and header change.

    `event_at(seq)` returns the event at a seq (for the replacers' types and source kinds).
    `prefixKept` is true when the later request starts with the earlier one byte for byte
    (no header change, no replace), the condition for a prompt-cache hit on the old prefix.
    """
    replacers: dict[int, JsonObject] = {}
    for seq, by in sorted(delta.replaced.items()):
        entry = replacers.get(by)
        if entry is None:
            replacer = event_at(by)
            op = replacer.surface_op
            entry = {
                "seq": by,
                "type": replacer.type,
                "sourceKind": source_kind(replacer),
                "startSeq": getattr(op, "start_seq", None),
                "endSeq": getattr(op, "end_seq", None),
                "replaced": [],
            }
            replacers[by] = entry
        entry["replaced"].append(seq)
    return {
        "header": {
            "fromSeq": before_header.seq if before_header is not None else None,
            "toSeq": after_header.seq if after_header is not None else None,
            "fields": fields,
            "logged": list(delta.headers),
        },
        "messages": {
            "added": list(delta.added),
            "replaced": sorted(delta.replaced),
            "replaces": [replacers[seq] for seq in sorted(replacers)],
            "firstChanged": delta.first_changed,
        },
        "prefixKept": not fields and not delta.replaced,
    }


def request_diff(
    events: Sequence[Event],
    from_seq: int,
    to_seq: int,
    *,
    next_seq: int | None = None,
    session_id: str | None = None,
) -> JsonObject:
    """The diff between the request of prefix `0..from_seq` and that of `0..to_seq` (inclusive,
    as `sessionlog request --at`); `events` is the log from seq 0 to at least `to_seq`, of a
    session (`session_id`, for the error) whose next seq is `next_seq` (default: `len(events)`,
    the whole log). A seq past the head is SEQ_NOT_FOUND, as `request --at` says of it;
    `from_seq` after `to_seq` is SEQ_OUT_OF_RANGE.

    Returns `{"fromSeq", "toSeq", "header": {fromSeq, toSeq, fields, logged}, "messages":
    {added, replaced, replaces: [{seq, type, sourceKind, startSeq, endSeq, replaced}],
    firstChanged}, "prefixKept"}`.
    """
    length = len(events) if next_seq is None else next_seq
    if max(from_seq, to_seq) >= length:
        raise seq_not_found(session_id, max(from_seq, to_seq), length)
    if not 0 <= from_seq <= to_seq:
        raise ValidationError(
            "SEQ_OUT_OF_RANGE",
            f"request diff: need 0 <= from ({from_seq}) <= to ({to_seq})",
            field="seq",
        )
    state = SurfaceState()
    delta = SurfaceDelta()
    latest: HeaderState | None = None
    before: HeaderState | None = None

    def event_at(seq: int) -> Event:
        return events[seq]

    node_at = event_nodes(event_at)
    for event in events[: to_seq + 1]:
        plan = plan_surface_event(state, event, node_at, validate=False)
        apply_surface_plan(state, plan)
        if event.type == REQUEST_HEADER:
            latest = header_state(event, generation=state.replace_generation)
        if event.seq > from_seq:
            delta.record(event, plan)
        elif event.seq == from_seq:
            before = latest
    out = describe(delta, header_change(before, latest), before, latest, event_at)
    return {"fromSeq": from_seq, "toSeq": to_seq, **out}
