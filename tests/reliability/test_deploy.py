"""deploy/ as shipped starts (issue 11 §5), tested with what this machine has (no Docker).

- The compose file's two sessionlog services run with their environment as written (only the
  database host and the published port are pointed at local services) and the Dockerfile's
  command, started together on a fresh PostgreSQL database: both come up (the tokens let them
  listen on 0.0.0.0; migrations are serialised), and a writer on one is read on the other.
- A wheel built from the repository, installed with its dependencies in a fresh venv outside
  the checkout (no system site-packages, so a missing dependency fails here), runs
  `sessionlog db upgrade` and `sessionlog serve` with nothing else: the migrations ship inside.
  The pip cache and the configured package mirrors keep it fast.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy.engine import make_url

from bench.procs import free_port
from sessionlog.client import SessionLogClient
from sessionlog_server.tokens import hash_token
from tests.conftest import scratch_pg
from tests.support.events import note
from tests.support.servers import ROOT

DEMO_TOKEN = "demo-token-replace-me"  # the token deploy/compose.yaml documents


def _dockerfile_command() -> list[str]:
    """The image's CMD, as the Dockerfile writes it (exec form)."""
    for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines():
        if line.startswith("CMD "):
            return list(yaml.safe_load(line[4:]))
    raise AssertionError("the Dockerfile has no CMD")


def _wait_serving(target: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise AssertionError(f"the server exited with {proc.returncode}: {err[-2000:]}")
            try:
                health.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                return
            except grpc.RpcError:
                time.sleep(0.1)
    raise AssertionError(f"no server on {target}")


def _dockerfile_healthcheck() -> list[str]:
    """The image's HEALTHCHECK command, as the Dockerfile writes it (exec form, after CMD)."""
    for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines():
        if line.startswith("HEALTHCHECK "):
            return list(yaml.safe_load(line[line.index(" CMD ") + 5 :]))
    raise AssertionError("the Dockerfile has no HEALTHCHECK")


def _probe(command: list[str], target: str) -> subprocess.CompletedProcess[str]:
    """A healthcheck `command` (exec form, `sessionlog ...`) run against `target`."""
    assert command[0] == "sessionlog", command
    env = {**os.environ, "SESSIONLOG_SERVER": target}
    return subprocess.run(
        [sys.executable, "-m", "sessionlog", *command[1:]],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _stop(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    return [proc.wait(timeout=60) for proc in procs]


@pytest.fixture
def fresh_pg() -> Iterator[str]:
    with scratch_pg("sessionlog_deploy") as url:
        yield url


def test_the_compose_services_start_together_as_written(fresh_pg: str) -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = [s for name, s in compose["services"].items() if name.startswith("sessionlog")]
    assert len(services) == 2
    command = _dockerfile_command()
    local = make_url(fresh_pg)
    procs, targets = [], []
    try:
        for service in services:
            env = {k: str(v) for k, v in service["environment"].items()}
            assert hash_token(DEMO_TOKEN) in env["SESSIONLOG_TOKENS"]
            assert env.get("SESSIONLOG_MIGRATE", "true") != "false"  # no instance relies on another's migration
            db = make_url(env["SESSIONLOG_DB"])
            assert (db.host, db.port) == ("postgres", 5432)  # the compose service, pointed at ours:
            env["SESSIONLOG_DB"] = db.set(
                host=local.host, port=local.port, username=local.username, password=None, database=local.database
            ).render_as_string(hide_password=False)
            host, _, _ = env["SESSIONLOG_LISTEN"].rpartition(":")
            assert host == "0.0.0.0"
            port = free_port()
            env["SESSIONLOG_LISTEN"] = f"{host}:{port}"
            full_env = {**os.environ, "SESSIONLOG_METRICS_LISTEN": "", **env}
            executable = [sys.executable, "-m", "sessionlog", *command[1:]] if command[0] == "sessionlog" else command
            procs.append(subprocess.Popen(executable, env=full_env, cwd=ROOT, stderr=subprocess.PIPE))
            targets.append(f"127.0.0.1:{port}")
        for proc, target in zip(procs, targets, strict=True):
            _wait_serving(target, proc)
        # The probes as written (no token: health is open), each SERVING, exit 0.
        for service, target in zip(services, targets, strict=True):
            for probe in (service["healthcheck"]["test"][1:], _dockerfile_healthcheck()):
                answered = _probe(probe, target)
                assert (answered.returncode, answered.stdout) == (0, "SERVING\n"), answered.stderr
        sid = f"deploy-{uuid.uuid4().hex[:8]}"
        with (
            SessionLogClient(targets[0], token=DEMO_TOKEN) as first,
            SessionLogClient(targets[1], token=DEMO_TOKEN) as second,
        ):
            first.create_session(sid)
            with first.writer(sid) as writer:
                writer.append([note(1)]).result()
            assert [e.data["n"] for e in second.read_events(sid)] == [1]
    finally:
        codes = _stop(procs)
    assert codes == [0, 0]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
        cwd=out,
        timeout=300,
    )
    (built,) = out.glob("sessionlog-*.whl")
    # The default build is pure Python (setup.py compiles only with SESSIONLOG_MYPYC=1), so the
    # client installs on any platform.
    assert built.name.endswith("-py3-none-any.whl"), built.name
    return built


def test_a_wheel_installed_outside_the_checkout_upgrades_and_serves(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # Its dependencies come from the package index (the pip cache makes this quick), so a
    # dependency the wheel forgets to declare is missing here, as on a user's machine.
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"{wheel}[server]"], check=True, cwd=tmp_path, timeout=500
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONLOG_", "PYTHONPATH", "VIRTUAL_ENV"))}
    env["SESSIONLOG_METRICS_LISTEN"] = ""
    sessionlog = str(venv / "bin" / "sessionlog")
    db = f"sqlite:///{tmp_path / 'data' / 'w.db'}"
    upgraded = subprocess.run(
        [sessionlog, "db", "upgrade", "--db", db], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert upgraded.returncode == 0, upgraded.stderr[-2000:]
    port = free_port()
    proc = subprocess.Popen(
        shlex.split(f"{sessionlog} serve --db {db} --listen 127.0.0.1:{port}"),
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_serving(f"127.0.0.1:{port}", proc)
    finally:
        codes = _stop([proc])
    assert codes == [0]


def test_a_wheel_installed_where_its_data_files_are_not_under_sys_prefix_finds_its_migrations(
    wheel: Path, tmp_path: Path
) -> None:
    """A distribution's own Python (Debian's: `sys.prefix` /usr, data files under /usr/local) or
    `pip install --user` put the migrations outside `sys.prefix`; `db upgrade` and `serve` found
    none and would not start. Here the wheel goes under a prefix of its own, run by this
    interpreter (whose `sys.prefix` is elsewhere), as such an install is."""
    prefix = tmp_path / "prefix"
    # --ignore-installed: otherwise pip first uninstalls the interpreter's own (editable) install.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--ignore-installed",
            "--prefix",
            str(prefix),
            str(wheel),
        ],
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    site = sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONLOG_", "PYTHONPATH"))}
    env["PYTHONPATH"] = site
    imported = subprocess.run(
        [sys.executable, "-c", "import sessionlog_server, sys; print(sessionlog_server.__file__, sys.prefix)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert Path(imported[0]).is_relative_to(prefix), imported  # the installed copy, not the checkout
    assert not Path(imported[1]).resolve().is_relative_to(prefix.resolve()), imported
    db = f"sqlite:///{tmp_path / 'data' / 'p.db'}"
    upgraded = subprocess.run(
        [sys.executable, "-m", "sessionlog", "db", "upgrade", "--db", db],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert upgraded.returncode == 0, upgraded.stderr[-2000:]
    assert (tmp_path / "data" / "p.db").is_file()


def test_the_image_carries_every_vendored_file_the_build_script_makes() -> None:
    """The image builds the page's chart library itself (no `make` there): each file that
    scripts/build_view_assets.sh puts in the view's vendor folder (the licence included) must be
    copied into the image's vendor folder too, where the image left uPlot's licence out."""
    script = (ROOT / "scripts" / "build_view_assets.sh").read_text()
    made: set[str] = set()
    for line in script.splitlines():
        words = shlex.split(line) if line.startswith("cp ") else []
        if words and words[-1].startswith("client/sessionlog/view/vendor/"):
            named = words[-1].removeprefix("client/sessionlog/view/vendor/")
            made |= {named} if named else {Path(source).name for source in words[1:-1]}
    assert made >= {"uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE"}
    copied: set[str] = set()
    for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and words[-1].startswith("./client/sessionlog/view/vendor/"):
            named = words[-1].removeprefix("./client/sessionlog/view/vendor/")
            copied |= {named} if named else {Path(source).name for source in words[2:-1]}
    assert copied == made
