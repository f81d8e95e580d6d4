"""Real sessionlog servers for tests: in a thread of the test process, or as a child process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from bench.procs import free_port
from sessionlog_server.config import Settings
from sessionlog_server.transport.event_loop import loop_factory
from sessionlog_server.transport.server import RunningServer, start_server

ROOT = Path(__file__).resolve().parents[2]


class ServerThread:
    """A server on its own event loop in a background thread; it binds port 0 and `target` names
    the port it got."""

    def __init__(self, db: str, listen_override: str | None = None, **settings: Any) -> None:
        listen = listen_override or "127.0.0.1:0"
        self.settings = Settings(db=db, listen=listen, **{"metrics_listen": "", **settings})
        self.loop = loop_factory(self.settings.event_loop)()
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
        """Stop the server and its loop; again, nothing (a test's `finally` may stop a server
        its body stopped, and a stopped loop would leave the call waiting out `_run`'s minute)."""
        if not self._thread.is_alive():
            return
        self._run(self.running.stop(grace))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def hold_writer(server: ServerThread) -> threading.Event:
    """Keep the server's writer thread busy with a write of its own until the returned gate is
    set: batches are planned and queued, and none commits meanwhile."""
    gate, holding = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        gate.wait(60)

    asyncio.run_coroutine_threadsafe(server.service.committer.run_in_writer(hold), server.loop)
    assert holding.wait(10), "the writer thread never took the holding write"
    return gate


def settle_late(server: ServerThread, seconds: float) -> None:
    """Hand every outcome of the server's writer thread (each commit's, first of all) to its
    event loop `seconds` late: a loop slow to take them up, as on a loaded machine, made
    certain. The batches are durable meanwhile, not yet acknowledged or published."""
    loop = server.loop

    def late(callback: Any, *args: Any) -> None:
        loop.call_soon_threadsafe(loop.call_later, seconds, callback, *args)

    try:
        server.service.committer._deliver = late
    except AttributeError:  # the compiled build: a native class's methods cannot be replaced
        pytest.skip("the compiled build's committer cannot be made to hand its commits over late")


def planned_next_seq(server: ServerThread, sid: str) -> int:
    """The session's next seq as planned on the server, committed or not (-1: not cached)."""
    live = server.service.live.peek(sid)
    return -1 if live is None else int(live.fold.next_seq)


class ServerProcess:
    """`sessionlog serve` as a child process (for SIGKILL and restart tests).

    Every start binds the same port (`free_port`), so clients reconnect to the address they
    know; the `serving` log line says the server is up.
    """

    def __init__(self, db: str, env: dict[str, str] | None = None) -> None:
        self.db = db
        self.port = free_port()
        self.env = {**os.environ, "SESSIONLOG_LOG_LEVEL": "info", "SESSIONLOG_METRICS_LISTEN": "", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._lines: deque[str] = deque(maxlen=200)

    @property
    def log(self) -> list[str]:
        """The server's latest log lines as they are now (all of them go to
        $SESSIONLOG_TEST_SERVER_LOG if set). A copy: the reading thread appends to the lines
        while a test looks at them, and iterating them live failed with "deque mutated during
        iteration" (the copy itself runs in C, so no line is appended while it is taken)."""
        return list(self._lines)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ServerProcess:
        serving = self.launch()
        try:
            serving.result(timeout=timeout)
        except TimeoutError:
            raise TimeoutError("server did not start: " + "\n".join(self.log)) from None
        return self

    def launch(self) -> Future[int]:
        """Start the process and return at once (for tests of its start-up): the future is the
        port of its first `serving` line, or fails when it exits before one."""
        listen = f"127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "sessionlog", "serve", "--db", self.db, "--listen", listen]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        serving: Future[int] = Future()
        threading.Thread(target=self._drain, args=(self.proc, serving), daemon=True, name="server-log").start()
        return serving

    def _drain(self, proc: subprocess.Popen[bytes], serving: Future[int]) -> None:
        """Read the server's log lines as they come (so its stderr never fills up), and resolve
        `serving` with the port of its `serving` line, or fail it when the server exits first."""
        assert proc.stderr is not None
        keep = os.environ.get("SESSIONLOG_TEST_SERVER_LOG")  # set to keep every line for debugging
        with open(keep, "ab") if keep else contextlib.nullcontext() as copy:
            for raw in proc.stderr:
                if copy is not None:
                    copy.write(raw)
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self._lines.append(line)
                if not serving.done() and '"serving"' in line:
                    port = _port_of(line)
                    if port is not None:
                        serving.set_result(port)
        if not serving.done():
            serving.set_exception(RuntimeError("server exited: " + "\n".join(self.log)))

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, nothing flushed beyond what was committed."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def pause(self) -> None:
        """SIGSTOP: the service hangs rather than dies. Its connections stay open and nothing
        answers on them, not even an HTTP/2 PING (a paused VM, a host gone silent)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def unpause(self) -> None:
        """SIGCONT after `pause()` (harmless when the process is not stopped)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def terminate(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """SIGTERM (or another stop signal): graceful shutdown; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)


def _port_of(line: str) -> int | None:
    """The port in a `serving` log line, or None for a line that is not one JSON object (the
    drain must go on reading whatever comes, or the server blocks on a full stderr pipe)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    port = record.get("port") if isinstance(record, dict) else None
    return port if isinstance(port, int) else None
