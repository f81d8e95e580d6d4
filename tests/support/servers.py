"""Real sessionlog servers for tests: in a thread of the test process, or as a child process."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sessionlog_server.config import Settings
from sessionlog_server.transport.server import RunningServer, start_server

ROOT = Path(__file__).resolve().parents[2]


class ServerThread:
    """A server on its own event loop in a background thread, bound to a free loopback port."""

    def __init__(self, db: str, listen_override: str | None = None, **settings: Any) -> None:
        listen = listen_override or "127.0.0.1:0"
        self.settings = Settings(db=db, listen=listen, **{"metrics_listen": "", **settings})
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="test-server")
        self._thread.start()
        self.running: RunningServer = self._run(start_server(self.settings))
        self.target = f"127.0.0.1:{self.running.port}"

    def _run(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout=60)

    @property
    def service(self) -> Any:
        return self.running.service

    def call(self, coro: Any) -> Any:
        """Run a coroutine on the server's loop (to reach the service directly)."""
        return self._run(coro)

    def stop(self, grace: float = 5.0) -> None:
        self._run(self.running.stop(grace))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """`sessionlog serve` as a child process (for SIGKILL and restart tests)."""

    def __init__(self, db: str, port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.db = db
        self.port = port or free_port()
        self.target = f"127.0.0.1:{self.port}"
        level = "info" if os.environ.get("SESSIONLOG_TEST_SERVER_LOG") else "warning"
        self.env = {**os.environ, "SESSIONLOG_LOG_LEVEL": level, "SESSIONLOG_METRICS_LISTEN": "", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> ServerProcess:
        cmd = [sys.executable, "-m", "sessionlog", "serve", "--db", self.db, "--listen", self.target]
        log_path = os.environ.get("SESSIONLOG_TEST_SERVER_LOG")  # set to keep the server's logs for debugging
        stderr = open(log_path, "ab") if log_path else subprocess.PIPE  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")
                try:
                    health.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                    return self
                except grpc.RpcError:
                    time.sleep(0.05)
        raise TimeoutError("server did not start")

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, nothing flushed beyond what was committed."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def terminate(self) -> int:
        """SIGTERM: graceful shutdown; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)
