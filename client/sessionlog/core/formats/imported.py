"""How a stored session stands to the events an import plans for it (docs/formats.md, "Importing
again"): the pure part of `sessionlog import` finding what an earlier import of the file left.

An import plans each session's events from a first seq on (0; for a fork, the seq after its fork
point, the prefix being its parent's). Against the stored session's events from there, it is:

- *the same*: the stored session holds exactly the planned events (same count, and each equal
  but for its commit time, and its eventId where the file gave it none: the service gave it
  one): the file is already imported;
- *behind*: the stored events are the planned ones' beginning (Pi appended to the file since, or
  an earlier import stopped part way): the import appends the rest;
- anything else *differs*: the import refuses the file rather than stack new events on others.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from sessionlog.core import jsonvalue
from sessionlog.core.events import Event, NewEvent
from sessionlog.core.repair import is_repair_event


@dataclass(frozen=True, slots=True)
class Comparison:
    """A stored session that ends at `held` (its next seq) against a plan that ends at `planned`,
    with `differs_at` the first seq, below both, whose stored event is not the planned one."""

    held: int
    planned: int
    differs_at: int | None

    @property
    def same(self) -> bool:
        return self.differs_at is None and self.held == self.planned

    @property
    def behind(self) -> bool:
        """The stored events begin the plan: appending the planned events from `held` completes it."""
        return self.differs_at is None and self.held < self.planned


def compare_log(stored: Iterable[Event], held: int, planned: Sequence[NewEvent], first_seq: int) -> Comparison:
    """Compare `stored`, the session's events from `first_seq` up to the end of the shorter of the
    two logs (in seq order), with `planned`, the events planned from `first_seq` on. A stored log
    shorter than `first_seq` differs at its end."""
    end = first_seq + len(planned)
    if held < first_seq:
        return Comparison(held, end, held)
    expected = first_seq
    for event in stored:
        if event.seq >= min(held, end):
            break
        if event.seq != expected or not _same(event, planned[expected - first_seq]):
            return Comparison(held, end, expected)
        expected += 1
    if expected < min(held, end):  # the read ended early: what it did not give is not known to match
        return Comparison(held, end, expected)
    return Comparison(held, end, None)


def _same(stored: Event, planned: NewEvent) -> bool:
    """The stored event is the planned one, but for what an import cannot keep the same:

    - an eventId one of the two has not: an event planned without one got one where it was
      written (the import's writer gives every event one), and an event the service wrote itself
      (a header it logged, a fork's seed) has none in its session while a restore of that
      session's export gave it one, which its next export carries;
    - the time a repair's closer stamps into its message (`timestamp`, the time at the cut when it
      was written): a fork made again from the same prefix, as a restore makes it, writes the
      same closer (its deterministic eventId says so) at another time.
    """
    proposal = stored.as_new()
    if planned.event_id is None or proposal.event_id is None:
        proposal = replace(proposal, event_id=planned.event_id)
    if proposal.event_id is not None and is_repair_event(proposal, "forked"):
        return _unstamped(proposal) == _unstamped(planned)
    return proposal == planned


def _unstamped(event: NewEvent) -> NewEvent:
    """`event` without the `timestamp` of its message (a repair closer's, `_same`)."""
    message = event.data.get("message")
    if not isinstance(message, dict) or "timestamp" not in message:
        return event
    kept = {key: value for key, value in message.items() if key != "timestamp"}
    return replace(event, data={**event.data, "message": kept})


def log_digest(events: Iterable[NewEvent], *, parent: tuple[str, int] | None = None) -> str:
    """A digest of planned events (and, for a fork, its parent and fork seq): two files that
    plan the same session alike have the same digest, whatever their paths."""
    digest = _digest_start(parent)
    for event in events:
        _digest_add(digest, event)
    return digest.hexdigest()


def prefix_digests(log: Iterable[NewEvent], seqs: Collection[int]) -> dict[int, str]:
    """The `log_digest` of the log's events 0..seq for each of `seqs` it reaches, in one pass:
    what a fork cut after seq inherits of it, for an import to compare with a fork's file
    without keeping the log."""
    digest = _digest_start(None)
    out: dict[int, str] = {}
    for seq, event in enumerate(log):
        if len(out) == len(seqs):
            break
        _digest_add(digest, event)
        if seq in seqs:
            out[seq] = digest.hexdigest()
    return out


def _digest_start(parent: tuple[str, int] | None) -> hashlib._Hash:
    return hashlib.sha256(jsonvalue.digest_form(list(parent) if parent is not None else None))


def _digest_add(digest: hashlib._Hash, event: NewEvent) -> None:
    digest.update(b"\n")
    digest.update(jsonvalue.digest_form(event.to_json()))


__all__ = ["Comparison", "compare_log", "log_digest", "prefix_digests"]
