"""`sessionlog costs`: what sessions cost, each fork's own part apart from the prefix it
inherits, and a total that counts every shared prefix once (`core.costs`,
docs/projections.md#costs).

Only the client's public calls: ListSessions (every page of it) finds the sessions; each one's
stats are read at the last seq the listing showed, so a session that goes on while the report
is made is reported as listed; a fork's source's stats are read at the fork's cut. With
--since/--until, each session's first event after the head is read too (as many at once as the
stats): an imported session is dated by when its file began (`started_ms`), not by its import.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sessionlog.cli.common import connect, cost_cell, fail, print_json, printable, table_cell, write_stdout
from sessionlog.core.clock import RECORDED_TIME, is_epoch_ms
from sessionlog.core.costs import COST_KEYS, SessionCost, cost_report, total_figures
from sessionlog.core.projections.stats import figure_label

if TYPE_CHECKING:  # imported where a client is made (`common.connect`)
    from sessionlog.client import SessionLogClient
    from sessionlog.session_info import SessionInfo

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class CostFormat(StrEnum):
    json = "json"
    table = "table"


def register(app: typer.Typer) -> None:
    """Add the `costs` command to `app`."""
    app.command("costs")(costs)


def costs(
    parent: Annotated[
        str | None,
        typer.Option("--parent", metavar="ID", help="Only the direct forks of this session (as `sessions --parent`)."),
    ] = None,
    family: Annotated[
        str | None,
        typer.Option("--family", metavar="ID", help="This session and its forks, forks of forks included."),
    ] = None,
    cwd: Annotated[
        str | None, typer.Option("--cwd", metavar="DIR", help="Only sessions of this working directory.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="TIME",
            help="Only sessions begun at or after this ISO 8601 time (UTC if bare; an import: its file's start).",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", metavar="TIME", help="Only sessions begun before this ISO 8601 time (UTC if bare)."),
    ] = None,
    fmt: Annotated[CostFormat, typer.Option("--format", help="json: one object; table: plain text.")] = (
        CostFormat.json
    ),
) -> None:
    """Print what sessions cost: one row per session, and a total that counts every shared
    prefix once.

    The sessions are every session, the forks of --parent, or the --family of a session;
    narrowed by --cwd, --since, --until (when a session began: an imported one, when its file
    did). A fork's row gives its own figures apart from the prefix it inherits.
    `unpricedEvents` not 0: the cost leaves out that many events' usage, which had no price."""
    if parent is not None and family is not None:
        raise fail("give --family or --parent, not both", code=2)
    begun = _BegunBetween(_epoch_ms("--since", since), _epoch_ms("--until", until))
    if begun.since is not None and begun.until is not None and begun.until <= begun.since:
        # No session begins in it: an empty report with exit 0 read as "nothing cost anything".
        raise fail(f"--until {until} is not after --since {since}: no time is in between", code=2)
    with connect() as client:
        listed = _family(client, family) if family is not None else client.list_sessions(parent_session_id=parent)
        sessions: Iterable[SessionInfo] = (s for s in listed if cwd is None or s.cwd == cwd)
        if begun.bounded:
            sessions = _begun_within(client, sessions, begun)
        try:
            rows = _rows(client, sessions)
        except ValueError as exc:  # stats without a figure the report needs
            raise fail(str(exc)) from None
    if fmt is CostFormat.json:
        print_json(cost_report(rows))
    else:
        _print_table(rows)


def _family(client: SessionLogClient, root_id: str) -> Iterator[SessionInfo]:
    """`root_id`, then each of its forks followed by the forks of that fork (depth first, each
    level in listing order: a fork's row comes after its source's)."""
    pending = [client.get_session(root_id)]
    while pending:
        session = pending.pop()
        yield session
        pending.extend(reversed(list(client.list_sessions(parent_session_id=session.id))))


class _BegunBetween:
    """Start times from `since` (inclusive) to `until` (exclusive), epoch ms; None: unbounded."""

    def __init__(self, since: int | None, until: int | None) -> None:
        self.since = since
        self.until = until

    @property
    def bounded(self) -> bool:
        return self.since is not None or self.until is not None

    def holds(self, create_time: int) -> bool:
        return (self.since is None or create_time >= self.since) and (self.until is None or create_time < self.until)


def started_ms(client: SessionLogClient, session: SessionInfo) -> int:
    """When a session began (epoch ms): the recorded time of its first event after the head
    (seq 1), which an importer carries over from the file (`data.recordedTime`: when a Pi file
    began, for its forks too, which share that event), else its creation time. An import
    creates its sessions when it runs, so their creation time says nothing of when the agent
    worked; a live session's events carry no recorded time."""
    if session.next_seq > 1:
        for event in client.read_events(session.id, from_seq=1, to_seq=1):
            recorded = event.data.get(RECORDED_TIME)
            if is_epoch_ms(recorded):
                return recorded
    return session.create_time


READS_IN_FLIGHT = 16
"""Reads sent at once (the stats, and with --since/--until each session's start): each is a
round trip to the service, so one after another a report over many sessions takes as many round
trips as it reads (934 imported sessions: 1,177 reads, 2.6 s on loopback and about 25 s over a
20 ms link)."""


def _begun_within(client: SessionLogClient, sessions: Iterable[SessionInfo], begun: _BegunBetween) -> list[SessionInfo]:
    """The sessions that began within `begun`, in listing order; their start times are read
    `READS_IN_FLIGHT` at a time, as the stats are (one read each, a round trip apiece)."""
    with ThreadPoolExecutor(READS_IN_FLIGHT, thread_name_prefix="sessionlog-costs-began") as pool:
        dated = [(session, pool.submit(started_ms, client, session)) for session in sessions]
        return [session for session, start in dated if begun.holds(start.result())]


def _epoch_ms(option: str, text: str | None) -> int | None:
    """An ISO 8601 date or time as epoch ms (UTC when it names no offset); a usage mistake if
    it is none."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise fail(
            f"{option}: {text!r} is no ISO 8601 date or time (e.g. 2025-09-01 or 2025-09-01T12:00+02:00)", code=2
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - EPOCH) // timedelta(milliseconds=1)  # exact: a float timestamp can lose the last ms


def _rows(client: SessionLogClient, sessions: Iterable[SessionInfo]) -> list[SessionCost]:
    """One row per session, in listing order: its stats as listed and, for a fork, its source's
    at the cut (read once per source and cut, however many forks share them). The reads go
    `READS_IN_FLIGHT` at a time; the listing is walked as they go."""
    inherited: dict[tuple[str, int], Future[dict[str, Any]]] = {}
    pending: list[tuple[SessionInfo, int | None, Future[dict[str, Any]], Future[dict[str, Any]] | None]] = []
    with ThreadPoolExecutor(READS_IN_FLIGHT, thread_name_prefix="sessionlog-costs") as pool:
        for session in sessions:
            at_seq = session.next_seq - 1 if session.next_seq > 0 else None
            stats = pool.submit(client.stats, session.id, at_seq=at_seq)
            source = None
            if session.parent_session_id is not None and session.fork_seq is not None:
                cut = (session.parent_session_id, session.fork_seq)
                if cut not in inherited:
                    inherited[cut] = pool.submit(client.stats, cut[0], at_seq=cut[1])
                source = inherited[cut]
            pending.append((session, at_seq, stats, source))
        return [
            SessionCost.of(
                session.id,
                session.parent_session_id,
                session.fork_seq,
                stats.result(),
                source.result() if source is not None else None,
                at_seq,
            )
            for session, at_seq, stats, source in pending
        ]


def _print_table(rows: list[SessionCost]) -> None:
    """One line per session and a `total` line, columns padded: the session's route, events and
    cost, then its own figures (`own ...`, labelled as stats label them). A cost that leaves out
    unpriced events reads `≥COST`. Plain text, never cut to a width (as `replay`'s table)."""
    header = ["session", "parent", "fork seq", "model", figure_label("events"), figure_label("costUsd")]
    header += [f"own {figure_label(key)}" for key in COST_KEYS]
    lines = [header]
    for row in rows:
        route = [row.session_id, row.parent_session_id, row.fork_seq, row.model]
        whole = [table_cell("events", row.stats["events"]), cost_cell(row.stats)]
        lines.append([printable(table_cell("", value)) for value in route] + whole + _own(row.own))
    lines.append(["total", "-", "-", "-", "-", "-", *_own(total_figures(rows))])
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    write_stdout(_padded(line, widths).encode() for line in lines)


def _padded(cells: list[str], widths: list[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip() + "\n"


def _own(figures: dict[str, int | float]) -> list[str]:
    return [cost_cell(figures) if key == "costUsd" else table_cell(key, figures[key]) for key in COST_KEYS]
