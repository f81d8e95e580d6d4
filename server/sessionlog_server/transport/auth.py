"""Authentication: a server interceptor that turns `authorization: Bearer <token>` into a Principal.

Each RPC handler is wrapped so the principal is bound inside the handler's own context (an
interceptor's context is not the handler's in grpc.aio). Health and reflection stay open, so
load balancers and tools can probe without a token.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from sessionlog.core.errors import Unauthenticated
from sessionlog_server.service import access
from sessionlog_server.tokens import TokenStore
from sessionlog_server.transport.decoding import Undecodable, safe_deserializer
from sessionlog_server.transport.status import log_unauthenticated, to_status

OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no types
    """Authenticates every call of sessionlog's own services against the token store."""

    def __init__(self, tokens: TokenStore) -> None:
        self.tokens = tokens

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(OPEN_SERVICES):
            return handler
        principal, error = self._authenticate(details)
        if error is not None:
            log_unauthenticated(details.method, error)
        return _wrap(handler, principal, error)

    def _authenticate(self, details: grpc.HandlerCallDetails) -> tuple[access.Principal | None, Unauthenticated | None]:
        if not self.tokens.enabled:
            return access.ANONYMOUS, None
        header = dict(details.invocation_metadata or ()).get("authorization", "")
        scheme, _, token = str(header).partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None, Unauthenticated("TOKEN_MISSING", "a bearer token is required (authorization: Bearer <token>)")
        principal = self.tokens.lookup(token.strip())
        if principal is None:
            return None, Unauthenticated("TOKEN_UNKNOWN", "the bearer token is not valid")
        return principal, None


def _wrap(handler: grpc.RpcMethodHandler, principal: access.Principal | None, error: Unauthenticated | None) -> Any:
    """The same handler, with the principal bound (or the call refused) inside its context, and
    an undecodable request answered INVALID_ARGUMENT (see `decoding`)."""

    def coroutine(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if error is not None:
                await context.abort_with_status(to_status(error))
            access.bind(principal or access.ANONYMOUS)
            if isinstance(request, Undecodable):
                await context.abort_with_status(to_status(request.error()))
            return await fn(request, context)

        return call

    def generator(fn: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if error is not None:
                await context.abort_with_status(to_status(error))
            access.bind(principal or access.ANONYMOUS)
            if isinstance(request, Undecodable):
                await context.abort_with_status(to_status(request.error()))
            async for item in fn(request, context):
                yield item

        return call

    decode = safe_deserializer(handler.request_deserializer)
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(coroutine(handler.unary_unary), decode, handler.response_serializer)
    if handler.unary_stream:
        # A streaming handler yields its responses or sends them with `context.write`; gRPC
        # tells which from the function it is given, so the wrapper is of the same kind.
        wrapped = generator if inspect.isasyncgenfunction(handler.unary_stream) else coroutine
        return grpc.unary_stream_rpc_method_handler(wrapped(handler.unary_stream), decode, handler.response_serializer)
    if handler.stream_stream:
        wrapped = generator if inspect.isasyncgenfunction(handler.stream_stream) else coroutine
        return grpc.stream_stream_rpc_method_handler(
            wrapped(handler.stream_stream), decode, handler.response_serializer
        )
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(
            coroutine(handler.stream_unary), decode, handler.response_serializer
        )
    return handler
