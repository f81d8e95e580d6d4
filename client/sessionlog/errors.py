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
    "ACKNOWLEDGED_PAST_LOG": ExpectedSeqMismatch,
    "EXPECTED_SEQ_MISMATCH": ExpectedSeqMismatch,
    "WRITER_HELD": WriterHeld,
}

#: Codes that, without a sessionlog ErrorInfo, mean the transport failed (TRANSPORT_ERROR, an
#: Unavailable: the outcome is unknown, safe to retry with the same eventIds): the TypeScript
#: client's set (client/typescript/src/errors.ts TRANSPORT_CODES), so both say alike.
TRANSPORT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)


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
    if not reason:
        exc = _without_error_info(code, message or code.name)
    else:
        cls = _BY_REASON.get(reason) or _BY_CODE.get(code, ServerError)
        exc = cls(reason, message or code.name, **metadata)
    exc.grpc_code = code  # type: ignore[attr-defined]
    return exc


def _without_error_info(code: grpc.StatusCode, message: str) -> SessionLogError:
    """The error of a status that carries no sessionlog ErrorInfo, which the service's own errors
    always carry: gRPC or a server that is not sessionlog made it, so its code names no reason of
    the catalogue. The TypeScript client (`toSessionLogError`) maps the same codes the same way.

    - a failed transport (TRANSPORT_CODES): no server answered (UNAVAILABLE), none in time
      (DEADLINE_EXCEEDED), a stream whose server died (the asyncio client's "Internal error from
      Core", grpc/grpc#36066), a reset connection: TRANSPORT_ERROR, the outcome unknown;
    - RESOURCE_EXHAUSTED: gRPC's own message size limit (a request over the server's
      `max_message_bytes`, a response over the client's): MESSAGE_TOO_LARGE;
    - any other code (UNIMPLEMENTED from a server that is not sessionlog, ...): UNEXPECTED_STATUS,
      the code's name first in the message (and in `grpc_code`)."""
    if code in TRANSPORT_CODES:
        return Unavailable("TRANSPORT_ERROR", message)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return LimitExceeded("MESSAGE_TOO_LARGE", message)
    return ServerError("UNEXPECTED_STATUS", f"{code.name}: {message}")


def is_retryable(error: BaseException) -> bool:
    """True when the call may be retried safely (appends only with eventIds)."""
    return isinstance(error, Unavailable)
