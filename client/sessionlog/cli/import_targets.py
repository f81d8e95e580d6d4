"""The sessions an import of one file writes, and what the server already holds of them.

Each session is named by the file (`core.formats.session_ids`), so importing the same file again
meets the sessions the first import made. `Resolver.resolve` reads what the server holds of each
(its next seq, then its events from where the import's own begin, after what the service writes
into a fork; `core.formats.imported` compares them): a session that holds exactly the planned
events is already imported; one that holds their beginning gets the rest appended; any other is
a conflict (IMPORTED_SESSION_DIFFERS), and the import, which resolves every FILE before it
writes anything, imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from sessionlog.core.errors import AlreadyExists, NotFound, SessionLogError, ValidationError
from sessionlog.core.events import JsonObject, NewEvent
from sessionlog.core.formats.imported import Comparison, compare_log, log_digest
from sessionlog.core.formats.pi.importer import PiImport
from sessionlog.core.formats.session_ids import fork_session_id, session_id_for
from sessionlog.core.formats.sessionlog_file import SessionlogExport

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

    @property
    def next_seq(self) -> int:
        """Where the session ends once imported."""
        return self.first_seq + len(self.events)

    def digest(self) -> str:
        return log_digest(self.events, parent=self.parent)


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
    """One session named `session_id`, else by the export's `session.id` (a restore gets its ids back)."""
    session = export.session
    exported = session.get("id")
    if session_id is None and (not isinstance(exported, str) or not exported):
        raise ValidationError(
            "BAD_SESSIONLOG_HEADER",
            "line 1: the header's session has no id to name the imported session by: give one with --id",
            line=1,
        )
    main_id = session_id or session_id_for(str(exported))
    notes = [] if main_id in (session_id, exported) else [_derived_note(str(exported), main_id)]
    lines = export.event_lines
    events = [event.as_new() for event in export.events]
    target = Target(main_id, f"session {main_id!r}", None, 0, 0, events, lambda seq: lines[seq])
    cwd = session.get("cwd") if isinstance(session.get("cwd"), str) else None
    metadata = session.get("metadata") if isinstance(session.get("metadata"), dict) else None
    return FileTargets(path, [target], cwd or None, metadata or None, notes)


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

    @classmethod
    def of(cls, target: Target, held: int | None, digest: str) -> Resolved:
        return cls(target.session_id, target.label, target.leaf, held, target.next_seq, digest)

    @property
    def status(self) -> Status:
        if self.held is None:
            return Status.imported
        return Status.already_imported if self.held == self.next_seq else Status.appended


class Resolver:
    """Resolves the targets of the files of one import against the server, remembering the ids
    the files before claimed: a later file that maps the same events to an id is already imported
    by the earlier one; one that maps other events to it is a conflict."""

    def __init__(self, client: SessionLogClient) -> None:
        self.client = client
        self._claimed: dict[str, tuple[int, Path, str]] = {}
        """Session id → the FILE (its index among them, its path) that claimed it, and its digest."""

    def resolve(self, file: FileTargets, index: int) -> list[Resolved]:
        """Every target of `file`, the `index`-th FILE, resolved; raises IMPORTED_SESSION_DIFFERS
        for the first that conflicts. Resolving a FILE again (it changed since) sets its claims anew."""
        resolved = [self._resolve(index, target) for target in file.targets]
        for entry in resolved:
            claimed = self._claimed.get(entry.session_id)
            if claimed is None or claimed[0] == index:
                self._claimed[entry.session_id] = (index, file.path, entry.digest)
        return resolved

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
