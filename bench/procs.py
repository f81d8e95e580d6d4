"""Servers and databases for the bench: `sessionlog serve` child processes, fresh PostgreSQL
databases, and /proc readings (CPU time, RSS) of the server process.

The server runs as its own process (never in the bench process) so its CPU time and peak RSS
can be read from /proc alone, and so "cold" really means a fresh interpreter.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import psycopg
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get(
    "SESSIONLOG_BENCH_PG", os.environ.get("SESSIONLOG_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
)
"""Where the bench creates (and drops) its own PostgreSQL databases, named `sessionlog_bench*`."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SERVER_PYTHON = os.environ.get("SESSIONLOG_BENCH_SERVER_PYTHON") or sys.executable
"""The interpreter the servers under test run on: `make bench` sets it to the compiled build's
venv (what the image runs); unset, the bench's own (the source tree, interpreted)."""
_BUILD_PROBE = """
import pathlib, sessionlog, sessionlog_server
print(sum(len(list(pathlib.Path(m.__file__).parent.rglob("*.so"))) for m in (sessionlog, sessionlog_server)))
"""


def server_build() -> str:
    """Which build the servers under test run: mypyc-compiled (how many modules) or interpreted."""
    out = subprocess.run([SERVER_PYTHON, "-c", _BUILD_PROBE], capture_output=True, text=True, check=True, cwd=ROOT)
    compiled = int(out.stdout.strip() or 0)
    return f"mypyc-compiled ({compiled} modules), {SERVER_PYTHON}" if compiled else f"interpreted, {SERVER_PYTHON}"


def free_port() -> int:
    """A port free now and below the kernel's ephemeral range, for a listener named before it
    starts: a bench server (the soak starts it again at the address its clients know), a test's
    server, metrics endpoint, or an address nothing listens on (tests/support/servers.py).

    Not one from port 0: that lies in the ephemeral range, where the outgoing connections of
    every process pick their local ports, and a server stopped for a restart found its port
    taken by one (once in a whole-suite run of the tests: "could not bind")."""
    low = _ephemeral_low()
    for _ in range(100):
        port = random.randrange(FIRST_NAMED_PORT, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {FIRST_NAMED_PORT} and {low} in 100 tries")


FIRST_NAMED_PORT = 10_000
"""The lowest port `free_port` names: above the well-known and most registered services'."""


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where it is not told)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


class Server:
    """`sessionlog serve` on loopback as a child process (warnings only on stderr).

    The port is chosen once, so a server killed and started again answers at the same address.
    Its stderr goes to a temporary file removed at `stop`, or, given `log_path`, is appended
    there and kept.
    """

    def __init__(
        self,
        db: str,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        wrapper: Sequence[str] = (),
    ) -> None:
        self.db = db
        self.wrapper = list(wrapper)
        """A command the server runs under (valgrind for `bench.server_instructions`), or none."""
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        # One process unless a section asks for workers (the slow writers, the soak): the
        # figures are of one event loop, and `pid` is the process that serves.
        self.env = {**os.environ, "SESSIONLOG_LOG_LEVEL": "warning", "SESSIONLOG_WORKERS": "1", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = log_path
        temporary = Path(os.environ.get("TMPDIR", "/tmp")) / f"sessionlog-bench-{os.getpid()}-{self.port}.err"
        self._stderr_path = log_path or temporary

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> Server:
        """Start and wait until the port answers (bounded by `timeout`)."""
        cmd = [*self.wrapper, SERVER_PYTHON, "-m", "sessionlog", "serve", "--db", self.db, "--listen", self.target]
        with self._stderr_path.open("ab" if self.log_path else "wb") as err:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_serving(self.proc, self.port, time.perf_counter() + timeout)
        except (RuntimeError, TimeoutError) as exc:
            log = self.stderr()[-2000:]
            self.stop()
            raise RuntimeError(f"server on {self.db} did not start: {exc}: {log}") from None
        return self

    def stderr(self) -> str:
        try:
            return self._stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (graceful), SIGKILL if it does not exit within `timeout`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        finally:
            if self.log_path is None:
                self._stderr_path.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL of the whole service (its worker processes first, then it; nothing graceful)
        and reap."""
        if self.proc is not None and self.proc.poll() is None:
            for pid in children(self.proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def kill_worker(self) -> int | None:
        """SIGKILL of one `--workers` process (the parent starts it again); its pid, or None."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        workers = self.worker_pids()
        if not workers:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(workers[0], signal.SIGKILL)
        return workers[0]

    def worker_pids(self) -> list[int]:
        """The `--workers` processes alive now (none when the service runs in one process)."""
        return worker_pids(self.pid)

    def pids(self) -> list[int]:
        """The server's processes alive now: the one started and, with `--workers`, its
        children (the workers and multiprocessing's resource tracker)."""
        return [self.pid, *children(self.pid)]

    def cpu_seconds(self, pids: list[int] | None = None) -> float:
        """User + system CPU time of the server's processes so far (`pids`, found again unless
        given: a caller reading both counters finds them once)."""
        return processes_cpu_seconds(self.pids() if pids is None else pids)

    def waiting_seconds(self, pids: list[int] | None = None) -> float:
        """How long the threads of the server's processes (`pids`, as for `cpu_seconds`) have
        been runnable but without a core (`process_waiting_seconds`)."""
        return processes_waiting_seconds(self.pids() if pids is None else pids)

    def memory_mb(self) -> dict[str, float]:
        """VmRSS and VmHWM (peak RSS) of the server process, in MB."""
        return process_memory_mb(self.pid)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_serving(proc: subprocess.Popen[bytes], port: int, deadline: float, poll: float = 0.005) -> float:
    """Wait until the server on `port` answers the standard health check with SERVING; returns
    the `time.perf_counter()` it did. Polls the port with plain TCP connects first (a gRPC
    channel would back off for a second after its first refused attempt). `deadline` is a
    `perf_counter` time; a server that exits first is a RuntimeError."""
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited during start-up (code {proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(poll)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.perf_counter() < deadline:
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1.0, wait_for_ready=True)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return time.perf_counter()
            except grpc.RpcError:
                pass
            time.sleep(poll)
    raise TimeoutError("server did not start in time")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (e.g. `serve --workers` processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def worker_pids(parent: int) -> list[int]:
    """The worker processes of a `serve --workers` parent (multiprocessing's spawned children),
    in pid order."""
    return sorted(pid for pid in children(parent) if b"spawn_main" in _cmdline(pid))


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/PID/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def process_waiting_seconds(pid: int) -> float:
    """How long the process's threads (those alive now) have waited for a core while runnable:
    the second field of /proc/PID/task/TID/schedstat, in nanoseconds. It counts the cores
    taken by other processes and by the process's own other threads (a thread woken by one
    still running waits for a core when the others are busy): where the latency goes that the
    process's CPU time does not show. 0.0 for a process that is gone."""
    waited = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        try:
            waited += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):  # the thread ended meanwhile
            continue
    return waited / 1e9


def processes_cpu_seconds(pids: list[int]) -> float:
    """`process_cpu_seconds` summed over several processes (a server and its workers)."""
    return sum(process_cpu_seconds(pid) for pid in pids)


def processes_waiting_seconds(pids: list[int]) -> float:
    """`process_waiting_seconds` summed over several processes."""
    return sum(process_waiting_seconds(pid) for pid in pids)


def machine_cpu_seconds() -> tuple[float, float]:
    """CPU seconds of all cores since boot, busy (neither idle nor waiting for I/O) and in all."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values) - idle) / CLOCK_TICKS, sum(values) / CLOCK_TICKS


def process_memory_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process, in MB (10^6 bytes)."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024 / 1e6
    return out


def pg_url(database: str) -> str:
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{database}"


def pg_available() -> bool:
    try:
        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def create_pg_database(name: str) -> str:
    """Create (or re-create) a bench-owned database; only names starting `sessionlog_bench`."""
    if not name.startswith("sessionlog_bench"):
        raise ValueError("the bench only creates and drops databases named sessionlog_bench*")
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return pg_url(name)


def drop_pg_database(name: str) -> None:
    if not name.startswith("sessionlog_bench"):
        raise ValueError("the bench only drops databases named sessionlog_bench*")
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def settle_writes(db: str) -> None:
    """Write out what earlier sections left in memory before a latency figure starts: the
    kernel's dirty pages (`os.sync`) and, where `db` (a backend's name or a database URL) is
    PostgreSQL, its dirty buffers (`CHECKPOINT`).

    The throughput figures before the latency figures write hundreds of megabytes, and their
    writeback ran on into whichever latency figure came next, competing with its commits'
    fsyncs. On PostgreSQL after 16 streams had written 96,000 events, the figure taken first
    paid for it, whichever it was (a probe of round 42, each order twice): raw psycopg's p99 at
    1,000 commits a second 94.8 ms first and 1.05 ms second, sessionlog's 43.0 ms first and 4.0
    ms second; after this, 3.0 and 3.4 ms first. The bench took sessionlog's figure first and
    the raw driver's after it, so the two were not measured alike. Takes ~0.25 s here.

    A PostgreSQL figure has its server up already, so the connection is not checked for first
    (`pg_available` would open one more): a database that went away fails the figure here."""
    os.sync()
    if db.startswith("postgresql"):
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute("CHECKPOINT")


@contextlib.contextmanager
def scratch_database(backend: str, label: str) -> Iterator[str]:
    """A fresh database for one measurement (a SQLite file under the temp dir, or a PostgreSQL
    database named `sessionlog_bench_<label>_...`), removed afterwards."""
    name = f"sessionlog_bench_{label}_{os.getpid()}_{int(time.time())}"
    if backend == "sqlite":
        path = Path(os.environ.get("TMPDIR", "/tmp")) / f"{name}.db"
        try:
            yield f"sqlite:///{path}"
        finally:
            for suffix in ("", "-wal", "-shm", ".migrate-lock", "-writer.lock"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    url = create_pg_database(name)
    try:
        yield url
    finally:
        drop_pg_database(name)


def each_backend(backends: list[str], label: str, measure: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """`measure(db)` on a scratch database of every reachable backend, by backend."""
    out: dict[str, Any] = {}
    for backend in backends:
        if backend == "postgresql" and not pg_available():
            out[backend] = {"unavailable": "PostgreSQL is not reachable"}
            continue
        with scratch_database(backend, label) as db:
            out[backend] = measure(db)
    return out


def section_main(
    argv: list[str] | None,
    prog: str,
    doc: str,
    options: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace, list[str]], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
) -> int:
    """The command line of a bench section run on its own (`python -m bench.<section>`): its
    `options`, plus `--backends` and `--json`; prints `render(results)` and writes the JSON."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    options(parser)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--json", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    results = run(args, args.backends.split(","))
    print(render(results))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def unavailable_row(backend: str, columns: int) -> str:
    """The table row of a backend a section could not measure (`columns` in all)."""
    return f"| {backend} | unavailable |" + " |" * (columns - 2)
