"""Exceptions -> `google.rpc.Status` (SPEC §13, AIP-193): how every error leaves the server.

Every sessionlog error travels as its gRPC code with an `ErrorInfo` detail (reason, domain
`sessionlog`, metadata) and, when a request field is at fault, a `BadRequest` detail naming it.
The code is declared by the error's class (`sessionlog.core.errors`), the reasons and their
metadata by the catalogue (`proto/sessionlog/v1/error_reason.proto`); this module only packs.
Anything else is a bug: it is logged with its traceback and reported as INTERNAL without
internals. So is a reason missing from the `ErrorReason` catalogue (error_reason.proto): the
catalogue is the contract a client switches on, and nothing outside it may be sent.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from sessionlog.core.errors import SessionLogError
from sessionlog.v1 import error_reason_pb2
from sessionlog_server.service import access

DOMAIN = "sessionlog"
CATALOGUE = frozenset(error_reason_pb2.ErrorReason.keys()) - {"ERROR_REASON_UNSPECIFIED"}
log = structlog.get_logger("sessionlog.rpc")

F = TypeVar("F", bound=Callable[..., Any])
MESSAGE_BYTES = 1024
"""Most UTF-8 bytes of an error's message on the wire (as the status's message and as its
BadRequest description). A message may echo what was refused (a header's unknown key, an
event's type), and one of 10,000 characters took the status's headers past gRPC's metadata
limit (16 KiB): the caller was told MESSAGE_TOO_LARGE, of a size it never sent, instead of the
reason. Cut, the status's headers take a few KiB at most (the message percent-encoded, the
details base64), whatever the text."""
METADATA_VALUE_BYTES = 256
"""Most UTF-8 bytes of each ErrorInfo metadata value on the wire (ids and numbers are shorter)."""

_rpc_fields: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("rpc_fields")


def note(**fields: Any) -> None:
    """Add fields (e.g. seqs) to the one log line of the current RPC. Never payloads."""
    current = _rpc_fields.get(None)
    if current is not None:
        current.update(fields)


def _log_rpc(method: str, request: Any, started: float, code: str) -> None:
    fields = {**access.log_fields(access.current()), **_rpc_fields.get({})}
    session_id = getattr(request, "session_id", None) or getattr(getattr(request, "scope", None), "session_id", None)
    if session_id:
        fields.setdefault("session_id", access.logged_id(session_id))
    log.info("rpc", method=method, status=code, latency_ms=round((time.perf_counter() - started) * 1000, 3), **fields)


def log_unauthenticated(path: str, error: SessionLogError) -> None:
    """The line of a call refused before its handler ran (no token, an unknown one): method,
    status and reason, never the token presented."""
    log.info("rpc", method=path.rpartition("/")[2], status=error.code, reason=error.reason)


def to_status(error: SessionLogError) -> grpc.Status:
    """The rich status of a sessionlog error (INTERNAL if its reason is not catalogued)."""
    if error.reason not in CATALOGUE:
        log.error("reason missing from the ErrorReason catalogue", reason=error.reason, message=error.message)
        return internal_status()
    metadata = {key: bounded(value, METADATA_VALUE_BYTES) for key, value in error.metadata.items()}
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN, metadata=metadata)
    details = [_pack(info)]
    message = bounded(error.message, MESSAGE_BYTES)
    if error.field:
        violation = error_details_pb2.BadRequest.FieldViolation(field=error.field, description=message)
        details.append(_pack(error_details_pb2.BadRequest(field_violations=[violation])))
    status = status_pb2.Status(code=getattr(code_pb2, error.code), message=message, details=details)
    return rpc_status.to_status(status)


def bounded(text: str, limit: int) -> str:
    """`text` if its UTF-8 takes at most `limit` bytes, else its start (whole characters) and how
    many characters were left out, within `limit` bytes."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    kept = raw[: limit - 40].decode("utf-8", "ignore")  # a character cut in two is dropped
    return f"{kept}… ({len(text) - len(kept)} more characters)"


def internal_status(message: str = "internal error") -> grpc.Status:
    info = error_details_pb2.ErrorInfo(reason="INTERNAL", domain=DOMAIN)
    return rpc_status.to_status(status_pb2.Status(code=code_pb2.INTERNAL, message=message, details=[_pack(info)]))


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


async def abort(context: grpc.aio.ServicerContext, exc: BaseException, method: str) -> None:
    """End the call with the status for `exc` (logging unexpected ones)."""
    if isinstance(exc, SessionLogError):
        await context.abort_with_status(to_status(access.public_error(exc)))
    log.exception("unexpected error", method=method, error=repr(exc))
    await context.abort_with_status(internal_status())


def _failure_code(exc: BaseException) -> str:
    """The status a handler's failure is logged with, its reason noted for the same line (as
    a refused token's is: the code alone does not tell a full disk from a lost connection);
    an abort already under way (the handler aborted the call itself) is raised again as it is."""
    if isinstance(exc, grpc.aio.AbortError):
        raise exc
    if not isinstance(exc, SessionLogError):
        return "INTERNAL"
    note(reason=exc.reason)
    return exc.code


def unary(method: F) -> F:
    """Map errors raised by a unary handler to rich statuses."""
    return _mapped(method)


def written(method: F) -> F:
    """Map errors raised by a streaming handler that sends its responses with `context.write`
    (rather than by yielding them) to rich statuses."""
    return _mapped(method)


def _mapped(method: F) -> F:
    """A coroutine handler whose errors end the call with their rich status (`abort`)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        started, code = time.perf_counter(), "OK"
        _rpc_fields.set({})
        try:
            with self.calls:
                return await method(self, request, context)
        except (SessionLogError, Exception) as exc:
            code = _failure_code(exc)
            await abort(context, exc, method.__name__)
        except asyncio.CancelledError:
            code = "CANCELLED"  # the caller went away, or the stop's grace ran out
            raise
        finally:
            _log_rpc(method.__name__, request, started, code)

    return wrapper  # type: ignore[return-value]


def streaming(method: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    """Map errors raised by a streaming handler to rich statuses."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        started, code = time.perf_counter(), "OK"
        _rpc_fields.set({})
        try:
            with self.calls:
                async for item in method(self, request, context):
                    yield item
        except (SessionLogError, Exception) as exc:
            code = _failure_code(exc)
            await abort(context, exc, method.__name__)
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        finally:
            _log_rpc(method.__name__, request, started, code)

    return wrapper


Handler = Callable[..., Awaitable[Any]]
