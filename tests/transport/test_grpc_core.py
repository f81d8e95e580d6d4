"""gRPC's options for serving processes (transport/grpc_core.py): `serve` sets them before
gRPC loads, the processes it starts inherit them, and an operator's own setting wins.

gRPC reads `GRPC_EXPERIMENTS` when its core loads, so the CLI must not load gRPC before a
command needs a connection: were it loaded at start-up, `serve --workers 1` would keep gRPC's
defaults whatever it set afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.procs import worker_pids
from sessionlog_server.transport.grpc_core import GRPC_EXPERIMENTS, SERVER_EXPERIMENTS, apply_server_experiments
from tests.support.servers import ServerProcess
from tests.support.waiting import eventually


def test_the_cli_loads_grpc_only_when_a_command_connects() -> None:
    probe = "import sys, sessionlog.cli.main; print(sorted(m for m in sys.modules if m.split('.')[0] == 'grpc'))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_apply_sets_the_servers_experiments_unless_the_environment_has_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(GRPC_EXPERIMENTS, raising=False)
    apply_server_experiments()
    assert os.environ[GRPC_EXPERIMENTS] == SERVER_EXPERIMENTS
    for own in ("", "-event_engine_client"):
        monkeypatch.setenv(GRPC_EXPERIMENTS, own)
        apply_server_experiments()
        assert os.environ[GRPC_EXPERIMENTS] == own


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
