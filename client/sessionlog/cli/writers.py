"""Opening the streaming writers of `import` and `ingest` so that a service restart does not end them.

Once open, a writer rides out a restart by itself: it reconnects with its lease token and sends
again what was not acknowledged (`sessionlog.base.RECONNECT`). Its first open is tried again by
the client as well, here by that same policy (a writer's own default is the client's few seconds
of retries, which a restart can outlast), each attempt with the open's one request_id: an attempt
whose answer was lost (the service killed after its commit) took the lease under a token the
next attempt is told. So an import that opens its next session's writer while the service
restarts (`kill -9` and back) goes on, where it failed at once with TRANSPORT_ERROR, half done.

A service older than the request_id does not know it: there a later attempt finds the lease held
by the lost one (WRITER_HELD) until it lapses. So the writers open under a writer id that names
this one command (a fresh one per process): a lease found held by that id is an earlier attempt's
grant whose answer was lost, and is taken over, as nobody else holds that id.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from sessionlog.core.errors import WriterHeld

if TYPE_CHECKING:  # the CLI loads gRPC only when it connects (cli/common.py `connect`)
    from sessionlog.client import SessionLogClient, Writer

WRITER_ID_PREFIX = "sessionlog-cli-"


def command_writer_id() -> str:
    """A writer id no other process uses: the label of this command's leases."""
    return f"{WRITER_ID_PREFIX}{uuid.uuid4().hex[:12]}"


def open_writer(
    client: SessionLogClient,
    session_id: str,
    writer_id: str,
    *,
    takeover: bool = False,
    resume: bool = False,
    lease_token: str = "",
) -> Writer:
    """A streaming writer on `session_id` (created if missing) under `writer_id`, its open tried
    again while the service is unavailable (by the client, for as long as a writer reconnects:
    `open_retry`); a lease found held by `writer_id` itself, an earlier attempt's, is taken over.
    `lease_token`: a live lease the caller kept (`resume --keep`), taken again."""
    from sessionlog.base import RECONNECT  # loads gRPC: the CLI does only once it connects

    while True:
        try:
            return client.writer(
                session_id,
                writer_id=writer_id,
                create_if_missing=True,
                takeover=takeover,
                resume=resume,
                lease_token=lease_token,
                open_retry=RECONNECT,
            )
        except WriterHeld as exc:
            if takeover or exc.metadata.get("holder") != writer_id:
                raise
            takeover = True  # the lease an earlier attempt got, its answer lost: ours to take
