"""The error tree shared by the pure core, the server and the clients (SPEC §13).

Every error carries a machine-readable `reason` (UPPER_SNAKE_CASE, as AIP-193 asks for
`ErrorInfo.reason`) and string `metadata`. The server maps the class to a gRPC status code and
packs reason and metadata into `google.rpc.ErrorInfo`; the client rebuilds the same class from
the reason, so callers switch on types or reasons, never on message text.
"""

from __future__ import annotations

from typing import ClassVar


class SessionLogError(Exception):
    """Base of every sessionlog error; `code` names the gRPC status it travels as."""

    code: ClassVar[str] = "INTERNAL"
    default_reason: ClassVar[str] = "INTERNAL"

    def __init__(
        self,
        reason: str | None = None,
        message: str = "",
        *,
        field: str | None = None,
        **metadata: object,
    ) -> None:
        self.reason = reason or self.default_reason
        self.message = message or self.reason
        self.field = field
        self.metadata: dict[str, str] = {k: str(v) for k, v in metadata.items() if v is not None}
        if field is not None:
            self.metadata.setdefault("field", field)
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    def located(self, where: str, **metadata: object) -> SessionLogError:
        """The same error (class, reason, metadata) told as `where: message`, with `metadata`
        added (None values left out): for a reader that knows where in its input the refused
        thing stands (a file's line and seq, an entry, a fork's leaf)."""
        given = {key: str(value) for key, value in metadata.items() if value is not None}
        return type(self)(self.reason, f"{where}: {self.message}", **{**self.metadata, **given})

    def add_detail(self, detail: str, **metadata: object) -> None:
        """Say more about the problem once it is known (something only the log can tell, looked
        up after the core refused): `: detail` after the message, and `metadata` added (None
        values left out)."""
        self.message = f"{self.message}: {detail}"
        self.args = (self.message,)
        self.metadata.update({key: str(value) for key, value in metadata.items() if value is not None})

    def name_event(self, index: int) -> None:
        """Say which event of a batch is at fault: `event_index` metadata and an `event N: `
        prefix, once (an error re-raised through several layers is named by the first)."""
        if index < 0 or "event_index" in self.metadata:
            return
        self.metadata["event_index"] = str(index)
        self.message = f"event {index}: {self.message}"
        self.args = (self.message,)


def first_line(exc: BaseException) -> str:
    """What an exception says in one line: the first line of its text, else its class name.
    For messages built from another library's errors (a driver's DETAIL and CONTEXT lines, a
    decoder's trace), which name things the reader of a one-line error does not need."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class ValidationError(SessionLogError):
    """Malformed event, bad surface op, seq or structure violation (INVALID_ARGUMENT)."""

    code = "INVALID_ARGUMENT"
    default_reason = "INVALID_ARGUMENT"


class NotFound(SessionLogError):
    """No such session or seq (NOT_FOUND)."""

    code = "NOT_FOUND"
    default_reason = "SESSION_NOT_FOUND"


def seq_not_found(session_id: str | None, seq: int | None, next_seq: int) -> NotFound:
    """SEQ_NOT_FOUND: a read at `seq`, at or past `next_seq`. Every read that names a seq past
    the head says so in these words: the projections, fork, the session page and `sessionlog
    diff` (`request_diff`, whose caller may not name the session)."""
    where = f"session {session_id!r}" if session_id is not None else "the session"
    return NotFound(
        "SEQ_NOT_FOUND", f"{where} has no seq {seq} (next seq is {next_seq})", session_id=session_id, seq=seq
    )


class AlreadyExists(SessionLogError):
    """The session id is taken (ALREADY_EXISTS)."""

    code = "ALREADY_EXISTS"
    default_reason = "SESSION_EXISTS"


class WriterHeld(SessionLogError):
    """Another live writer holds the session's lease (FAILED_PRECONDITION)."""

    code = "FAILED_PRECONDITION"
    default_reason = "WRITER_HELD"


class ExpectedSeqMismatch(SessionLogError):
    """The writer's expected next seq is not the log's next seq (FAILED_PRECONDITION)."""

    code = "FAILED_PRECONDITION"
    default_reason = "EXPECTED_SEQ_MISMATCH"


class OwnershipLost(SessionLogError):
    """The writer's lease was taken over or expired; it must reopen (ABORTED)."""

    code = "ABORTED"
    default_reason = "OWNERSHIP_LOST"


class OutOfRange(SessionLogError):
    """A seq past the end of the log where the request needs one inside it (OUT_OF_RANGE)."""

    code = "OUT_OF_RANGE"
    default_reason = "FROM_SEQ_PAST_HEAD"


def from_seq_past_head(session_id: str, from_seq: int, next_seq: int, action: str) -> OutOfRange:
    """FROM_SEQ_PAST_HEAD: a read, subscription or send (`action`: "read", "subscribe to",
    "send") of a session from a seq its log has not reached (the service's reads and
    subscriptions, `sessionlog otlp --from`)."""
    return OutOfRange(
        "FROM_SEQ_PAST_HEAD",
        f"cannot {action} session {session_id!r} from seq {from_seq}: its next seq is {next_seq}",
        session_id=session_id,
        from_seq=from_seq,
        next_seq=next_seq,
    )


class LimitExceeded(SessionLogError):
    """A size or rate limit was exceeded (RESOURCE_EXHAUSTED)."""

    code = "RESOURCE_EXHAUSTED"
    default_reason = "LIMIT_EXCEEDED"


class Unauthenticated(SessionLogError):
    """No or unknown credentials (UNAUTHENTICATED)."""

    code = "UNAUTHENTICATED"
    default_reason = "UNAUTHENTICATED"


class PermissionDenied(SessionLogError):
    """The credentials do not allow this call (PERMISSION_DENIED)."""

    code = "PERMISSION_DENIED"
    default_reason = "PERMISSION_DENIED"


class Unavailable(SessionLogError):
    """The outcome is unknown or the service is unreachable; safe to retry with event ids."""

    code = "UNAVAILABLE"
    default_reason = "UNAVAILABLE"


class WriterClosed(SessionLogError):
    """A writer's call its client's `close()` ended, or came after it (reason CANCELLED): a batch
    in flight then may or may not be in the log (re-read it). Not retryable: the client is closed.
    Told as an Unavailable before, which a harness retrying those retried on a closed client."""

    code = "CANCELLED"
    default_reason = "CANCELLED"


ERROR_CLASSES: tuple[type[SessionLogError], ...] = (
    ValidationError,
    NotFound,
    AlreadyExists,
    WriterHeld,
    ExpectedSeqMismatch,
    OwnershipLost,
    LimitExceeded,
    OutOfRange,
    Unauthenticated,
    PermissionDenied,
    Unavailable,
    WriterClosed,
)
