"""A gRPC proxy on loopback that loses answers: the call reaches the real server and is done
there, and its caller gets UNAVAILABLE instead of the answer (a connection that broke on the
way back). It forwards unary calls, the writer stream (`Write`) and the server streams (reads and
subscriptions), as bytes, so every message is the server's own, and so is every error the
server answers with (its code, message and details). A stream's lost answer is its first (a
writer's `opened`: the lease was granted, the resume written; a read's first page; a
subscription's first events or marker): the proxy then cuts the stream to the server, as a
broken connection would.

A stream may keep its first `kept` answers and lose the next (`kept` 1 on `Write`: every stream
opens, and is cut at the first acknowledgement). A lost answer's status is UNAVAILABLE, or
`code` (CANCELLED: a proxy or load balancer resetting the stream).

usage: python -m tests.support.lossy_proxy UPSTREAM METHOD [LOSSES [KEPT]]
prints `listening HOST:PORT`, then serves until stdin closes (the TypeScript client's tests).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc


class AnswerLosingProxy:
    """Forwards every call to `upstream`; the first `losses` answers to `method` (e.g.
    "ForkSession", "Write": a writer stream's `opened`, or "SubscribeEvents": a stream's first
    message) are lost after the server has made them, and kept in `lost` (serialised, in order).
    `target` names the proxy."""

    def __init__(
        self,
        upstream: str,
        method: str,
        losses: int = 1,
        kept: int = 0,
        code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
    ) -> None:
        self.method = method
        self.code = code
        self.losses = losses
        self.kept = kept
        self.calls: Counter[str] = Counter()
        self.lost: list[bytes] = []
        """The answers lost so far (the server's, serialised): what the caller never saw."""
        self._upstream = grpc.insecure_channel(upstream)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[_Forward(self)])
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.target = f"127.0.0.1:{port}"

    def forward(self, path: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        method = path.rsplit("/", 1)[-1]
        self.calls[method] += 1
        call = self._upstream.unary_unary(path, request_serializer=None, response_deserializer=None)
        try:
            answer: bytes = call(request, metadata=context.invocation_metadata(), timeout=30)
        except grpc.RpcError as exc:
            # The server's own error, as it sent it (its ErrorInfo travels in the trailers), not
            # the proxy's "Exception calling application" (UNKNOWN).
            context.set_trailing_metadata(exc.trailing_metadata())
            context.abort(exc.code(), exc.details())
        if method == self.method and self.calls[method] <= self.losses:
            self.lost.append(answer)
            context.abort(self.code, "the proxy lost the answer")
        return answer

    def forward_stream(self, path: str, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        """A writer stream, both ways (a lost one: see `_relay`; the server then takes it for a
        broken connection)."""
        call = self._upstream.stream_stream(path, request_serializer=None, response_deserializer=None)
        yield from self._relay(path, lambda metadata: call(requests, metadata=metadata), context)

    def forward_server_stream(self, path: str, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        """A read or a subscription (a lost one: see `_relay`)."""
        call = self._upstream.unary_stream(path, request_serializer=None, response_deserializer=None)
        yield from self._relay(path, lambda metadata: call(request, metadata=metadata), context)

    def _relay(self, path: str, start: Callable[[Any], Any], context: grpc.ServicerContext) -> Iterator[bytes]:
        """The server's answers to a streaming call `start`ed with the caller's metadata; a lost
        one passes the first `kept` messages and ends after the server's next (none, for a
        stream that ended without one), the stream to the server cancelled."""
        method = path.rsplit("/", 1)[-1]
        self.calls[method] += 1
        lose = method == self.method and self.calls[method] <= self.losses
        answers = start(context.invocation_metadata())
        context.add_callback(answers.cancel)  # the caller went away: so does the stream upstream
        try:
            if lose:
                for index, answer in enumerate(answers):
                    if index < self.kept:
                        yield answer
                        continue
                    self.lost.append(answer)
                    break
                answers.cancel()
                context.abort(self.code, "the proxy lost the answer")
            yield from answers
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED:
                return  # the caller went away
            context.set_trailing_metadata(exc.trailing_metadata())
            context.abort(exc.code(), exc.details())

    def close(self) -> None:
        self._server.stop(None)
        self._upstream.close()

    def __enter__(self) -> AnswerLosingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: The methods that answer one request with a stream of messages.
SERVER_STREAMS = frozenset({"ReadEvents", "SubscribeEvents"})


class _Forward(grpc.GenericRpcHandler):
    def __init__(self, proxy: AnswerLosingProxy) -> None:
        self.proxy = proxy

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        path = handler_call_details.method
        if path.endswith("/Write"):

            def stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
                return self.proxy.forward_stream(path, requests, context)

            return grpc.stream_stream_rpc_method_handler(stream)
        if path.rsplit("/", 1)[-1] in SERVER_STREAMS:

            def server_stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
                return self.proxy.forward_server_stream(path, request, context)

            return grpc.unary_stream_rpc_method_handler(server_stream)

        def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
            return self.proxy.forward(path, request, context)

        return grpc.unary_unary_rpc_method_handler(unary)


def main() -> None:
    upstream, method = sys.argv[1], sys.argv[2]
    losses = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    kept = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    with AnswerLosingProxy(upstream, method, losses, kept) as proxy:
        print("listening", proxy.target, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
