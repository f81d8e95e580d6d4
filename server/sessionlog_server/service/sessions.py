"""Sessions as records: create, look up (in the caller's namespace), list, count against quotas.

A create asked for again (same id, cwd and metadata: a retry after a lost answer) of a session
nothing was written to since answers with the session it made (SPEC §2); any other session under
the id is SESSION_EXISTS, saying what differs (`taken_ids.create_differences`).
"""

from __future__ import annotations

import uuid
from dataclasses import KW_ONLY, dataclass
from typing import Any

import structlog

from sessionlog.core import jsonvalue, validate
from sessionlog.core.errors import AlreadyExists, ValidationError
from sessionlog.core.limits import Limits
from sessionlog_server.service import access
from sessionlog_server.service.clock import now_ms
from sessionlog_server.service.committer import GroupCommitter
from sessionlog_server.service.page_tokens import decode_token, encode_token, request_tag, unissued_token
from sessionlog_server.service.reader import EventReader
from sessionlog_server.service.taken_ids import create_differences, session_exists
from sessionlog_server.storage.recorder import EventRecorder
from sessionlog_server.storage.records import SessionRecord

log = structlog.get_logger("sessionlog.sessions")

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass(eq=False, repr=False)
class SessionDirectory:
    """The session rows of the caller's namespace; every method checks the caller's access."""

    recorder: EventRecorder
    reader: EventReader
    committer: GroupCommitter
    limits: Limits
    _: KW_ONLY
    max_sessions_per_namespace: int

    async def create_session(
        self, session_id: str | None, cwd: str | None, metadata: dict[str, Any], metadata_text: str | None = None
    ) -> SessionRecord:
        """Create an empty session in the caller's namespace (id generated when not given).

        `metadata_text` is the metadata's JSON text as the client sent it (already parsed into
        `metadata`): stored and served byte for byte. Without it, `metadata` is serialised.
        Asked for again with the same id, cwd and metadata before anything was written to
        the session, it answers with the session it made; any other session under the id is
        SESSION_EXISTS, saying what differs, and nothing changes."""
        access.require_write("CreateSession")
        namespace = access.current().namespace
        sid = access.session_key(session_id or str(uuid.uuid4()), self.limits)
        if metadata_text is None:
            metadata_text = jsonvalue.dumps(metadata)
        validate.check_session_fields(cwd, len(metadata_text.encode("utf-8")), self.limits)
        validate.check_session_text(cwd, metadata)
        record = SessionRecord(
            id=sid,
            namespace=namespace,
            create_time=now_ms(),
            cwd=cwd,
            metadata=metadata,
            metadata_text=metadata_text,
            parent_id=None,
            fork_seq=None,
            next_seq=0,
            last_time=0,
            writer_id=None,
            epoch=0,
            lease_expires_at=None,
            open_turn=False,
        )
        try:
            return await self.committer.run_in_writer(
                self.recorder.create_session, record, quota=self.max_sessions_per_namespace
            )
        except AlreadyExists:  # SESSION_EXISTS, or INTEGRITY_ERROR: a create at once elsewhere
            pass  # read outside the handler: no await in one (docs/architecture/compiled-build.md)
        stored = await self.reader.session(sid)
        differences = create_differences(stored, record)
        if differences:
            raise session_exists(sid, "create", differences)
        log.info("create asked for again", **access.session_log_fields(sid))
        return stored

    async def get_session(self, session_id: str) -> SessionRecord:
        """The session, if it exists in the caller's namespace."""
        return await self.reader.caller_session(session_id, self.limits)

    async def list_sessions(
        self, page_size: int, page_token: str, parent_id: str | None
    ) -> tuple[list[SessionRecord], str]:
        """One page of the caller's sessions and the token of the next page ('' on the last).

        `parent_id` filters on a session, so it must be one of the caller's: a parent that does
        not exist (or is another namespace's) is SESSION_NOT_FOUND, as every call naming a
        session answers (AIP-132: a List naming a parent that does not exist is NOT_FOUND),
        where an empty page read as "it has no forks". The token continues this listing only:
        with another `parent_id`, or from a caller of another namespace, it is BAD_PAGE_TOKEN."""
        namespace = access.current().namespace
        if page_size < 0:
            raise ValidationError("BAD_PAGE_SIZE", "page_size must not be negative", field="page_size")
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        parent = None
        if parent_id is not None:
            await self.get_session(parent_id)
            parent = access.session_key(parent_id, self.limits)
        after = _decode_page_token(page_token, parent, self.limits) if page_token else None
        records = await self.reader.run(self.recorder.list_sessions, namespace, size + 1, after, parent)
        more = len(records) > size
        records = records[:size]
        token = _encode_page_token(records[-1], parent) if more else ""
        return records, token


def _encode_page_token(record: SessionRecord, parent: str | None) -> str:
    """The token of the listing after `record`: its creation time and the id its caller knows
    it by (`access.public_id`; a token is opaque, not secret, and base64 of one showed the
    service's key, `namespace:id`), tagged with the listing it continues, the caller's
    namespace and the parent filter (None for all sessions; `request_tag`)."""
    return encode_token([record.create_time, access.public_id(record.id), request_tag(parent)])


def _decode_page_token(token: str, parent: str | None, limits: Limits) -> tuple[int, str]:
    """Where the listing a token continues left off, as its creation time and the key of the
    caller's session it names (AIP-158: a token continues its own request; with another parent
    filter, or another namespace, it went on from the first listing's position). An id that is
    not a valid id (an altered token) is BAD_PAGE_TOKEN, as any token the service did not
    issue, where `session_key` would call it BAD_SESSION_ID, a field the caller did not send."""
    created, sid, tag = decode_token(token, 3)
    if type(created) is not int or not 0 <= created < 2**63 or not isinstance(sid, str):
        raise unissued_token()  # (a bool is an int to isinstance, and reached SQL as one)
    if tag != request_tag(parent):
        raise ValidationError(
            "BAD_PAGE_TOKEN",
            "page_token is not a token of this listing: it was issued for another parent_session_id, "
            "or to a caller of another namespace",
            field="page_token",
        )
    try:
        return created, access.session_key(sid, limits)
    except ValidationError:
        raise unissued_token() from None
