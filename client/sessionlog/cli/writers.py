"""Opening the streaming writers of `import` and `ingest` so that a service restart does not end them.

Once open, a writer rides out a restart by itself: it reconnects with its lease token and sends
again what was not acknowledged (`sessionlog.base.RECONNECT`). Opening one is not retried by the
client, as a lease grant is not idempotent: an open whose answer was lost may have taken the
lease, and a second open finds it held (WRITER_HELD) until it lapses. So an import that opened
its next session's writer while the service restarted (`kill -9` and back) failed at once with
TRANSPORT_ERROR, half done, and run again within the lease's time it failed with WRITER_HELD,
held by its own lost open.

Here an open that fails with Unavailable is tried again by the same policy as a reconnect, under
a writer id that names this one command (a fresh one per process): a later attempt that finds
the lease held by that id finds the grant of an earlier attempt whose answer was lost, and takes
it over, as nobody else holds that id.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from sessionlog.core.errors import Unavailable, WriterHeld

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
    again while the service is unavailable (for as long as a writer reconnects); a lease found
    held by `writer_id` itself, an earlier attempt's, is taken over. `lease_token`: a live lease
    the caller kept (`resume --keep`), taken again."""
    from sessionlog.base import RECONNECT

    attempt = 1
    while True:
        try:
            return client.writer(
                session_id,
                writer_id=writer_id,
                create_if_missing=True,
                takeover=takeover,
                resume=resume,
                lease_token=lease_token,
            )
        except WriterHeld as exc:
            if takeover or exc.metadata.get("holder") != writer_id:
                raise
            takeover = True  # the lease an earlier attempt got, its answer lost: ours to take
        except Unavailable as exc:
            time.sleep(RECONNECT.wait_after(exc, attempt))  # raises it once the attempts are spent
            attempt += 1
