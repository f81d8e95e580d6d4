"""The sessions an import of one file writes, and what the server already holds of them.

Each session is named by the file (`core.formats.session_ids`), so importing the same file again
meets the sessions the first import made. `Resolver.resolve` reads what the server holds of each
(its next seq, then its events from where the import's own begin, after what the service writes
into a fork; `core.formats.imported` compares them): a session that holds exactly the planned
events is already imported; one that holds their beginning gets the rest appended; any other is
a conflict (IMPORTED_SESSION_DIFFERS), and the import, which resolves every FILE before it
writes anything, imports none of them.

The export of a fork is planned as that fork (`sessionlog_targets`), and kept one where its parent
holds the file's events up to the cut, on the server or as a FILE before it plans it
(`Resolver.place`, the FILEs ordered `parents_first`); else it is imported whole, with a note.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from sessionlog.core.errors import AlreadyExists, NotFound, SessionLogError, ValidationError
from sessionlog.core.events import Event, JsonObject, NewEvent
from sessionlog.core.formats.imported import Comparison, compare_log, log_digest, prefix_digests
from sessionlog.core.formats.pi.importer import PiImport
from sessionlog.core.formats.session_ids import fork_session_id, session_id_for
from sessionlog.core.formats.sessionlog_file import SessionlogExport, exported_parent
from sessionlog.core.repair import fork_seed

if TYPE_CHECKING:
    from sessionlog.client import SessionLogClient


class Status(StrEnum):
    """What an import did to a session (`status` in its output)."""

    imported = "imported"
    appended = "appended"
    already_imported = "already-imported"


@dataclass(frozen=True, slots=True)
class Target:
    """One session a file maps to: the events planned for it from `first_seq` (0; a fork's, from
    after its fork point: what the service writes into a fork, then its own from `own_seq`)."""

    session_id: str
    label: str
    """How messages name it: `session 'ID'`, `fork 'ID' (leaf L)`."""
    leaf: str | None
    first_seq: int
    own_seq: int
    events: Sequence[NewEvent]
    line_of: Callable[[int], int | None]
    """The file's line of the event planned at a seq (None when it stands for no line)."""
    parent: tuple[str, int] | None = None
    """For a fork: the session it forks and the seq it is cut after."""
    prefix: Sequence[NewEvent] = ()
    """For the fork an export restores: the events 0..its fork seq the file holds, which its
    parent must hold for the import to fork it (`Resolver.place`). A Pi fork has none: its
    parent is planned from the same file."""

    @property
    def next_seq(self) -> int:
        """Where the session ends once imported."""
        return self.first_seq + len(self.events)

    def digest(self) -> str:
        return log_digest(self.events, parent=self.parent)

    def log(self) -> Sequence[NewEvent] | None:
        """The session's whole log once imported, when the file holds it (not a Pi fork's)."""
        return [*self.prefix, *self.events] if len(self.prefix) == self.first_seq else None

    def whole(self) -> Target:
        """The session as one of its own, holding its whole log: what an export of a fork is
        imported as when its parent cannot be forked (`Resolver.place`)."""
        log = self.log()
        assert log is not None
        return replace(self, first_seq=0, own_seq=0, events=log, parent=None, prefix=())


@dataclass(frozen=True, slots=True)
class FileTargets:
    """The sessions of one file, the main one first (its `cwd` and `metadata` go into its
    creation), and what to tell the user about how they are named."""

    path: Path
    targets: list[Target]
    cwd: str | None
    metadata: JsonObject | None
    notes: list[str] = field(default_factory=list)


def pi_targets(path: Path, plan: PiImport, session_id: str | None) -> FileTargets:
    """The main session (`session_id`, else Pi's session id) and a fork `<main>.<leafId>` per other
    leaf, of the session its branch forks (the main one or another fork, created before it)."""
    header = plan.header
    pi_id = str(header.get("id"))
    main_id = session_id or session_id_for(pi_id)
    notes = [] if main_id in (session_id, pi_id) else [_derived_note(pi_id, main_id)]
    main = plan.main
    targets = [Target(main_id, f"session {main_id!r}", main.leaf_id, 0, 0, main.events, main.line_of)]
    for branch in plan.branches[1:]:
        assert branch.fork_seq is not None
        fork_id = fork_session_id(main_id, str(branch.leaf_id))
        label = f"fork {fork_id!r} (leaf {branch.leaf_id})"
        events = [*branch.inherited, *branch.events]
        first = branch.fork_seq + 1
        forked = main_id if branch.parent_leaf == main.leaf_id else fork_session_id(main_id, str(branch.parent_leaf))
        parent = (forked, branch.fork_seq)
        targets.append(Target(fork_id, label, branch.leaf_id, first, branch.first_seq, events, branch.line_of, parent))
    cwd = header.get("cwd") if isinstance(header.get("cwd"), str) else None
    metadata = {"pi": {"sessionId": header.get("id"), "file": str(path)}}
    return FileTargets(path, targets, cwd or None, metadata, notes)


def sessionlog_targets(path: Path, export: SessionlogExport, session_id: str | None) -> FileTargets:
    """One session named `session_id`, else by the export's `session.id` (a restore gets its ids
    back). An export of a fork (its header names a `parent`) is planned as that fork again, from
    after what the service writes into it at the cut; the import forks it when the parent holds
    the file's events up to the cut, else imports it whole (`Resolver.place`)."""
    session = export.session
    exported = session.get("id")
    heading = sessionlog_heading(session, session_id)
    if heading.session_id is None:
        raise ValidationError(
            "BAD_SESSIONLOG_HEADER",
            "line 1: the header's session has no id to name the imported session by: give one with --id",
            line=1,
        )
    main_id = heading.session_id
    notes = [] if main_id in (session_id, exported) else [_derived_note(str(exported), main_id)]
    lines = export.event_lines
    events = [event.as_new() for event in export.events]
    target = Target(main_id, f"session {main_id!r}", None, 0, 0, events, lambda seq: lines[seq])
    if heading.parent is not None:
        target, note = _restored_fork(target, export.events, heading.parent)
        notes += [note] if note is not None else []
    cwd = session.get("cwd") if isinstance(session.get("cwd"), str) else None
    metadata = session.get("metadata") if isinstance(session.get("metadata"), dict) else None
    return FileTargets(path, [target], cwd or None, metadata or None, notes)


@dataclass(frozen=True, slots=True)
class Heading:
    """What an import reads of a FILE before it plans any: the session an export names (None for
    a Pi file, or an export that names none) and the parent its header names, as session ids."""

    session_id: str | None = None
    parent: tuple[str, int] | None = None


def sessionlog_heading(session: JsonObject, session_id: str | None) -> Heading:
    """THE ids an export's header gives its import: its session's (`session_id`, else the
    header's `session.id`) and, for a fork, its parent's (`session_id_for` both, as the parent's
    own export names it)."""
    exported = session.get("id")
    named = session_id or (session_id_for(exported) if isinstance(exported, str) and exported else None)
    parent = exported_parent(session)
    return Heading(named, (session_id_for(parent[0]), parent[1]) if parent is not None else None)


def parents_first(headings: Sequence[Heading]) -> list[int]:
    """The indexes of an import's FILEs in the order to import them: each export of a fork after
    the FILE of its parent (the first that names it, itself after its own parent's), the others
    as given; so a fork finds its parent already imported, whatever order the FILEs came in."""
    owner: dict[str, int] = {}
    for position, heading in enumerate(headings):
        if heading.session_id is not None:
            owner.setdefault(heading.session_id, position)
    order: list[int] = []
    placed: set[int] = set()
    for start in range(len(headings)):
        chain: list[int] = []  # `start`, then its parent's FILE, its parent's, ... not yet placed
        index: int | None = start
        while index is not None and index not in placed and index not in chain:
            chain.append(index)
            parent = headings[index].parent
            index = owner.get(parent[0]) if parent is not None else None
        placed.update(chain)
        order += reversed(chain)
    return order


def fork_points(headings: Iterable[Heading]) -> dict[str, set[int]]:
    """Parent session id → the seqs the FILEs' exports of its forks were cut after (`Resolver`)."""
    points: dict[str, set[int]] = {}
    for heading in headings:
        if heading.parent is not None:
            points.setdefault(heading.parent[0], set()).add(heading.parent[1])
    return points


def _restored_fork(whole: Target, log: Sequence[Event], parent: tuple[str, int]) -> tuple[Target, str | None]:
    """`whole`, the export of a fork of `parent` (its session id, the seq it was cut after), as
    that fork: the events after the cut, its own from after what the service writes into a fork
    cut there (`repair.fork_seed`, as a Pi fork is planned), the events up to the cut its
    `prefix`. A file whose events after the cut are not what a fork starts with is no such
    fork's log: it is imported whole, and the note says so."""
    fork_seq = parent[1]
    seeded = [event.type for event in fork_seed(log[: fork_seq + 1])] if fork_seq < len(log) else None
    if seeded is None or [event.type for event in log[fork_seq + 1 : fork_seq + 1 + len(seeded)]] != seeded:
        why = f"its events after seq {fork_seq} are not what a fork cut there starts with"
        return whole, whole_note(whole, parent, why)
    first, events = fork_seq + 1, whole.events
    fork = replace(whole, first_seq=first, own_seq=first + len(seeded), parent=parent, prefix=events[:first])
    return replace(fork, events=events[first:]), None


def whole_note(target: Target, parent: tuple[str, int], why: str) -> str:
    """THE words of an export of a fork imported whole: which parent it names, why it was not
    forked, and what that costs (`sessionlog costs` counts its inherited events as its own)."""
    source, fork_seq = parent
    inherited = min(fork_seq + 1, len(target.log() or target.events))  # a cut past the file's end inherits it all
    counted = f"the {inherited} events" if inherited != 1 else "the event"
    return (
        f"{target.label} was exported as the fork of {source!r} after seq {fork_seq}, but {why}: it is "
        f"imported whole, as a session of its own, so `sessionlog costs` counts {counted} it inherited "
        "again, as its own"
    )


def _derived_note(name: str, derived: str) -> str:
    return (
        f"the file's session id {name!r} is not a valid session id; its session is named {derived!r}, "
        "derived from it, so importing the file again finds it"
    )


@dataclass(frozen=True, slots=True)
class Resolved:
    """What the server holds of a target: nothing (`held` None), or a session at `held` whose
    events begin the planned ones (`held` == `next_seq`: all of them). It keeps none of the
    target's events, so an import holds this for every FILE, and a plan for one at a time."""

    session_id: str
    label: str
    leaf: str | None
    held: int | None
    next_seq: int
    digest: str
    parent: tuple[str, int] | None

    @classmethod
    def of(cls, target: Target, held: int | None, digest: str) -> Resolved:
        return cls(target.session_id, target.label, target.leaf, held, target.next_seq, digest, target.parent)

    @property
    def status(self) -> Status:
        if self.held is None:
            return Status.imported
        return Status.already_imported if self.held == self.next_seq else Status.appended


class Resolver:
    """Resolves the targets of the files of one import against the server, remembering the ids
    the files before claimed: a later file that maps the same events to an id is already imported
    by the earlier one; one that maps other events to it is a conflict. Of a claimed session that
    a later FILE's export names as its parent (`fork_points`: session id → the seqs they were cut
    after), it remembers the digest of its planned log up to each cut."""

    def __init__(self, client: SessionLogClient, fork_points: Mapping[str, Collection[int]] | None = None) -> None:
        self.client = client
        self._claimed: dict[str, tuple[int, Path, str]] = {}
        """Session id → the FILE (its index among them, its path) that claimed it, and its digest."""
        self._fork_points = fork_points or {}
        self._prefixes: dict[str, dict[int, str]] = {}
        """Claimed session id → fork seq → the digest of its planned events 0..seq."""

    def resolve(self, file: FileTargets, index: int) -> list[Resolved]:
        """Every target of `file`, the `index`-th FILE, resolved; raises IMPORTED_SESSION_DIFFERS
        for the first that conflicts. Resolving a FILE again (it changed since) sets its claims anew."""
        resolved = [self._resolve(index, target) for target in file.targets]
        for target, entry in zip(file.targets, resolved, strict=True):
            claimed = self._claimed.get(entry.session_id)
            if claimed is None or claimed[0] == index:
                self._claimed[entry.session_id] = (index, file.path, entry.digest)
                seqs, log = self._fork_points.get(entry.session_id), target.log()
                if seqs and log is not None:
                    self._prefixes[entry.session_id] = prefix_digests(log, seqs)
        return resolved

    def place(self, file: FileTargets, index: int) -> FileTargets:
        """`file`, the `index`-th FILE, with the fork its export restores kept a fork only where
        the import can fork it: its parent holds the file's events up to the cut (once the FILEs
        before it are imported), and no session of its id is there other than as that fork.
        Otherwise it is imported whole, and a note says why (`whole_note`). Called before
        `resolve`, and again on the FILE read again to write it: the FILEs before it are
        claimed, so it decides alike both times."""
        targets: list[Target] = []
        notes = list(file.notes)
        for target in file.targets:
            why = self._not_forkable(target, index) if target.prefix else None
            if why is not None and target.parent is not None:
                targets.append(target.whole())
                notes.append(whole_note(target, target.parent, why))
            else:
                targets.append(target)
        return replace(file, targets=targets, notes=notes)

    def _not_forkable(self, target: Target, index: int) -> str | None:
        """Why the fork `target` restores cannot be forked from its parent, or None."""
        assert target.parent is not None
        source, fork_seq = target.parent
        try:
            info = self.client.get_session(target.session_id)
        except NotFound:
            pass
        else:
            if (info.parent_session_id, info.fork_seq) != target.parent:
                return "the server holds a session of its id that is not that fork"
        claimed = self._claimed.get(source)
        if claimed is None or claimed[0] >= index:
            return self._parent_differs(source, target.prefix)
        prefixes = self._prefixes.get(source)
        if prefixes is None:
            return f"{claimed[1]} imports {source!r} as a fork of a Pi leaf, which the import does not compare"
        if prefixes.get(fork_seq) != log_digest(target.prefix):
            return f"{claimed[1]} maps other events to {source!r} up to seq {fork_seq} than the file holds"
        return None

    def _parent_differs(self, source: str, prefix: Sequence[NewEvent]) -> str | None:
        """Why the session `source` on the server does not begin with `prefix`, or None when it
        does (compared as an import compares a session it finds: `compare_log`)."""
        try:
            held = self.client.get_session(source).next_seq
        except NotFound:
            return f"no session {source!r} is on the server, nor in the FILEs given"
        end = min(held, len(prefix))
        stored = self.client.read_events(source, from_seq=0, to_seq=end - 1) if end > 0 else ()
        comparison = compare_log(stored, held, prefix, 0)
        if comparison.differs_at is not None:
            return f"{source!r} on the server holds other events than the file from seq {comparison.differs_at} on"
        if held < len(prefix):
            return f"{source!r} on the server holds {held} events, fewer than the {len(prefix)} the file inherits"
        return None

    def _resolve(self, index: int, target: Target) -> Resolved:
        """`target` against what the server holds. A fork is compared from its own events on
        (`own_seq`), once its place (parent and seq) is the planned one: what the service wrote
        into it at the cut is the service's, stamped with the time it forked (a pending call's
        error result), which the plan cannot know."""
        digest = target.digest()
        claimed = self._claimed.get(target.session_id)
        if claimed is not None and claimed[0] != index:
            _, earlier, earlier_digest = claimed
            if earlier_digest != digest:
                raise differs(target, f"is also what {earlier} maps other events to")
            return Resolved.of(target, target.next_seq, digest)
        try:
            info = self.client.get_session(target.session_id)
        except NotFound:
            return Resolved.of(target, None, digest)
        if target.parent is not None and (info.parent_session_id, info.fork_seq) != target.parent:
            parent, seq = target.parent
            raise differs(target, f"is not the fork of {parent!r} after seq {seq} the file maps it to")
        held = info.next_seq
        start, planned = target.own_seq, target.events[target.own_seq - target.first_seq :]
        end = min(held, target.next_seq)
        stored = self.client.read_events(target.session_id, from_seq=start, to_seq=end - 1)
        comparison = compare_log(stored if end > start else (), held, planned, start)
        if comparison.same or comparison.behind:
            return Resolved.of(target, held, digest)
        raise _difference(target, comparison)


def _difference(target: Target, comparison: Comparison) -> SessionLogError:
    """The conflict a comparison found, in words."""
    if comparison.differs_at is None:  # the stored session is longer, and the file's events begin it
        return differs(
            target,
            f"holds {comparison.held} events, the file maps {comparison.planned} to it and they are its first: "
            "the session went on past the file (an older copy of the file?)",
        )
    seq = comparison.differs_at
    line = target.line_of(seq)
    where = f"seq {seq} (line {line})" if line is not None else f"seq {seq}"
    return differs(
        target,
        f"holds other events than the file maps to it: it differs from {where} on. The file changed other "
        "than by growing at the end (a Pi run the earlier import closed went on, another leaf became Pi's "
        "last entry), or the id names another session",
        seq=seq,
    )


def differs(target: Target, why: str, *, seq: int | None = None) -> SessionLogError:
    """IMPORTED_SESSION_DIFFERS for `target` (`seq`: the first that differs); the caller adds the file."""
    return AlreadyExists(
        "IMPORTED_SESSION_DIFFERS",
        f"{target.label} {why}; import the file under another --id, or leave it out",
        session_id=target.session_id,
        seq=seq,
        line=target.line_of(seq) if seq is not None else None,
    )
