"""What a retried call must be told again, as the service's first answer said it."""

from __future__ import annotations

from typing import Any

from sessionlog.v1 import session_service_pb2 as pb


def resume_answer(resumed: pb.ResumeSessionResponse) -> tuple[Any, ...]:
    """A resume's answer as a retry of it must repeat it: the repairs it wrote, its end-seed, the
    next seq and the last turn (the lease differs: a retry takes it again at a new epoch)."""
    return (list(resumed.repair_seqs), resumed.end_seed_seq, resumed.next_seq, resumed.last_turn)
