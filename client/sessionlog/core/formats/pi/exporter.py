"""sessionlog events → a Pi v3 session file (SPEC §11): the inverse of `importer`.

A session is one branch, so the file is a header and the branch's entries, root first; Pi opens it
at its last entry, the leaf, and builds the same context the session's model history shows.

- **Imported entries** come back exactly: each is rebuilt from the one event that carries its
  `data.pi` (`layout.rebuild_entry`): id, parentId, timestamp and unknown fields included, keys in
  the order Pi writes them. Compaction landings and model-only copies carry no `data.pi` and are
  skipped, as are turn and step brackets and fork seeds: Pi has no entry for them. So are the
  error results a fork wrote for the Pi calls pending at its cut, which the import took off the
  surface with the calls' message (`_without`); other repair closers are messages the model saw
  and are written as a harness's messages are (below).
- **The header** is the `data.pi` of the first `pi/session` event. A session that was not imported
  from Pi gets a fresh v3 header (the session id, its creation time, the cwd if known): Pi
  stamps a header when it creates the session, and an empty session has no event to take a
  time from (it got 1970-01-01). Without the creation time, the first event's time stands in.
- **Events written by other harnesses** (no `data.pi`): every appended surface event with a model
  message becomes a `message` entry (the message as it is, plus the event's `data.usage` as the
  message's `usage` when it has none, where Pi keeps a call's usage), with an id derived from the
  session id and seq, chained to the entry before it, timestamped with the event's commit time. Their
  compactions, prompt replaces and `assistant/attempt` events have no Pi form and are left out (so
  is the usage they carry: the file's cost can be lower than the session's); the model history of
  such a session is then only approximated by the exported file. Their route and thinking level,
  which such a harness states in `request/header` / `request/context` events, become the
  `model_change` / `thinking_level_change` entries Pi reads them from (before the next entry, when
  they change), and an assistant message without `provider`/`model` gets the route then in force,
  as Pi writes every assistant message: the file's model and level are the session's stats' (`_Route`).

Lines are written as Pi's `JSON.stringify` writes them (`jsjson`: compact, non-ASCII and U+2028
raw, numbers laid out the JavaScript way), each ending in LF: an imported entry whose nested
objects kept their key order (pure folds, SQLite) comes back as the very bytes Pi wrote.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from sessionlog.core.events import Event, JsonObject
from sessionlog.core.formats.pi.context import ms_to_iso
from sessionlog.core.formats.pi.entries import (
    CURRENT_VERSION,
    HEADER_TYPE,
    MESSAGE,
    MODEL_CHANGE,
    THINKING_LEVEL_CHANGE,
)
from sessionlog.core.formats.pi.jsjson import stringify
from sessionlog.core.formats.pi.layout import (
    PI_KEY,
    PI_SESSION,
    entry_of,
    order_entry,
    order_header,
    rebuild_entry,
)
from sessionlog.core.messages import is_copy, is_replace, project_message, source_kind
from sessionlog.core.projections.stats import StatsAccumulator
from sessionlog.core.vocabulary import FORKED_CALL


@dataclass(frozen=True, slots=True)
class PiExport:
    """The header and the entries of the branch, root first."""

    header: JsonObject
    entries: list[JsonObject]

    def lines(self) -> Iterator[str]:
        """The file's lines, each ending in LF."""
        yield stringify(self.header) + "\n"
        for entry in self.entries:
            yield stringify(entry) + "\n"

    def text(self) -> str:
        """The whole file as text."""
        return "".join(self.lines())


def _derived_id(session_id: str, seq: int, taken: set[str]) -> str:
    """An 8-hex entry id for the event at `seq`, unique in the file."""
    attempt = 0
    while True:
        digest = hashlib.sha256(f"{session_id}\x00{seq}\x00{attempt}".encode()).hexdigest()
        candidate = digest[:8] if attempt < 100 else digest[:32]
        if candidate not in taken:
            return candidate
        attempt += 1


@dataclass(slots=True)
class _Route:
    """The model and thinking level, as the session's stats say them and as the file says them.

    Pi reads a session's model from its `model_change` entries and assistant messages, and its
    thinking level from `thinking_level_change` entries (`context.build_context`); another harness
    states them in `request/header` and `request/context` events, which have no Pi form. So when
    such an event changes the stats' route or level (`StatsAccumulator`, the one rule), the file
    gets the entry Pi reads it from, before the next entry; and an assistant message without
    `provider`/`model` gets the route then in force, as Pi writes every assistant message (Pi's
    context would otherwise take the model from it as unknown)."""

    stats: StatsAccumulator = field(default_factory=StatsAccumulator)
    said_route: tuple[str | None, str | None] = (None, None)
    said_level: str | None = None
    changed_by: Event | None = None
    """The latest event without a Pi entry that changed the route or level, if not yet said."""

    def add(self, event: Event, *, entry: JsonObject | None) -> None:
        """Fold `event`; `entry` is the Pi entry it is exported as, if any."""
        before = (self.stats.provider, self.stats.model, self.stats.thinking_level)
        self.stats.add(event)
        if entry is not None:
            self._said(entry)
        elif before != (self.stats.provider, self.stats.model, self.stats.thinking_level):
            self.changed_by = event

    def _said(self, entry: JsonObject) -> None:
        kind = entry.get("type")
        message = entry.get("message")
        if kind == MODEL_CHANGE:
            self.said_route = (_text(entry.get("provider")), _text(entry.get("modelId")))
        elif kind == THINKING_LEVEL_CHANGE:
            self.said_level = _text(entry.get("thinkingLevel"))
        elif kind == MESSAGE and isinstance(message, dict) and message.get("role") == "assistant":
            self.said_route = (_text(message.get("provider")), _text(message.get("model")))

    def unsaid(self) -> list[tuple[JsonObject, Event]]:
        """The entries (without id, parent and time) that say what the file does not say yet,
        each with the event that changed it; from now on the file says it."""
        event, self.changed_by = self.changed_by, None
        if event is None:
            return []
        stats, out = self.stats, []
        if (stats.provider, stats.model) != self.said_route and (stats.provider or stats.model):
            change = {"type": MODEL_CHANGE, "provider": stats.provider, "modelId": stats.model}
            out.append(({key: value for key, value in change.items() if value is not None}, event))
        if stats.thinking_level is not None and stats.thinking_level != self.said_level:
            out.append(({"type": THINKING_LEVEL_CHANGE, "thinkingLevel": stats.thinking_level}, event))
        for body, _ in out:
            self._said(body)
        return out

    def fill(self, message: JsonObject) -> JsonObject:
        """An assistant message with the route in force where it lacks `provider` or `model`."""
        if message.get("role") != "assistant":
            return message
        known = {"provider": self.stats.provider, "model": self.stats.model}
        missing = {key: value for key, value in known.items() if value is not None and key not in message}
        return {**message, **missing} if missing else message


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def export_pi(
    events: Iterable[Event],
    *,
    session_id: str | None = None,
    cwd: str | None = None,
    create_time: int | None = None,
) -> PiExport:
    """Rebuild the Pi file of a session from its events (seq order); `create_time` (Unix ms,
    the session's) stamps a fresh header."""
    header: JsonObject | None = None
    entries: list[JsonObject] = []
    taken: set[str] = set()
    pending: list[tuple[int, JsonObject, Event]] = []  # placeholders: (index in entries, entry body, event)
    route = _Route()
    first_time: int | None = None
    taken_off: set[int] = set()  # what a fork cut at a pending Pi call took off (`importer.take_off_forked_call`)

    def say(*synthesized: tuple[JsonObject, Event]) -> None:
        """Add the entries the route needs, then `synthesized` (entry bodies without id, parent
        and time, each with its event): placeholders, named once the file's order is known."""
        for body, cause in [*route.unsaid(), *synthesized]:
            pending.append((len(entries), body, cause))
            entries.append({})

    for event in events:
        if first_time is None:
            first_time = event.time
        if event.type == PI_SESSION:
            pi = event.data.get(PI_KEY)
            if header is None and isinstance(pi, dict):
                header = order_header(pi)
            continue
        if is_copy(event) or is_replace(event):
            if source_kind(event) == FORKED_CALL:
                taken_off.update(event.source_event_seqs)
            route.add(event, entry=None)
            continue
        if entry_of(event.data) is not None:
            entry = rebuild_entry(event.data)
            say()
            entries.append(entry)
            if isinstance(entry.get("id"), str):
                taken.add(entry["id"])
            route.add(event, entry=entry)
            continue
        message = project_message(event)
        if message is None:
            route.add(event, entry=None)
            continue
        usage = event.data.get("usage")
        if isinstance(usage, dict) and "usage" not in message:
            message = {**message, "usage": usage}  # Pi keeps a call's usage in its message
        body = {"type": MESSAGE, "message": route.fill(message)}
        say((body, event))
        route.add(event, entry=body)
    say()  # a header after the last message still sets the model
    entries, pending = _without(entries, pending, taken_off)
    sid = session_id or (str(header["id"]) if header and isinstance(header.get("id"), str) else "sessionlog")
    _name_synthesized(entries, pending, sid, taken)
    if header is None:
        header = {
            "type": HEADER_TYPE,
            "version": CURRENT_VERSION,
            "id": sid,
            "timestamp": ms_to_iso(create_time if create_time is not None else first_time or 0),
            "cwd": cwd or "",
        }
    return PiExport(header, entries)


def _without(
    entries: list[JsonObject], pending: list[tuple[int, JsonObject, Event]], seqs: set[int]
) -> tuple[list[JsonObject], list[tuple[int, JsonObject, Event]]]:
    """The entries without the placeholders of the events at `seqs`: the error results a fork
    wrote for the Pi calls pending at its cut, which the import took off the surface with the
    calls' message (the message is the inherited entry): Pi's branch holds neither them nor
    anything in their place."""
    dropped = {index for index, _, event in pending if event.seq in seqs}
    if not dropped:
        return entries, pending
    new_index: dict[int, int] = {}
    kept: list[JsonObject] = []
    for index, entry in enumerate(entries):
        if index not in dropped:
            new_index[index] = len(kept)
            kept.append(entry)
    return kept, [(new_index[index], body, event) for index, body, event in pending if index not in dropped]


def _name_synthesized(
    entries: list[JsonObject],
    pending: list[tuple[int, JsonObject, Event]],
    session_id: str,
    taken: set[str],
) -> None:
    """Fill the placeholders of synthesized entries, in file order (so each one's parent is the
    entry before it): a derived id, the parent, the time of the event it was made from."""
    if not pending:
        return
    slots = {index: (body, event) for index, body, event in pending}
    previous: str | None = None
    for index, entry in enumerate(entries):
        if index in slots:
            body, event = slots[index]
            new_id = _derived_id(session_id, event.seq, taken)
            taken.add(new_id)
            base = {"type": body["type"], "id": new_id, "parentId": previous, "timestamp": ms_to_iso(event.time)}
            entries[index] = order_entry({**base, **body})
            previous = new_id
        else:
            entry_id = entry.get("id")
            previous = entry_id if isinstance(entry_id, str) else previous


__all__ = ["PiExport", "export_pi"]
