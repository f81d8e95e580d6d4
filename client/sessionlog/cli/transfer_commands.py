"""Moving sessions in and out of a server: `import`, `export` and `ingest` (docs/formats.md).

- `import FILE... [--format pi|sessionlog] [--id ID]` prints `{"sessions": [{"id", "file", "leaf",
  "parent", "status", "appended"}]}`. A Pi file becomes one session per leaf: the branch of its
  default leaf (the last entry) first, then every other leaf as a fork of it at their divergence
  point (`ForkSession`, the prefix shared, not copied) followed by that leaf's own entries
  (`core.formats.pi.importer` says how entries map to events and where the cut lands). A
  sessionlog export (docs/formats.md) becomes one session with the same events (the service
  assigns new commit times); `leaf` is null. The export of a fork is restored as the fork of its
  parent again, the same way, where the parent holds the file's events up to the cut, else
  imported whole with a note (`Resolver.place`); the FILEs are imported parents first
  (`parents_first`). Each session is named by the file: the main one by
  `--id` (one FILE only), else by Pi's session id or the export's `session.id`; forks are
  `<main>.<leafId>` (`core.formats.session_ids`, which also derives an id from a name that is no
  valid one). So importing the same files again meets what the first import made
  (`cli.import_targets`): a session that holds exactly the file's events is `already-imported`
  and left alone, one that holds their beginning (the file grew since) gets the rest
  (`appended`), any other is a conflict (IMPORTED_SESSION_DIFFERS). Every file is checked whole
  offline first, every event a session will be sent, by the rules the service applies at append
  (`fold_export`; for Pi, `import_pi`, forks included), then against what the server holds: a bad
  file (exit status 2, as for `replay` of it; the error names its line and seq) or a conflicting
  one (status 1) imports no FILE. Should the service still refuse part way (a limit, a quota, a
  fork's id taken), the error says which sessions were written and which seq each got to, and
  which forks were not created (`_stopped_midway`); the same import run again completes them.
- `export SESSION_ID --format pi|sessionlog [-o FILE]` writes a Pi v3 file (the session's branch,
  entries as they were imported) or the project's own JSONL, to stdout or atomically to FILE.
  The JSONL is written as the events are read (a page of them in memory, whatever the session's
  length); a Pi file and OTLP traces are built from the whole log first.
- `ingest SESSION_ID --format pi-events < events.jsonl` appends what a `pi --mode json` run did
  (`core.formats.pi.ingest`), batch by batch as stdin is read, and prints a summary. A message that
  never got its `message_end` is reported on stderr and kept as an `assistant/attempt` with the
  partial message, never dropped. A session that already has events is *resumed* (docs/repair.md: a turn
  a crashed run left open is completed by the service, the seed boundary marked) before the new
  run's events; a missing session is created. Lines read before a bad line may already be
  committed (the error names the line); `--lenient` drops the truncated last line of a killed run.

Events are appended through one streaming writer per session, in batches of at most `BATCH_EVENTS`
(and within the service's batch limits, learned from a refusal when lower: `cli/batching.py`), each
sent with the seq it must start at: an import's compaction replaces and copies cite seqs, so a log
that is not exactly where the plan says fails loudly instead of citing the wrong events. Every
imported event carries a deterministic eventId, so a batch re-sent after a reconnect is not
appended twice. A writer is opened again while the service restarts (`cli/writers.py`), so an
import or ingest rides out a restart whichever step it was at.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sessionlog.cli.batching import Appender, Sent
from sessionlog.cli.common import (
    LeaseTokenOption,
    connect,
    describe,
    fail,
    print_json,
    warn,
    write_atomically,
    write_stdout,
)
from sessionlog.cli.import_targets import (
    FileTargets,
    Heading,
    Resolved,
    Resolver,
    Status,
    Target,
    fork_points,
    parents_first,
    pi_targets,
    sessionlog_heading,
    sessionlog_targets,
)
from sessionlog.cli.otlp_commands import fork_of
from sessionlog.cli.progress import Advance, progress
from sessionlog.cli.writers import command_writer_id, open_writer
from sessionlog.core import jsonvalue, validate
from sessionlog.core.errors import NotFound, SessionLogError
from sessionlog.core.events import Event, NewEvent
from sessionlog.core.fold import SessionFold
from sessionlog.core.formats.jsonl import DEFAULT_READ_CHUNK_BYTES, JsonlReader, read_file_numbered
from sessionlog.core.formats.otlp import otlp_traces
from sessionlog.core.formats.pi.exporter import export_pi
from sessionlog.core.formats.pi.importer import PiImport, import_pi
from sessionlog.core.formats.pi.ingest import StreamIngest
from sessionlog.core.formats.pi.load import load_pi_file
from sessionlog.core.formats.pi.stream import IncompleteMessage, PiStreamParser, StreamItem
from sessionlog.core.formats.replay import file_format
from sessionlog.core.formats.sessionlog_file import (
    SessionlogExport,
    fold_export,
    parse_sessionlog_objects,
    read_sessionlog_session,
    sessionlog_lines,
)
from sessionlog.core.limits import DEFAULT_LIMITS

OFFLINE_LIMITS = DEFAULT_LIMITS
"""The limits a file is checked against before its import creates anything: the service's
defaults (a service configured lower refuses an event part way, and the error says how far it
got; a batch it refuses as too big is sent again, cut to fit)."""

if TYPE_CHECKING:  # the CLI loads gRPC only when it connects (cli/common.py `connect`)
    from sessionlog.client import SessionLogClient, Writer

BATCH_EVENTS = 300


class ImportFormat(StrEnum):
    pi = "pi"
    sessionlog = "sessionlog"


class ExportFormat(StrEnum):
    pi = "pi"
    sessionlog = "sessionlog"
    otlp_json = "otlp-json"


class IngestFormat(StrEnum):
    pi_events = "pi-events"


def register(app: typer.Typer) -> None:
    """Add `import`, `export` and `ingest` to `app`."""
    app.command("import")(import_command)
    app.command("export")(export_command)
    app.command("ingest")(ingest_command)


# --- import ------------------------------------------------------------------------------------


def import_command(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE", help="Session files to import.", exists=True, dir_okay=False)
    ],
    fmt: Annotated[
        ImportFormat | None,
        typer.Option("--format", help="The files' format (default: each file's own, told by its first line)."),
    ] = None,
    session_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            metavar="ID",
            help="Id of the (main) session, instead of the file's own (Pi's session id, the export's); "
            "forks get `ID.<leafId>`. One FILE only.",
        ),
    ] = None,
) -> None:
    """Import session files, each session named by its file so a re-run adds only what is new; print their status."""
    if session_id is not None and len(files) > 1:
        raise fail("--id names one session: import one FILE at a time with it", 2)
    if session_id is not None:
        try:
            validate.check_session_id(session_id)
        except SessionLogError as exc:
            raise fail(describe(exc, "--id"), 2) from None
    with connect() as client:
        # Every file is read, checked and compared with what the server holds before any is
        # written: a bad file, or one that conflicts with a stored session, imports nothing.
        read = [_planner(path, fmt, session_id) for path in files]
        order = parents_first([heading for _, heading in read])
        files = [files[index] for index in order]
        resolver = Resolver(client, fork_points(heading for _, heading in read))
        planners = [_placed(read[index][0], resolver, position) for position, index in enumerate(order)]
        checked: list[tuple[list[str], list[Resolved]]] = []
        kept: FileTargets | None = None  # one FILE's plan is kept; several are read again, one at a time
        conflicts: list[str] = []
        for index, (path, plan) in enumerate(zip(files, planners, strict=True)):
            file = plan(path, session_id)
            try:
                checked.append((file.notes, resolver.resolve(file, index)))
            except SessionLogError as exc:
                if exc.reason != "IMPORTED_SESSION_DIFFERS":
                    raise fail(describe(exc, str(path))) from None
                conflicts.append(describe(exc, str(path)))
            kept = file if len(files) == 1 else None
        if conflicts:
            raise fail(f"{'; '.join(conflicts)}; nothing was imported (of any FILE given)")
        sessions: list[dict[str, Any]] = []
        for index, (path, plan, (notes, resolved)) in enumerate(zip(files, planners, checked, strict=True)):

            def read_again(path: Path = path, plan: Planner = plan) -> FileTargets:
                return kept or plan(path, session_id)

            try:
                sessions += _import_file(
                    client, path, notes, resolved, read_again, partial(resolver.resolve, index=index)
                )
            except SessionLogError as exc:
                changed = exc.reason == "IMPORTED_SESSION_DIFFERS"  # only a FILE read again can differ now
                after = (
                    f"; {path} changed while the import ran, and the FILEs before it were imported" if changed else ""
                )
                raise fail(describe(exc, str(path)) + after) from None
    print_json({"sessions": sessions})


Planner = Callable[[Path, str | None], FileTargets]
"""Reads and plans one FILE to import (the sessions it holds, under `--id` if given)."""


def _planner(path: Path, fmt: ImportFormat | None, session_id: str | None) -> tuple[Planner, Heading]:
    """How to read the FILE at `path`: by `--format`, else by the format its first line names,
    as `replay` tells them (`formats.replay.session_format`); and what an export's header names
    (the session, its parent), by which the import orders its FILEs (`parents_first`)."""
    with _bad_file_is_usage(path):
        if fmt is None:
            fmt = ImportFormat(file_format(path))
        if fmt == ImportFormat.pi:
            return _pi_file_targets, Heading()
        return _sessionlog_file_targets, sessionlog_heading(read_sessionlog_session(path), session_id)


def _placed(plan: Planner, resolver: Resolver, index: int) -> Planner:
    """`plan`, for the `index`-th FILE, each fork an export restores kept a fork where the import
    can fork it, else imported whole (`Resolver.place`)."""

    def placed(path: Path, session_id: str | None) -> FileTargets:
        return resolver.place(plan(path, session_id), index)

    return placed


def _pi_file_targets(path: Path, session_id: str | None) -> FileTargets:
    return pi_targets(path, _planned_pi(path), session_id)


def _sessionlog_file_targets(path: Path, session_id: str | None) -> FileTargets:
    export = _planned_sessionlog(path)
    with _bad_file_is_usage(path):
        return sessionlog_targets(path, export, session_id)


def _import_file(
    client: SessionLogClient,
    path: Path,
    notes: list[str],
    checked: list[Resolved],
    read_again: Callable[[], FileTargets],
    resolve: Callable[[FileTargets], list[Resolved]],
) -> list[dict[str, Any]]:
    """Write what `checked` says is missing of the sessions of the file at `path`; returns their
    `{id, file, leaf, parent, status, appended}`. A file already imported is not read again. One that is
    (it was checked with the other FILEs), should it have changed since (Pi appends to a live
    session's file), is resolved again."""
    for note in notes:
        _note(f"{path}: {note}")
    resolved = checked
    appended = [0] * len(checked)
    if all(entry.status is Status.already_imported for entry in checked):
        _note(f"{path}: already imported ({_labels(checked)}); skipped")
    else:
        file = read_again()
        if [target.digest() for target in file.targets] != [entry.digest for entry in checked]:
            resolved = resolve(file)
        appended = _write_missing(client, file, resolved)
    out: list[dict[str, Any]] = []
    for entry, count in zip(resolved, appended, strict=True):
        out.append(
            {
                "id": entry.session_id,
                "file": str(path),
                "leaf": entry.leaf,
                "parent": {"sessionId": entry.parent[0], "forkSeq": entry.parent[1]} if entry.parent else None,
                "status": str(entry.status),
                "appended": count,
            }
        )
        if entry.status is Status.appended:
            _note(f"{path}: {entry.label} was imported before and the file grew: appended {count} events")
    return out


def _write_missing(client: SessionLogClient, file: FileTargets, resolved: Sequence[Resolved]) -> list[int]:
    """Create the missing sessions and append each its missing events, in order (a fork after the
    session it forks); returns how many events each got. Should the service refuse part way, the
    error says what was written (`_stopped_midway`)."""
    pairs = list(zip(file.targets, resolved, strict=True))
    written: list[_Written] = []
    appended: list[int] = []
    writing = True
    total = sum(target.next_seq - _write_from(target, entry) for target, entry in pairs)
    with progress(f"importing {file.path.name}", total) as advance:
        for index, (target, entry) in enumerate(pairs):
            if entry.status is Status.already_imported:
                appended.append(0)
                continue
            try:
                if entry.held is None:
                    writing = False
                    if target.parent is None:
                        client.create_session(target.session_id, cwd=file.cwd, metadata=file.metadata)
                    else:
                        client.fork(*target.parent, target.session_id)
                written.append(
                    _Written(
                        target.session_id, target.label, target.next_seq, target.line_of, created=entry.held is None
                    )
                )
                writing = True
                start = _write_from(target, entry)
                events = target.events[start - target.first_seq :]
                append_planned(client, target.session_id, events, first_seq=start, advance=advance)
                appended.append(len(events))
            except SessionLogError as exc:
                if not written:
                    raise  # nothing was written: the error is the whole story
                later = resolved[index + (1 if writing else 0) :]
                missing = [str(e.leaf) for e in later if e.status is Status.imported]
                raise _stopped_midway(client, written, exc, writing=writing, forks_not_created=missing) from None
    return appended


def _write_from(target: Target, entry: Resolved) -> int:
    """The seq the import appends from: where the stored session ends, or, in one it creates, where
    its own events begin (a fork starts with what the service writes into it)."""
    return target.own_seq if entry.held is None else entry.held


def _labels(resolved: Sequence[Resolved]) -> str:
    """`session 'ID'`, and how many forks with it."""
    forks = len(resolved) - 1
    first = resolved[0].label
    return first if forks == 0 else f"{first} and its {forks} fork{'s' if forks > 1 else ''}"


def _note(text: str) -> None:
    sys.stderr.write(f"sessionlog: note: {text}\n")


def _planned_pi(path: Path) -> PiImport:
    """The Pi file read and planned offline, every event checked as an append would be."""
    with _bad_file_is_usage(path), progress(f"reading {path.name}", path.stat().st_size, unit="bytes") as advance:
        return import_pi(load_pi_file(path, on_read=advance), OFFLINE_LIMITS)


def _planned_sessionlog(path: Path) -> SessionlogExport:
    """The sessionlog export read and folded offline, as the service will fold its events."""
    with _bad_file_is_usage(path), progress(f"reading {path.name}", path.stat().st_size, unit="bytes") as advance:
        export = parse_sessionlog_objects(read_file_numbered(path, JsonlReader(), on_read=advance))
        fold_export(export, limits=OFFLINE_LIMITS)
    return export


@contextmanager
def _bad_file_is_usage(path: Path) -> Iterator[None]:
    """The offline reading and checking of a FILE to import: a file that cannot be read, or that
    the checks refuse, is the user's mistake and creates nothing, so it is the usage status 2 as
    `replay` of the same file is (README, exit statuses); what the service refuses later is 1."""
    try:
        yield
    except SessionLogError as exc:
        raise fail(describe(exc, str(path)), 2) from None
    except OSError as exc:
        raise fail(f"{path}: {exc.strerror or exc}", 2) from None


@dataclass(frozen=True, slots=True)
class _Written:
    """A session an import wrote to (`created` by it, else appended to): its id, how an error
    names it, the seq it ends at once imported, and the file's line of the event it is sent at a
    seq (for seqs it is sent)."""

    session_id: str
    label: str
    total: int
    line_of: Callable[[int], int | None]
    created: bool = True


def _stopped_midway(
    client: SessionLogClient,
    written: Sequence[_Written],
    exc: SessionLogError,
    *,
    writing: bool = True,
    forks_not_created: Sequence[str] = (),
) -> SessionLogError:
    """The service refused a file that validated offline (a limit, a quota) after sessions were
    created or appended to: each holds what came before. Say which were written and how far each
    got (and which forks were not created), never leave them silent. `writing`: the refusal came
    while appending to the last of `written` (else while creating the next session)."""
    # A batch sent after the refused one fails with the writer's earlier failure as its cause
    # (`base.failed_earlier`): the refused batch's own error names its event.
    if isinstance(exc.__cause__, SessionLogError) and exc.reason == exc.__cause__.reason:
        exc = exc.__cause__
    parts: list[str] = []
    stopped: tuple[_Written, int] | None = None
    for session in written:
        try:
            reached: int | None = client.get_session(session.session_id).next_seq
        except SessionLogError:
            reached = None
        if reached is None:
            got = "how far it got is unknown (the session could not be read)"
        elif reached == 0:
            got = f"it holds none of its {session.total} events"
        elif reached < session.total:
            got = f"it holds seqs 0..{reached - 1} of {session.total} and stopped at seq {reached}"
        else:
            got = f"it holds all {session.total} events"
        parts.append(f"{session.label} {'was created' if session.created else 'was there'} and {got}")
        if reached is not None and writing and session is written[-1]:
            stopped = (session, reached)
    if forks_not_created:
        leaves = "leaf" if len(forks_not_created) == 1 else "leaves"
        parts.append(f"no fork was created for {leaves} {', '.join(forks_not_created)}")
    refused = exc.message
    metadata = {**exc.metadata, "session_id": written[-1].session_id}
    if len(written) > 1:
        metadata["sessions"] = ",".join(session.session_id for session in written)
    if stopped is not None:
        session, reached = stopped
        metadata["next_seq"] = str(reached)
        index = exc.metadata.get("event_index", "")
        if index.isdigit() and reached + int(index) < session.total:
            # The refused batch started where the session stopped: name its event by seq and line.
            seq = reached + int(index)
            line = session.line_of(seq)
            where = f"seq {seq} (line {line})" if line is not None else f"seq {seq}"
            refused = f"{where}: {refused.removeprefix(f'event {index}: ')}"
        if reached < session.total:
            metadata["seq"] = str(reached)
            if (line := session.line_of(reached)) is not None:
                metadata["line"] = str(line)
    them = "them" if len(written) > 1 else "it"
    message = (
        f"the service refused the import part way: {'; '.join(parts)}; once the cause is fixed, run the same "
        f"import again to complete {them} (it appends what is missing). Refused: {refused}"
    )
    return type(exc)(exc.reason, message, **metadata)


def append_planned(
    client: SessionLogClient,
    session_id: str,
    events: Sequence[NewEvent],
    *,
    first_seq: int,
    advance: Advance | None = None,
) -> None:
    """Append `events` so that the first lands at `first_seq`, in pipelined batches, each checked
    against the seq it must start at (cut smaller should the service refuse one as too big:
    `cli/batching.py`); returns once all are durable. `advance(n)` is told of each batch as it
    becomes durable."""

    def durable(sent: Sent) -> None:
        if advance is not None:
            advance(len(sent.lines))

    writer_id = command_writer_id()

    def reopen() -> Writer:
        return open_writer(client, session_id, writer_id)

    appender = Appender(reopen(), reopen, max_events=BATCH_EVENTS)
    try:
        if appender.writer.next_seq != first_seq:
            raise SessionLogError(
                "IMPORT_SEQ_MISMATCH",
                f"session {session_id!r} is at seq {appender.writer.next_seq}, the import expected {first_seq}",
            )
        for start in range(0, len(events), BATCH_EVENTS):
            batch = events[start : start + BATCH_EVENTS]
            seqs = range(first_seq + start, first_seq + start + len(batch))
            appender.append(batch, seqs, expected_next_seq=first_seq + start)
            appender.settle(wait=False, on_durable=durable)
        appender.finish()
        appender.settle(wait=True, on_durable=durable)
    except BaseException:
        appender.abandon()
        raise
    appender.close()


# --- export ------------------------------------------------------------------------------------


def export_command(
    session_id: Annotated[str, typer.Argument(help="The session to export.")],
    fmt: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            metavar="FORMAT",  # the three choices took the type column's width, and cut the help
            help="pi: a Pi v3 session file; sessionlog: JSON Lines (docs/formats.md); "
            "otlp-json: OTLP/JSON traces (GenAI conventions).",
        ),
    ],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", metavar="FILE", help="Write here (atomically), not stdout.")
    ] = None,
    content: Annotated[
        bool, typer.Option("--with-content", help="otlp-json: include gen_ai.input/output.messages.")
    ] = False,
) -> None:
    """Export a session as a Pi session file, sessionlog JSON Lines, or OTLP/JSON traces."""
    with connect() as client:
        info = client.get_session(session_id)
        with progress(f"reading {session_id}", info.next_seq) as advance:
            if fmt == ExportFormat.sessionlog:
                # One line per event, in seq order: written as the events are read, so a long
                # session's export holds a page of events, not the log (a failure part way
                # leaves no FILE; on stdout, the lines before it and a non-zero exit).
                session = {k: v for k, v in info.to_json().items() if k not in ("lease", "traceId")}
                _write(output, sessionlog_lines(session, _counted(client.read_events(session_id), advance)))
                return
            events = list(_counted(client.read_events(session_id), advance))
        # A fork's trace holds its own events, and its root links to its parent's.
        fork = fork_of(client, info) if fmt == ExportFormat.otlp_json else None
    try:
        if fmt == ExportFormat.pi:
            lines: Iterable[str] = list(
                export_pi(events, session_id=info.id, cwd=info.cwd, create_time=info.create_time).lines()
            )
        else:
            # The service's trace and namespace for the session, so its spans and resource are
            # the live export's (an old service tells neither: the trace is then hashed from the
            # id, and no namespace is named).
            document = otlp_traces(
                events, info.id, trace=info.trace_id, namespace=info.namespace, content=content, fork=fork
            )
            lines = [jsonvalue.dumps(document) + "\n"]
    except SessionLogError as exc:
        raise fail(describe(exc)) from None
    _write(output, lines)


def _counted(events: Iterable[Event], advance: Advance) -> Iterator[Event]:
    """`events`, moving the progress bar by one for each."""
    for event in events:
        advance(1)
        yield event


def _write(output: Path | None, lines: Iterable[str]) -> None:
    """To stdout, or atomically to `output`; UTF-8 either way (Pi files hold emoji and raw U+2028)."""
    chunks = (line.encode("utf-8") for line in lines)
    if output is None:
        write_stdout(chunks)
    else:
        write_atomically(output, chunks)


# --- ingest ------------------------------------------------------------------------------------


def ingest_command(
    session_id: Annotated[str, typer.Argument(help="The session to append to (created if missing).")],
    fmt: Annotated[IngestFormat, typer.Option("--format", help="pi-events: the output of `pi --mode json`.")],
    takeover: Annotated[bool, typer.Option("--takeover", help="Take the lease from a live writer.")] = False,
    lenient: Annotated[
        bool, typer.Option("--lenient", help="Drop a truncated last line (a killed pi) with a warning.")
    ] = False,
    lease_token: LeaseTokenOption = "",
) -> None:
    """Append the events of a `pi --mode json` run read from stdin; print a summary."""
    with connect() as client:
        resume = _has_events(client, session_id)
        writer_id = command_writer_id()
        writer = open_writer(client, session_id, writer_id, takeover=takeover, resume=resume, lease_token=lease_token)
        # Should the service refuse a batch as too big, the writer that goes on needs no resume.
        appender = Appender(writer, lambda: open_writer(client, session_id, writer_id), max_events=BATCH_EVENTS)
        try:
            prior = list(client.read_events(session_id, to_seq=writer.next_seq - 1)) if writer.next_seq else []
            ingest = StreamIngest(SessionFold.replay(prior, validate=False), OFFLINE_LIMITS)
            appended = _ingest_stdin(appender, ingest, JsonlReader(lenient=lenient))
            appender.finish()
            appender.settle(wait=True)
        except BaseException:
            appender.abandon()
            raise
        appender.close()
    open_turn = ingest.fold.open_turn is not None
    if open_turn:
        # The lease is given back, so no lapse of it sends the service's repair: the turn stays
        # open until a writer resumes the session (as the next ingest into it does), or the
        # service's start-up repair completes it (docs/repair.md), whichever comes first.
        warn(
            "the stream ended inside an agent run; the turn stays open until "
            f"the session is resumed (`sessionlog resume {session_id}`, or the next ingest into it) "
            "or the service restarts, either of which completes it as interrupted"
        )
    print_json(
        {
            "session": session_id,
            "appended": appended,
            "nextSeq": ingest.fold.next_seq,
            "incomplete": len(ingest.incomplete),
            "openTurn": open_turn,
        }
    )


def _ingest_stdin(appender: Appender, ingest: StreamIngest, reader: JsonlReader) -> int:
    """Parse stdin as it arrives, map and append batch by batch; returns how many events."""
    parser = PiStreamParser()
    start_seq = ingest.fold.next_seq
    appended = 0
    try:
        for chunk in itertools.chain(_stdin_chunks(), [b""]):  # b"": the end, which may hold a last line
            events = [
                event
                for line, obj in (reader.feed_numbered(chunk) if chunk else reader.close())
                for event in _mapped(ingest, parser.feed(obj, line), line)
            ]
            appended += _send(appender, events, start_seq + appended)
        appended += _send(appender, _mapped(ingest, parser.close(), None), start_seq + appended)
    except SessionLogError as exc:
        raise fail(describe(exc)) from None
    finally:
        for warning in reader.warnings:
            warn(warning.message)
    return appended


def _has_events(client: SessionLogClient, session_id: str) -> bool:
    """The session exists and has events: a new run continues it, so the writer resumes it."""
    try:
        return client.get_session(session_id).next_seq > 0
    except NotFound:
        return False


def _stdin_chunks() -> Iterator[bytes]:
    """Whatever stdin has, as it arrives (so `pi --mode json | sessionlog ingest` streams)."""
    stream = sys.stdin.buffer
    read = getattr(stream, "read1", stream.read)
    while chunk := read(DEFAULT_READ_CHUNK_BYTES):
        yield chunk


def _mapped(ingest: StreamIngest, items: Iterable[StreamItem], line: int | None) -> list[NewEvent]:
    """The events of `items` (read from the stream's `line`, None at its end), reporting each
    incomplete message on stderr."""
    events: list[NewEvent] = []
    for item in items:
        if isinstance(item, IncompleteMessage):
            where = f"turn {item.turn}" if item.turn is not None else "outside any turn"
            kept = "assistant/attempt (partial)" if item.role in (None, "assistant") else "pi/incomplete_message"
            warn(f"incomplete {item.role or 'unknown'} message ({where}): {item.reason}; appended as {kept}")
        events += ingest.map(item, line)
    return events


def _send(appender: Appender, events: Sequence[NewEvent], first_seq: int) -> int:
    """Append `events` in batches, the first at `first_seq`; returns how many. A batch refused
    so far raises its error now, not once stdin ends."""
    appender.append(events, range(first_seq, first_seq + len(events)), expected_next_seq=first_seq)
    appender.settle(wait=False)
    return len(events)
