"""CLI commands for a session's lifecycle: resume and fork (docs/repair.md)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import typer

from sessionlog.cli.common import connect, print_json, seq_option


def register(app: typer.Typer) -> None:
    """Add `resume` and `fork` to `app`."""
    app.command("resume")(resume)
    app.command("fork")(fork)


def resume(
    session_id: Annotated[str, typer.Argument(help="The session to resume.")],
    writer_id: Annotated[
        str | None, typer.Option("--writer-id", metavar="WRITER_ID", help="The new writer's id.")
    ] = None,
    takeover: Annotated[bool, typer.Option("--takeover", help="Take the lease from a live writer.")] = False,
    release: Annotated[
        bool, typer.Option("--release/--keep", help="Give the lease back once resumed (default), or keep it.")
    ] = True,
) -> None:
    """Resume a session: take the lease, complete an open turn, mark the seed boundary.

    Prints the state to continue from (next seq, last turn, latest header, surface generation,
    repair seqs); with --keep, the lease's token too (`lease.leaseToken`): `append` and `ingest`
    write under the kept lease with `--lease-token TOKEN` (or SESSIONLOG_LEASE_TOKEN), and give it
    back when they end. Kept and not used, it lapses after the server's lease time (30 s by
    default). The next turn is lastTurn + 1.
    """
    with connect() as client:
        info = client.resume(session_id, writer_id=writer_id, takeover=takeover)
        if release:
            client.release_lease(info.lease)
            # A token is printed only for a lease kept: once given back it takes nothing (a
            # harness that used it got OWNERSHIP_LOST).
            info = replace(info, lease=replace(info.lease, token=""))
        print_json(info.to_json())


def fork(
    session_id: Annotated[str, typer.Argument(help="The session to fork.")],
    at: Annotated[
        int,
        seq_option("--at", "The last seq the fork inherits (inclusive)."),
    ],
    new_id: Annotated[
        str | None, typer.Option("--id", metavar="NEW_ID", help="The new session's id (generated if omitted).")
    ] = None,
) -> None:
    """Fork a session after seq --at; the prefix is shared, not copied.

    Prints `{"id", "parent", "forkSeq", "repairSeqs"}`: `repairSeqs` are the events the service
    wrote to close a turn the cut fell inside (none for a cut between turns), as `resume` prints.
    """
    with connect() as client:
        forked = client.fork(session_id, at, new_id)
        print_json(
            {
                "id": forked.id,
                "parent": forked.parent_session_id,
                "forkSeq": forked.fork_seq,
                "repairSeqs": forked.repair_seqs,
            }
        )
