"""Rebuild sessionlog errors from gRPC errors, by the ErrorInfo reason the server sends.

Callers catch `WriterHeld`, `OwnershipLost`, ... exactly as the server raised them; nothing
here matches on message text.
"""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from sessionlog.core.errors import (
    AlreadyExists,
    ExpectedSeqMismatch,
    LimitExceeded,
    NotFound,
    OutOfRange,
    OwnershipLost,
    PermissionDenied,
    SessionLogError,
    Unauthenticated,
    Unavailable,
    ValidationError,
    WriterHeld,
)

_BY_CODE: dict[grpc.StatusCode, type[SessionLogError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: ValidationError,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: WriterHeld,
    grpc.StatusCode.ABORTED: OwnershipLost,
    grpc.StatusCode.RESOURCE_EXHAUSTED: LimitExceeded,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRange,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
}

_BY_REASON: dict[str, type[SessionLogError]] = {
    "EXPECTED_SEQ_MISMATCH": ExpectedSeqMismatch,
    "WRITER_HELD": WriterHeld,
}

#: Codes after which the outcome is unknown or transient: safe to retry with the same eventIds.
RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
#: Codes gRPC itself reports for a failed transport (with no sessionlog ErrorInfo): TRANSPORT_ERROR.
TRANSPORT_CODES = RETRYABLE_CODES | {grpc.StatusCode.INTERNAL}


class ServerError(SessionLogError):
    """A status the server sent that maps to no sessionlog error (e.g. INTERNAL)."""


def from_rpc_error(error: grpc.RpcError) -> SessionLogError:
    """The sessionlog error a gRPC error stands for."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = error.details() if hasattr(error, "details") else str(error)
    reason, metadata = "", {}
    try:
        status = rpc_status.from_call(error)
    except (ValueError, AttributeError, TypeError):
        status = None
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason, metadata = info.reason, dict(info.metadata)
    if code in TRANSPORT_CODES and not reason:
        # The service's own errors always carry an ErrorInfo. Without one, gRPC made the status
        # itself: no server answered (UNAVAILABLE), none answered in time (DEADLINE_EXCEEDED), or
        # the asyncio client reports a write on a stream whose server died as "Internal error
        # from Core" (grpc/grpc#36066). The outcome is unknown; the reason is the catalogue's
        # TRANSPORT_ERROR, as the TypeScript client reports it, not the code's name.
        exc: SessionLogError = Unavailable("TRANSPORT_ERROR", message or code.name)
        exc.grpc_code = code  # type: ignore[attr-defined]
        return exc
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code, ServerError)
    exc = cls(reason or code.name, message or code.name, **metadata)
    exc.grpc_code = code  # type: ignore[attr-defined]
    return exc


def is_retryable(error: BaseException) -> bool:
    """True when the call may be retried safely (appends only with eventIds)."""
    return isinstance(error, Unavailable)
