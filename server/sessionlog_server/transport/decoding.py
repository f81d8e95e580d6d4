"""Requests that cannot be decoded (a corrupt protobuf, invalid UTF-8 in a string field) are
answered INVALID_ARGUMENT with reason MALFORMED_REQUEST, and logged in one line.

gRPC runs the request deserializer before any handler; when it raises, gRPC answers UNKNOWN with
the exception's class name and logs a traceback, every time. The deserializer is wrapped so that
it never raises: it hands the handler an `Undecodable` in place of the message, which the
handler wrapper (`transport/auth.py`) turns into the status, and a client stream's reader
(`read_request`) raises as the status's error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from google.protobuf.message import DecodeError

from sessionlog.core.errors import ValidationError, first_line

log = structlog.get_logger("sessionlog.rpc")


@dataclass(frozen=True, slots=True)
class Undecodable:
    """What arrived instead of a request message, and why it could not be decoded."""

    size: int
    problem: str

    def error(self) -> ValidationError:
        return ValidationError(
            "MALFORMED_REQUEST",
            f"the request message ({self.size} bytes) cannot be decoded: {self.problem}",
            size=self.size,
        )


def safe_deserializer(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """`deserialize`, returning an Undecodable instead of raising."""
    if deserialize is None:
        return None

    def decode(raw: bytes) -> Any:
        try:
            return deserialize(raw)
        except (DecodeError, UnicodeDecodeError, ValueError) as exc:
            problem = first_line(exc)
            if isinstance(exc, UnicodeDecodeError) or "utf-8" in problem.lower():
                problem = "a string field is not valid UTF-8"
            log.warning("undecodable request", size=len(raw), problem=problem)
            return Undecodable(len(raw), problem)

    return decode


def check_request(request: Any) -> None:
    """Raise the MALFORMED_REQUEST error if `request` could not be decoded."""
    if isinstance(request, Undecodable):
        raise request.error()


async def read_request(context: grpc.aio.ServicerContext) -> Any | None:
    """The next message of a client stream, or None once the client stopped sending; raises
    MALFORMED_REQUEST for a message that could not be decoded.

    Client streams are read with `context.read()`, never through the request iterator gRPC
    hands the handler: that iterator keeps the message it handed out last until the next one
    arrives, so a stream that went quiet would keep its last request, payload and all, for as
    long as it stays open (one agent's tool result of megabytes, per idle agent)."""
    message = await context.read()
    if message is grpc.aio.EOF:
        return None
    check_request(message)
    return message
