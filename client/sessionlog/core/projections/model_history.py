"""Model history (SPEC §5): the messages of the surface nodes, in surface order.

The reference implementation for `at_seq` reads: a pure function of a log prefix (blobs already
resolved). `SessionFold.model_history()` keeps the same answer incrementally.
"""

from __future__ import annotations

from collections.abc import Sequence

from sessionlog.core.events import Event, JsonObject
from sessionlog.core.surface import fold_surface, surface_messages


def model_history(events: Sequence[Event], *, validate: bool = False) -> list[JsonObject]:
    """The projected messages of the surface of `events` (seqs 0..n-1), in surface order.

    `validate=False` (the default) trusts a log that was validated at append; pass True to
    re-check every surface rule on the way.
    """
    fold = fold_surface(events, validate=validate)
    return surface_messages(fold.nodes, lambda seq: events[seq])
