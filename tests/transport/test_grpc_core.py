"""gRPC's options for serving processes (transport/grpc_core.py): `serve` sets them before
gRPC loads, the processes it starts inherit them, and an operator's own setting wins.

gRPC reads `GRPC_EXPERIMENTS` when its core loads, so the CLI must not load gRPC before a
command needs a connection: were it loaded at start-up, `serve --workers 1` would keep gRPC's
defaults whatever it set afterwards."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.procs import worker_pids
from sessionlog_server.transport.grpc_core import (
    GRPC_EXPERIMENTS,
    GRPC_VERBOSITY,
    SERVER_EXPERIMENTS,
    SERVER_VERBOSITY,
    apply_server_options,
)
from tests.security.test_tls_limits_metrics import make_certificate
from tests.support.servers import ServerProcess
from tests.support.waiting import eventually


def test_the_cli_loads_grpc_only_when_a_command_connects() -> None:
    probe = "import sys, sessionlog.cli.main; print(sorted(m for m in sys.modules if m.split('.')[0] == 'grpc'))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_apply_sets_the_servers_options_unless_the_environment_has_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value, own in (
        (GRPC_EXPERIMENTS, SERVER_EXPERIMENTS, "-event_engine_client"),
        (GRPC_VERBOSITY, SERVER_VERBOSITY, "DEBUG"),
    ):
        monkeypatch.delenv(name, raising=False)
        apply_server_options()
        assert os.environ[name] == value
        for mine in ("", own):
            monkeypatch.setenv(name, mine)
            apply_server_options()
            assert os.environ[name] == mine


def _environ(pid: int) -> dict[str, str]:
    """The environment a process was started with."""
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(entry.split("=", 1) for entry in entries if "=" in entry)


def _worker_setting(tmp_path: Path, name: str, env: dict[str, str]) -> set[str | None]:
    """`GRPC_EXPERIMENTS` as each worker of `serve --workers 2` started with (its exec'd environ)."""
    server = ServerProcess(f"sqlite:///{tmp_path / name}.db", env={"SESSIONLOG_WORKERS": "2", **env})
    if GRPC_EXPERIMENTS not in env:
        server.env.pop(GRPC_EXPERIMENTS, None)  # the suite's own process sets it (tests/__init__.py)
    server.start()
    try:
        assert server.proc is not None
        pids = eventually(lambda: worker_pids(server.proc.pid), lambda found: len(found) == 2)
        return {_environ(pid).get(GRPC_EXPERIMENTS) for pid in pids}
    finally:
        server.terminate()


def test_serve_starts_its_workers_with_the_servers_experiments(tmp_path: Path) -> None:
    assert _worker_setting(tmp_path, "unset", {}) == {SERVER_EXPERIMENTS}


def test_serve_keeps_an_operators_own_setting(tmp_path: Path) -> None:
    assert _worker_setting(tmp_path, "own", {GRPC_EXPERIMENTS: ""}) == {""}


def test_a_failed_tls_handshake_writes_no_line_that_is_not_json(tmp_path: Path) -> None:
    """The service's log is one JSON object per line (README, Configuration and deployment), and
    a log shipper parses it so. gRPC core logs through absl, which without `GRPC_VERBOSITY`
    writes its INFO lines to stderr: every plaintext client or port scanner that reached a TLS
    server added a line `I1205 ... Handshake failed with error SSL_ERROR_SSL: ...`, which anyone
    could repeat at will. `serve` sets gRPC's verbosity to ERROR unless the environment has its own."""
    key, cert = make_certificate(tmp_path)
    server = ServerProcess(
        f"sqlite:///{tmp_path / 'tls'}.db",
        env={"SESSIONLOG_WORKERS": "1", "SESSIONLOG_TLS_CERT_FILE": str(cert), "SESSIONLOG_TLS_KEY_FILE": str(key)},
    )
    server.env.pop(GRPC_VERBOSITY, None)  # the suite's own process sets it (tests/__init__.py)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as plain:
            plain.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert plain.recv(100) == b""  # the server closed it: the handshake has failed
    finally:
        server.terminate()
    assert server.log, "the server wrote no line at all"
    for line in server.log:
        assert line.startswith("{") and isinstance(json.loads(line), dict), line
