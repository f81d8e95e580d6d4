"""Whether a taken session id holds the session a create or fork makes, and if not, why not.

Creates and forks are idempotent (SPEC §2, §8): asked for again, each answers with the session
it made. Any other session under the id refuses the call with SESSION_EXISTS, which says what
differs, in its message and as ErrorInfo `differs` (the names below, comma-separated, in this
order; proto/sessionlog/v1/error_reason.proto). A harness whose retry came too late (the session
was written to since) can so tell it from a clash of ids (another cwd, another source), where
both answered "already exists".
"""

from __future__ import annotations

from sessionlog.core import jsonvalue
from sessionlog.core.errors import AlreadyExists
from sessionlog_server.storage.records import SessionRecord

Difference = tuple[str, str]
"""What differs, as its `differs` name and in words (`it was created with other metadata`)."""


def create_differences(stored: SessionRecord, wanted: SessionRecord) -> list[Difference]:
    """What makes `stored` another session than the create of `wanted` makes, as that create
    left it (empty: it is that session, to be answered again).

    The create makes the row alone: the same key (so the same namespace) and cwd, and the same
    metadata compared as canonical JSON, as a retried event's data is (`validate.check_retry`: a
    retry serialised again, in another key order or spacing, is still a retry); no parent (a
    fork is another session); and nothing written since: no event (next_seq 0) and no lease
    ever granted (epoch 0). A harness whose create lost its answer retries before it does
    anything else with the session; a session that was used, by it or another caller, cannot be
    told from another's."""
    if stored.parent_id is not None:  # a fork: its cwd, metadata and events are its source's
        return [("parent", _fork_words(stored))]
    differences: list[Difference] = []
    if stored.cwd != wanted.cwd:
        differences.append(("cwd", f"it was created with {_cwd(stored.cwd)}, this create gives {_cwd(wanted.cwd)}"))
    if jsonvalue.canonical(stored.metadata) != jsonvalue.canonical(wanted.metadata):
        differences.append(("metadata", "it was created with other metadata"))
    if stored.next_seq:
        differences.append(("events", f"it holds {stored.next_seq} events written since it was created"))
    elif stored.epoch:  # (events are written under a lease: one implies the other)
        differences.append(("lease", "a writer took its lease since it was created"))
    return differences


def fork_differences(stored: SessionRecord, wanted: SessionRecord) -> list[Difference]:
    """What makes `stored` another session than the fork of `wanted` makes (empty: it is that
    fork, to be answered again, whatever was written to it since: a fork's first events are a
    pure function of the prefix it inherits, which never changes)."""
    if stored.parent_id is None:
        return [("parent", "it is no fork")]
    if stored.parent_id != wanted.parent_id:
        return [("parent", _fork_words(stored))]
    if stored.fork_seq != wanted.fork_seq:
        return [("fork_seq", f"{_fork_words(stored)}, not {wanted.fork_seq}")]
    return []


def session_exists(session_id: str, call: str, differences: list[Difference]) -> AlreadyExists:
    """The refusal of `call` ("create", "fork") to make a session under the taken key
    `session_id`, saying what differs."""
    return AlreadyExists(
        "SESSION_EXISTS",
        f"session {session_id!r} already exists, and this {call} would not make it: "
        + "; ".join(words for _, words in differences),
        session_id=session_id,
        differs=",".join(name for name, _ in differences),
    )


def _fork_words(stored: SessionRecord) -> str:
    # `session '<key>'`, so that access.public_error tells the parent by its caller's id.
    return f"it is the fork of session {stored.parent_id!r} after seq {stored.fork_seq}"


def _cwd(cwd: str | None) -> str:
    return "no cwd" if cwd is None else f"cwd {cwd!r}"
