"""A gRPC proxy on loopback that loses answers: the call reaches the real server and is done
there, and its caller gets UNAVAILABLE instead of the answer (a connection that broke on the
way back). It forwards unary calls only, as bytes, so every message is the server's own, and
so is every error the server answers with (its code, message and details).

usage: python -m tests.support.lossy_proxy UPSTREAM METHOD [LOSSES]
prints `listening HOST:PORT`, then serves until stdin closes (the TypeScript client's tests).
"""

from __future__ import annotations

import sys
from collections import Counter
from concurrent import futures
from typing import Any

import grpc


class AnswerLosingProxy:
    """Forwards every unary call to `target`; the first `losses` answers to `method` (e.g.
    "ForkSession") are lost after the server has made them. `target` names the proxy."""

    def __init__(self, upstream: str, method: str, losses: int = 1) -> None:
        self.method = method
        self.losses = losses
        self.calls: Counter[str] = Counter()
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
            context.abort(grpc.StatusCode.UNAVAILABLE, "the proxy lost the answer")
        return answer

    def close(self) -> None:
        self._server.stop(None)
        self._upstream.close()

    def __enter__(self) -> AnswerLosingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Forward(grpc.GenericRpcHandler):
    def __init__(self, proxy: AnswerLosingProxy) -> None:
        self.proxy = proxy

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        path = handler_call_details.method

        def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
            return self.proxy.forward(path, request, context)

        return grpc.unary_unary_rpc_method_handler(unary)


def main() -> None:
    upstream, method = sys.argv[1], sys.argv[2]
    losses = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    with AnswerLosingProxy(upstream, method, losses) as proxy:
        print("listening", proxy.target, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
