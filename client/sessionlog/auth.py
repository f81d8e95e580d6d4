"""Client-side credentials: a bearer token on every call, TLS with a custom CA.

The token travels as `authorization: Bearer <token>` metadata, added by a channel
interceptor so it works on plain loopback channels as well as TLS ones.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc


def channel_credentials(ca_file: str | None) -> grpc.ChannelCredentials | None:
    """TLS credentials trusting `ca_file` (PEM), or None for a plain channel."""
    if not ca_file:
        return None
    pem = Path(ca_file).read_bytes()
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        # gRPC would take it, log C-level errors and fail every call with UNAVAILABLE.
        raise ValueError(f"{ca_file}: no PEM certificate in the CA file")
    return grpc.ssl_channel_credentials(root_certificates=pem)


def bearer_token(token: str | None) -> str | None:
    """The token as it is sent: surrounding whitespace removed (a token read from a file or a
    secret keeps its newline, which gRPC refuses in a header, retried as if the network had
    failed; the service strips it too), None when nothing is left. A ValueError for a token
    that holds a character no header can carry: it could never authenticate."""
    token = (token or "").strip()
    if any(not "!" <= c <= "~" for c in token):
        raise ValueError(
            "the token holds a character a header cannot carry (whitespace or a control character); "
            "pass the token alone"
        )
    return token or None


def _with_token(metadata: Any, token: str) -> list[tuple[str, str]]:
    return [*(metadata or ()), ("authorization", f"Bearer {token}")]


class _CallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, details: Any, metadata: list[tuple[str, str]]) -> None:
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = metadata
        self.credentials = details.credentials
        self.wait_for_ready = getattr(details, "wait_for_ready", None)
        self.compression = getattr(details, "compression", None)


class TokenInterceptor(  # grpc ships no types: its interceptor bases are Any
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds the bearer token to every call of a sync channel."""

    def __init__(self, token: str) -> None:
        self.token = token

    def _details(self, details: Any) -> _CallDetails:
        return _CallDetails(details, _with_token(details.metadata, self.token))

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


def _aio_details(details: Any, token: str) -> Any:
    return grpc.aio.ClientCallDetails(
        details.method,
        details.timeout,
        grpc.aio.Metadata(*_with_token(details.metadata, token)),
        details.credentials,
        details.wait_for_ready,
    )


class AioTokenUnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_aio_details(details, self.token), request)


class AioTokenUnaryStream(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_aio_details(details, self.token), request)


class AioTokenStreamStream(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(_aio_details(details, self.token), requests)


def aio_interceptors(token: str | None) -> list[Any]:
    """The asyncio interceptors that add `token` (none without a token)."""
    if not token:
        return []
    return [AioTokenUnaryUnary(token), AioTokenUnaryStream(token), AioTokenStreamStream(token)]
