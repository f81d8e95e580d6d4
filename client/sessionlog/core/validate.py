"""Envelope validation (SPEC §2–§3): one function per rule, each with its own reason.

These checks need nothing but the proposed event itself; rules that depend on the log so far
(seqs, surface, turn structure) live in the fold. The server, the CLI and offline tools call the
same functions, so a file that validates offline appends without surprise.
"""

from __future__ import annotations

import re

from sessionlog.core import jsonvalue, usage
from sessionlog.core.clock import check_recorded_time
from sessionlog.core.errors import LimitExceeded, ValidationError
from sessionlog.core.events import Event, NewEvent, event_id_problem
from sessionlog.core.limits import Limits
from sessionlog.core.repair import check_writer_turn_end
from sessionlog.core.vocabulary import KEPT_AS_SEEN, KNOWN_TYPES, SURFACE_TYPES, USER_MESSAGE

_TYPE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*(/[A-Za-z0-9][A-Za-z0-9._\-]*)*")
"""A type name, matched whole (`fullmatch`): `^...$` let `test/x\n` through (`$` matches before a
final line break), a type of its own that every reader printing it shows as `test/x`."""
SESSION_ID = r"[A-Za-z0-9][A-Za-z0-9._~\-]*"
"""A session id, as a regular expression (URL-safe: no `:`, which the service's keys use)."""
_SESSION_ID_PATTERN = re.compile(SESSION_ID)
"""Matched whole (`fullmatch`): `^...$` let `s1\n` through, `$` matching before a final line
break, and made it a second session beside `s1` that listings and log lines show as `s1`."""


def check_session_id(session_id: str, limits: Limits = Limits()) -> None:
    """A session id is URL-safe and at most `max_id_chars` long (SPEC §2)."""
    if not session_id or len(session_id) > limits.max_id_chars:
        raise ValidationError(
            "BAD_SESSION_ID",
            f"session id must be 1 to {limits.max_id_chars} characters",
            field="session_id",
        )
    if not _SESSION_ID_PATTERN.fullmatch(session_id):
        raise ValidationError(
            "BAD_SESSION_ID",
            f"session id {session_id!r} is not URL-safe: a letter or digit, then letters, digits, '.', '_', '~', '-'",
            field="session_id",
        )


def check_type(event: NewEvent, limits: Limits) -> None:
    """The type is a well-formed name, and known to the service unless `ignorable`."""
    if event.type in KNOWN_TYPES and len(event.type) <= limits.max_type_chars:
        return  # the vocabulary's names are well formed: no pattern to match for almost every event
    if len(event.type) > limits.max_type_chars:
        raise ValidationError("BAD_TYPE", f"event type {event.type!r} is not a valid type name", field="type")
    check_type_name(event.type)
    if event.type not in KNOWN_TYPES and not event.ignorable:
        raise ValidationError(
            "UNKNOWN_TYPE",
            f"unknown event type {event.type!r}: mark it ignorable so readers may skip it",
            field="type",
            type=event.type,
        )


def check_type_name(kind: str) -> None:
    """A type is segments of letters, digits, `.`, `_` and `-`, each starting with a letter or
    digit, joined by `/`: BAD_TYPE otherwise. The clients check it before sending (a lone
    surrogate in one raised protobuf's UnicodeEncodeError, untyped)."""
    if not _TYPE_PATTERN.fullmatch(kind):
        raise ValidationError("BAD_TYPE", f"event type {kind!r} is not a valid type name", field="type")


def check_event_id(event: NewEvent, limits: Limits) -> None:
    """An eventId, when given, is one every database stores and the wire carries
    (`events.event_id_problem`): a client would fail to encode a lone surrogate, or send U+FFFD
    in its place and make two ids one."""
    problem = None if event.event_id is None else event_id_problem(event.event_id, limits.max_id_chars)
    if problem is not None:
        raise ValidationError("BAD_EVENT_ID", problem, field="eventId")


def check_writer_id(writer_id: str | None, limits: Limits) -> None:
    """A writer id (a label; none or empty: the service picks one) is at most `max_id_chars`
    long and holds no NUL character, on every database (SPEC §7), and no lone surrogate (the
    clients check before sending: protobuf cannot encode it, or sends U+FFFD in its place)."""
    if not writer_id:
        return
    if len(writer_id) > limits.max_id_chars:
        raise ValidationError(
            "BAD_WRITER_ID", f"writer id must be at most {limits.max_id_chars} characters", field="writer_id"
        )
    if "\x00" in writer_id:
        raise ValidationError("BAD_WRITER_ID", "writer id must not contain a NUL character", field="writer_id")
    if jsonvalue.has_lone_surrogate(writer_id):
        raise ValidationError(
            "BAD_WRITER_ID",
            "writer id must not contain a lone UTF-16 surrogate (UTF-8 cannot carry it)",
            field="writer_id",
        )


_REQUEST_ID_PATTERN = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
"""A UUID in its 8-4-4-4-12 form, matched whole (`fullmatch`)."""


def check_request_id(request_id: str) -> None:
    """A grant's `request_id` (AIP-155; empty: none) is a UUID: the lease token is derived from
    it, so it must be the caller's random, per-call secret. The error does not repeat it."""
    if request_id and not _REQUEST_ID_PATTERN.fullmatch(request_id):
        raise ValidationError(
            "BAD_REQUEST_ID",
            "request_id must be a UUID (8-4-4-4-12 hexadecimal digits), made once per call and sent "
            "again on each retry of it",
            field="request_id",
        )


def check_data(event: NewEvent) -> None:
    """`data` is a JSON object."""
    if not isinstance(event.data, dict):
        raise ValidationError("DATA_NOT_OBJECT", "event data must be a JSON object", field="data")


def check_surface_fields(event: NewEvent | Event) -> None:
    """Surface types carry a surfaceOp; log-only types carry neither surfaceOp nor sources
    (a proposal, or a committed event as the fold checks it: no copy is made)."""
    if event.type in SURFACE_TYPES:
        if event.surface_op is None:
            raise ValidationError(
                "SURFACE_OP_MISSING",
                f"{event.type} is a surface type and needs a surfaceOp",
                field="surfaceOp",
            )
        return
    if event.surface_op is not None:
        raise ValidationError(
            "SURFACE_OP_NOT_ALLOWED",
            f"{event.type} is not a surface type and cannot carry a surfaceOp",
            field="surfaceOp",
        )
    if event.source_event_seqs:
        raise ValidationError(
            "SOURCES_NOT_ALLOWED",
            f"{event.type} is not a surface type and cannot carry sourceEventSeqs",
            field="sourceEventSeqs",
        )


def check_size(event: NewEvent, encoded_size: int, limits: Limits) -> None:
    """The serialised data fits in `max_event_bytes`."""
    check_event_bytes(encoded_size, limits)


def check_event_bytes(encoded_size: int, limits: Limits, what: str = "data") -> None:
    """One event's serialised data (`what`: a header report's header, which is logged as one
    event's data) fits in `max_event_bytes`."""
    if encoded_size > limits.max_event_bytes:
        raise LimitExceeded(
            "EVENT_TOO_LARGE",
            f"event {what} is {encoded_size} bytes, over the limit of {limits.max_event_bytes}",
            field=what,
            limit=limits.max_event_bytes,
            size=encoded_size,
        )


def check_batch_sizes(sizes: list[int], limits: Limits) -> None:
    """A batch's event count and data sizes (serialised bytes) are within the limits.

    Needs only the sizes, so the service checks it before parsing any payload: an oversized
    event or batch is refused before it costs a parse. The same rules run again on the parsed
    batch (`validate_batch_shape`, `check_size`, `check_batch_bytes`).
    """
    check_batch_count(len(sizes), limits)
    for index, size in enumerate(sizes):
        try:
            check_event_bytes(size, limits)
        except LimitExceeded as exc:
            exc.name_event(index)
            raise
    check_batch_bytes(sum(sizes), limits)


def check_session_fields(cwd: str | None, metadata_bytes: int, limits: Limits) -> None:
    """A session's `cwd` and serialised metadata are within their size limits."""
    cwd_bytes = len(cwd.encode("utf-8", "surrogatepass")) if cwd else 0
    if cwd_bytes > limits.max_cwd_bytes:
        raise LimitExceeded(
            "CWD_TOO_LARGE",
            f"cwd is {cwd_bytes} bytes, over the limit of {limits.max_cwd_bytes}",
            field="cwd",
            limit=limits.max_cwd_bytes,
            size=cwd_bytes,
        )
    if metadata_bytes > limits.max_metadata_bytes:
        raise LimitExceeded(
            "METADATA_TOO_LARGE",
            f"metadata is {metadata_bytes} bytes, over the limit of {limits.max_metadata_bytes}",
            field="metadata",
            limit=limits.max_metadata_bytes,
            size=metadata_bytes,
        )


def check_session_text(cwd: str | None, metadata: object) -> None:
    """A session's `cwd` and metadata hold no NUL character and no lone UTF-16 surrogate (in any
    key or string of the metadata): PostgreSQL (a text column, JSONB) cannot store them, so they
    are refused on every database alike, before the database is asked; the clients check the
    same before sending (protobuf cannot encode a lone surrogate in `cwd`)."""
    if cwd and "\x00" in cwd:
        raise ValidationError("UNSTORABLE_VALUE", "cwd must not contain a NUL character", field="cwd")
    if cwd and jsonvalue.has_lone_surrogate(cwd):
        raise ValidationError("UNSTORABLE_VALUE", "cwd must not contain a lone UTF-16 surrogate", field="cwd")
    for text in jsonvalue.strings_in(metadata):
        if "\x00" in text:
            raise ValidationError("UNSTORABLE_VALUE", "metadata must not contain a NUL character", field="metadata")
        if jsonvalue.has_lone_surrogate(text):
            raise ValidationError(
                "UNSTORABLE_VALUE", "metadata must not contain a lone UTF-16 surrogate", field="metadata"
            )


#: The message role each surface type carries; `user/message` carries any other role (user,
#: and the harness's own kinds such as Pi's bashExecution, custom or compactionSummary).
ROLE_OF_TYPE = {"system/message": "system", "assistant/message": "assistant", "tool/result": "toolResult"}


def check_message_role(event: NewEvent) -> None:
    """A surface event's `data.message.role` is there and agrees with its type (SPEC §3); a
    `user/message` kept as the model saw it (`vocabulary.KEPT_AS_SEEN`) keeps its message's own
    role, which must still be a non-empty string: a message without one is no model message, and
    its session's Pi export could not be read back."""
    if event.type not in SURFACE_TYPES:
        return
    message = event.data.get("message")
    if not isinstance(message, dict):
        return  # check_message's to refuse
    role = message.get("role")
    expected = ROLE_OF_TYPE.get(event.type)
    if not role or not isinstance(role, str):
        wanted = repr(expected) if expected is not None else "a role (a non-empty string)"
        raise ValidationError(
            "ROLE_CONTRADICTS_TYPE",
            f"a {event.type} event's message has {'no role' if role is None else f'role {role!r}'}; it needs {wanted}",
            field="data.message.role",
            type=event.type,
        )
    if _kept_as_seen(event):
        return
    # user/message carries any role but those of the other surface types.
    agrees = role == expected if expected is not None else isinstance(role, str) and role not in ROLE_OF_TYPE.values()
    if not agrees:
        wanted = repr(expected) if expected is not None else "a role other than " + ", ".join(ROLE_OF_TYPE.values())
        raise ValidationError(
            "ROLE_CONTRADICTS_TYPE",
            f"a {event.type} event's message has role {role!r}; it needs {wanted}",
            field="data.message.role",
            type=event.type,
        )


def check_message_content(event: NewEvent) -> None:
    """A surface event's `data.message.content`, when there, is a string or an array (null is
    no content, as a tool-calling OpenAI message has): a number or an object is no model
    message, and the provider refused it at the next request instead of the log at the write."""
    message = event.data.get("message") if event.type in SURFACE_TYPES else None
    content = message.get("content") if isinstance(message, dict) else None
    if content is not None and not isinstance(content, (str, list)):
        raise ValidationError(
            "BAD_MESSAGE_CONTENT",
            f"a {event.type} event's message content is {jsonvalue.kind(content)}; "
            "it must be a string or an array of content blocks",
            field="data.message.content",
            type=event.type,
        )


def check_usage(event: NewEvent) -> None:
    """No usage an event carries (`data.usage`, `data.message.usage`: both places stats read
    one) holds a negative count or cost (`usage.negative_field`): it would silently lower the
    session's cost and tokens in `stats` and `costs`. Non-finite numbers never get this far
    (`jsonvalue` refuses them as NON_FINITE_NUMBER)."""
    message = event.data.get("message")
    check_usage_at(event.data.get("usage"), "data.usage", event.type)
    check_usage_at(message.get("usage") if isinstance(message, dict) else None, "data.message.usage", event.type)


def check_usage_at(found: object, where: str, carrier: str) -> None:
    """The refusal of a usage holding a negative number (`usage.negative_field`), for a usage
    `found` at the dotted path `where` of a thing of type `carrier`; anything but an object is no
    usage and passes. `check_usage` calls it for an event; the offline Pi replay
    (`formats.pi.metrics`), which sums a file's usage without mapping it to events, for an
    entry: so the file is refused as its import would be, in the same words, by this one rule."""
    negative = usage.negative_field(found) if isinstance(found, dict) else None
    if negative is not None:
        path, value = negative
        raise ValidationError(
            "NEGATIVE_USAGE",
            f"{where}.{path} is {value!r}: token counts and costs cannot be negative",
            field=f"{where}.{path}",
            type=carrier,
        )


def _kept_as_seen(event: NewEvent) -> bool:
    """A `user/message` carrying, unchanged, a message its model saw outside the turn structure."""
    source = event.data.get("source") if event.type == USER_MESSAGE else None
    return isinstance(source, dict) and source.get("kind") in KEPT_AS_SEEN


def validate_envelope(event: NewEvent, encoded_size: int, limits: Limits = Limits()) -> None:
    """Every rule that depends on the proposed event alone."""
    check_type(event, limits)
    check_event_id(event, limits)
    check_data(event)
    check_recorded_time(event.data)
    check_surface_fields(event)
    check_message_role(event)
    check_message_content(event)
    check_usage(event)
    check_size(event, encoded_size, limits)


def data_size(event: NewEvent) -> int:
    """The bytes of `event.data` as a client sends it (`jsonvalue.dumps_bytes`): what the size
    limits count, for an event that is not read from the wire."""
    return len(jsonvalue.dumps_bytes(event.data))


def validate_proposal(event: NewEvent, encoded_size: int | None = None, limits: Limits = Limits()) -> None:
    """Every rule the service applies to one proposed event before folding it: the envelope's
    (`validate_envelope`) and the turn-end kinds only repair and fork write. The server's append
    and the offline readers of exports call this one function, so they cannot disagree. The
    server gives the size the data had on the wire; offline, it is `data_size`."""
    validate_envelope(event, data_size(event) if encoded_size is None else encoded_size, limits)
    check_writer_turn_end(event)


def check_batch_count(count: int, limits: Limits) -> None:
    """A batch carries at most `max_batch_events` events."""
    if count > limits.max_batch_events:
        raise LimitExceeded(
            "BATCH_TOO_LARGE",
            f"batch has {count} events, over the limit of {limits.max_batch_events}",
            field="events",
            limit=limits.max_batch_events,
        )


def check_batch_bytes(total: int, limits: Limits) -> None:
    """The batch's serialised data, all events together, fits in `max_batch_bytes`."""
    if total > limits.max_batch_bytes:
        raise LimitExceeded(
            "BATCH_TOO_LARGE",
            f"batch data is {total} bytes, over the limit of {limits.max_batch_bytes}",
            field="events",
            limit=limits.max_batch_bytes,
            size=total,
        )


def check_retry(proposal: NewEvent, stored: Event) -> None:
    """A proposal whose eventId the log holds must be that event sent again (a retry), else
    EVENT_ID_REUSED: answered with the stored event's seq, a different event would be
    acknowledged and never stored. Data is compared as canonical JSON, so a retry serialised
    again (other key order or spacing) is still a retry."""
    same = (
        proposal.type == stored.type
        and proposal.ignorable == stored.ignorable
        and proposal.surface_op == stored.surface_op
        and tuple(proposal.source_event_seqs) == tuple(stored.source_event_seqs)
        and jsonvalue.canonical(proposal.data) == jsonvalue.canonical(stored.data)
    )
    if not same:
        raise ValidationError(
            "EVENT_ID_REUSED",
            f"eventId {proposal.event_id!r} names the {stored.type} at seq {stored.seq}, a different event; "
            "a new event needs an id not used in the session (nothing of the batch was written)",
            field="eventId",
            seq=stored.seq,
        )


def validate_batch_shape(events: list[NewEvent], limits: Limits = Limits()) -> None:
    """A batch is non-empty, within the count limit, and uses each eventId once."""
    if not events:
        raise ValidationError("EMPTY_BATCH", "a batch must carry at least one event", field="events")
    check_batch_count(len(events), limits)
    seen: set[str] = set()
    for index, event in enumerate(events):
        if event.event_id is None:
            continue
        if event.event_id in seen:
            raise ValidationError(
                "DUPLICATE_EVENT_ID_IN_BATCH",
                f"eventId {event.event_id!r} appears twice in one batch (event {index})",
                field="eventId",
            )
        seen.add(event.event_id)
