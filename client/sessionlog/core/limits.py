"""Size limits applied to proposed events (configurable by the service).

These defaults are the service's defaults too: `sessionlog_server.config.Settings` takes its
`max_*` defaults from `DEFAULT_LIMITS`, so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what one append may carry; over a bound is refused whole (SPEC §13)."""

    max_event_bytes: int = 64 * 1024 * 1024
    """Largest serialised `data` of one event, blobs included."""
    max_batch_events: int = 10_000
    """Most events one batch may carry."""
    max_batch_bytes: int = 128 * 1024 * 1024
    """Largest total serialised `data` of one batch."""
    max_id_chars: int = 128
    """Longest session id or eventId (SPEC §2)."""
    max_type_chars: int = 128
    """Longest event type name."""
    max_metadata_bytes: int = 64 * 1024
    """Largest serialised session metadata (listed with every session, so kept small)."""
    max_cwd_bytes: int = 4096
    """Longest session `cwd`, in UTF-8 bytes."""
    max_json_containers: int = 500_000
    """Most objects and arrays, together, in one proposed JSON value (an event's data, a reported
    header, session metadata). Decoding costs per value, not per byte, on the server's one event
    loop: 8 million `{"k":1}` in 64 MB held it ~5 s, where 64 MB of plain text takes ~0.4 s.
    At half a million the costliest shape (small objects, and one 24-digit integer that sends the
    text to the standard library's slower decoder) decodes in ~0.5 s, what the largest plain-text
    event does; a text over the limit is refused in ~0.3 s."""
    max_json_values: int = 500_000
    """Most values in the arrays and objects of one proposed JSON value, together: each array
    element and each object member counts once (the top-level value does not). Decoding costs per
    value: one object of 4.5 million keys in 63 MB held the event loop ~2.5 s, ~8 s with one
    integer past 64 bits (which sends the text to the standard library's decoder); 15.75 million
    floats ~1.7 s. The costliest shape per value is that one, an object of distinct keys with a
    big integer, and its cost grows faster than its keys (the dicts outgrow the caches): 500,000
    of them decode in ~0.55 s, what the costliest text at `max_json_containers` takes (that text
    holds about a million values, cheaper ones), where a million took ~1.35 s. A text over the
    limit is refused in ~0.35-0.5 s (63 MB); one of at most twice this many bytes is not counted."""


DEFAULT_LIMITS = Limits()
