"""What a writer saw acknowledged, against the log: how the service finds it was restored.

A writer says where the acknowledgements it got under its lease end (`acknowledged_next_seq`:
a writer stream's reconnect in its `open`, a unary writer in each AppendEvents). Seqs only
grow, so a log that ends before that was put back to an older state: the database restored
from a backup, or an older copy put in place of it, which still holds the writer's lease.
Going on from the log's next seq would give seqs the writer was told were its events to other
events (deploy/CONFIGURATION.md, Backup and restore). The writer is refused instead, nothing
is appended, and its lease is released, so a deliberate resume can take it at once.
"""

from __future__ import annotations

from sessionlog.core.errors import ExpectedSeqMismatch
from sessionlog_server.service.leases import LeaseHolder, LeaseManager


def acknowledged_past_log(session_id: str, acknowledged: int, next_seq: int) -> ExpectedSeqMismatch:
    """The refusal of a writer that saw events acknowledged that the log lacks."""
    return ExpectedSeqMismatch(
        "ACKNOWLEDGED_PAST_LOG",
        f"this writer saw events acknowledged up to seq {acknowledged - 1}, and the log of session "
        f"{session_id!r} ends at seq {next_seq - 1}: the database was restored from an older backup; "
        "re-read the log, then resume the session and re-send what is missing",
        session_id=session_id,
        acknowledged_next_seq=acknowledged,
        next_seq=next_seq,
    )


async def check_acknowledged(
    leases: LeaseManager, holder: LeaseHolder, acknowledged: int | None, next_seq: int
) -> None:
    """Refuse the lease's holder (ACKNOWLEDGED_PAST_LOG), its lease released, when it saw events
    acknowledged past `next_seq`, the log's next seq; a writer that says nothing (None) passes."""
    if acknowledged is None or acknowledged <= next_seq:
        return
    await leases.release(holder)
    raise acknowledged_past_log(holder.session_id, acknowledged, next_seq)


__all__ = ["acknowledged_past_log", "check_acknowledged"]
