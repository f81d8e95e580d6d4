"""CLI commands that print projections as JSON: history, transcript, request, stats, surface."""

from __future__ import annotations

from typing import Annotated

import typer

from sessionlog.cli.common import connect, print_json, seq_option, write_stdout
from sessionlog.core import jsonvalue

SessionArg = Annotated[str, typer.Argument(help="The session to project.")]
AtOption = Annotated[
    int | None,
    seq_option("--at", "See the session as it was after this seq."),
]
RepairOption = Annotated[
    bool,
    typer.Option(
        "--with-repair",
        help="Show the crash repair of an open turn (in memory, not written); at the head only: an --at "
        "before it is shown as logged.",
    ),
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


def request(
    session_id: SessionArg,
    at: AtOption = None,
    with_repair: RepairOption = False,
    only_bytes: Annotated[
        bool,
        typer.Option(
            "--bytes",
            help="Print only the request's exact bytes, what its sha256 is of, with no newline: "
            "`sessionlog request ID --bytes | sha256sum`.",
        ),
    ] = False,
) -> None:
    """Print the exact request of that prefix, its sha256 and the header it used.

    Prints `{"request": {...}, "sha256": "...", "headerSeq": N, "atSeq": N}`: the prefix ends at
    `atSeq` (null, as `headerSeq`, for a session without events: its request is
    `{"messages": []}`). The request is printed as the service sent it, the canonical JSON
    (RFC 8785) its sha256 is of, byte for byte."""
    with connect() as client:
        view = client.request(session_id, at_seq=at, with_repair=with_repair)
    exact: bytes = view["requestJson"]
    if only_bytes:
        write_stdout([exact])
        return
    # The request goes in as its bytes: written again from the parsed value, some numbers came
    # out otherwise (1e21 for RFC 8785's 1e+21), and the text printed was not what was hashed.
    rest = jsonvalue.dumps_bytes({key: view[key] for key in ("sha256", "headerSeq", "atSeq")})
    write_stdout([b'{"request":', exact, b",", rest[1:], b"\n"])


def stats(session_id: SessionArg, at: AtOption = None, with_repair: RepairOption = False) -> None:
    """Print the stats object: counts, tokens and cost over every event carrying usage."""
    with connect() as client:
        print_json(client.stats(session_id, at_seq=at, with_repair=with_repair))


def surface(session_id: SessionArg, at: AtOption = None, with_repair: RepairOption = False) -> None:
    """Print `{"nodes": [...], "replaceGeneration": N, "atSeq": N}` (for debugging; `atSeq` is
    null for a session without events)."""
    with connect() as client:
        print_json(client.surface(session_id, at_seq=at, with_repair=with_repair))
