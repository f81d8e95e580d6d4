"""CLI commands that print projections as JSON: history, transcript, request, stats, surface."""

from __future__ import annotations

from typing import Annotated

import typer

from sessionlog.cli.common import connect, print_json, seq_option

SessionArg = Annotated[str, typer.Argument(help="The session to project.")]
AtOption = Annotated[
    int | None,
    seq_option("--at", "See the session as it was after this seq."),
]
RepairOption = Annotated[
    bool, typer.Option("--with-repair", help="Show the crash repair of an open turn (in memory, not written).")
]


def register(app: typer.Typer) -> None:
    """Add the projection commands to `app`."""
    app.command("history")(history)
    app.command("transcript")(transcript)
    app.command("request")(request)
    app.command("stats")(stats)
    app.command("surface")(surface)


def history(session_id: SessionArg, at: AtOption = None, with_repair: RepairOption = False) -> None:
    """Print `{"messages": [...]}`: the model history, in surface order."""
    with connect() as client:
        print_json({"messages": client.model_history(session_id, at_seq=at, with_repair=with_repair)})


def transcript(session_id: SessionArg, at: AtOption = None, with_repair: RepairOption = False) -> None:
    """Print `{"rows": [...]}`: messages and log events for people, replaced ones marked."""
    with connect() as client:
        print_json({"rows": client.transcript(session_id, at_seq=at, with_repair=with_repair)})


def request(session_id: SessionArg, at: AtOption = None, with_repair: RepairOption = False) -> None:
    """Print the exact request of that prefix, its sha256 and the header it used.

    Prints `{"request": {...}, "sha256": "...", "headerSeq": N, "atSeq": N}`: the prefix ends at
    `atSeq` (null, as `headerSeq`, for a session without events: its request is
    `{"messages": []}`)."""
    with connect() as client:
        print_json(client.request(session_id, at_seq=at, with_repair=with_repair))


def stats(session_id: SessionArg, at: AtOption = None, with_repair: RepairOption = False) -> None:
    """Print the stats object: counts, tokens and cost over every event carrying usage."""
    with connect() as client:
        print_json(client.stats(session_id, at_seq=at, with_repair=with_repair))


def surface(session_id: SessionArg, at: AtOption = None, with_repair: RepairOption = False) -> None:
    """Print `{"nodes": [...], "replaceGeneration": N, "atSeq": N}` (for debugging; `atSeq` is
    null for a session without events)."""
    with connect() as client:
        print_json(client.surface(session_id, at_seq=at, with_repair=with_repair))
