"""`sessionlog view SESSION_ID [-o FILE.html] [--at SEQ]`: write the session page;
`sessionlog diff SESSION_ID --from SEQ --to SEQ`: the request diff behind the page's.

The events come over ReadEvents; the page is rendered here, offline, by the same
`render_parts` the server uses for `/sessions/ID`, and written as it is rendered (a page of
any length in the memory of a few parts). Links to the parent and the forks point at
`ID.html` beside the file, so a folder of pages written by this command links up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sessionlog.cli.common import connect, fail, guarded, print_json, seq_option, write_atomically
from sessionlog.core.errors import seq_not_found
from sessionlog.core.request_diff import request_diff
from sessionlog.view.page import MissingAssets, SessionRef, render_parts, require_assets


def register(app: typer.Typer) -> None:
    """Add `view` and `diff` to `app`."""
    app.command("view")(view)
    app.command("diff")(diff)


def view(
    session_id: Annotated[str, typer.Argument(help="The session to show.")],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", metavar="FILE", help="The HTML file (default: SESSION_ID.html).")
    ] = None,
    at: Annotated[int | None, seq_option("--at", "Show the session as it was after this seq.")] = None,
) -> None:
    """Write one self-contained HTML page: request chart, cache-read drops and their causes,
    request diffs, turns and tool calls, and the transcript with replaced rows marked."""
    try:
        require_assets()
    except MissingAssets as exc:
        raise fail(str(exc)) from None
    with connect() as client:
        info = client.get_session(session_id)
        if at is not None and at >= info.next_seq:
            raise seq_not_found(session_id, at, info.next_seq)  # as history says of it
        children = tuple((child.id, child.fork_seq) for child in client.list_sessions(parent_session_id=session_id))
        session = SessionRef(info.id, info.parent_session_id, info.fork_seq, children)
        path = output or Path(f"{session_id}.html")
        # Rendered as the log is read, into a file beside the target moved over it when whole:
        # a failed read leaves no half page.
        parts = render_parts(client.read_events(session_id, to_seq=at), session)
        write_atomically(path, (part.encode("utf-8") for part in parts))
    typer.echo(str(path))


def diff(
    session_id: Annotated[str, typer.Argument(help="The session.")],
    from_seq: Annotated[int, seq_option("--from", "The earlier request: its prefix ends here.")],
    to_seq: Annotated[int, seq_option("--to", "The later request: its prefix ends here.")],
) -> None:
    """Print what changed between the requests of two prefixes (`request --at FROM` and `--at TO`).

    Header fields, messages replaced (and by which event), messages added, and whether the later
    request still starts with the earlier one (a prompt-cache hit)."""
    with connect() as client:
        next_seq = client.get_session(session_id).next_seq
        last = min(to_seq, next_seq - 1)
        events = list(client.read_events(session_id, to_seq=last)) if last >= 0 else []
    print_json(guarded(lambda: request_diff(events, from_seq, to_seq, next_seq=next_seq, session_id=session_id)))
