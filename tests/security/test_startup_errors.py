"""Start-up and configuration errors print one line that says what is wrong, and exit non-zero
(issue 11 §3, §5): a tokens file listing a hash twice, a bad setting, 0.0.0.0 without tokens,
a port in use, a CA file that is not there."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from bench.procs import free_port
from sessionlog_server.tokens import hash_token
from tests.security.test_tls_limits_metrics import make_certificate
from tests.support.servers import ROOT


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessionlog", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "SESSIONLOG_METRICS_LISTEN": "", **(env or {})},
        timeout=60,
    )


def _one_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit non-zero, with the error as the last stderr line and no traceback (log lines of the
    start-up before the failure, e.g. migrations, may come first)."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("sessionlog: error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_a_tokens_file_listing_a_hash_twice_refuses_to_start(tmp_path: Path) -> None:
    digest = hash_token("t1")
    tokens = tmp_path / "tokens.jsonl"
    tokens.write_text(
        f'{{"sha256":"{digest}","namespace":"a"}}\n\n{{"sha256":"{digest}","namespace":"b","readOnly":true}}\n'
    )
    result = _run(
        "serve", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--listen", "127.0.0.1:0",
        env={"SESSIONLOG_TOKENS_FILE": str(tokens)},
    )  # fmt: skip
    _one_line(result, f"{tokens} line 3", f"{tokens} line 1")


def test_a_namespace_that_leaves_no_room_for_session_ids_is_refused(tmp_path: Path) -> None:
    # A 130-character namespace was served, and every CreateSession then failed with "session
    # ids of namespace '...' may be at most 0 characters"; an empty one came out of `token new`
    # as a line the server refused.
    long = "n" * 92  # 92 + ":" + a generated id (a UUID, 36 characters) is over the 128 of a key
    tokens = tmp_path / "tokens.jsonl"
    tokens.write_text(f'{{"sha256":"{hash_token("t1")}","namespace":"{long}"}}\n')
    result = _run(
        "serve", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--listen", "127.0.0.1:0",
        env={"SESSIONLOG_TOKENS_FILE": str(tokens)},
    )  # fmt: skip
    _one_line(result, f"{tokens} line 1", "at most 91 characters", "(it has 92)")
    for namespace, needle in [(long, "at most 91 characters"), ("", "non-empty")]:
        made = _run("token", "new", "--namespace", namespace)
        _one_line(made, needle)
        assert made.returncode == 2 and "token:" not in made.stdout


def test_configuration_errors_are_one_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    _one_line(_run("serve", "--db", db, env={"SESSIONLOG_LEASE_TTL_MS": "soon"}), "SESSIONLOG_LEASE_TTL_MS")
    _one_line(_run("serve", "--db", db, "--listen", "0.0.0.0:0"), "without bearer tokens")
    _one_line(_run("serve", "--db", db, "--workers", "2", env={"SESSIONLOG_EVENT_LOOP": "tokio"}), "'tokio'", "uvloop")
    _one_line(_run("serve", "--db", db, "--workers", "2", env={"SESSIONLOG_GC_THRESHOLDS": "fast"}), "'fast'", "YOUNG")
    _one_line(_run("serve", "--db", db, "--listen", "localhost"), "--listen", "'localhost'", "HOST:PORT")
    _one_line(_run("serve", "--db", db, "--listen", "127.0.0.1:65536"), "'127.0.0.1:65536'", "HOST:PORT")
    _one_line(_run("serve", "--db", db, env={"SESSIONLOG_METRICS_LISTEN": "9464"}), "SESSIONLOG_METRICS_LISTEN")
    otlp = {"SESSIONLOG_OTLP_ENDPOINT": "notaurl"}
    _one_line(_run("serve", "--db", db, "--listen", "127.0.0.1:0", env=otlp), "SESSIONLOG_OTLP_ENDPOINT", "'notaurl'")
    assert not (tmp_path / "x.db").exists()
    _one_line(_run("--ca-file", str(tmp_path / "missing-ca.pem"), "sessions"), "missing-ca.pem")
    _one_line(_run("db", "upgrade", "--db", "postgresql://nobody@127.0.0.1:1/none"), "check --db or SESSIONLOG_DB")


def test_an_unsupported_database_url_is_one_line_naming_the_schemes() -> None:
    """A scheme the service has no driver for is refused by name, not a ModuleNotFoundError."""
    for command in (("db", "upgrade"), ("serve", "--listen", "127.0.0.1:0")):
        _one_line(_run(*command, "--db", "mysql://x/y"), "'mysql'", "sqlite:///", "postgresql://")
    _one_line(_run("db", "upgrade", "--db", "postgresql+asyncpg://x/y"), "'postgresql+asyncpg'", "sqlite:///")


def test_a_port_in_use_is_refused_before_the_database_is_touched(tmp_path: Path) -> None:
    """Alone or with workers, a service that cannot have its address says which, and neither
    creates nor migrates the database it was pointed at."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        for workers in ("1", "2"):
            db = tmp_path / f"workers-{workers}.db"
            # With workers the parent waits out the shutdown grace (+5 s) for a killed
            # service's workers to leave; a grace of 0 keeps that wait short here.
            env = {"SESSIONLOG_WORKERS": workers, "SESSIONLOG_SHUTDOWN_GRACE_S": "0"}
            result = _run("serve", "--db", f"sqlite:///{db}", "--listen", address, env=env)
            _one_line(result, f"could not bind {address}")
            assert not db.exists(), workers
            assert "Running upgrade" not in result.stderr


def test_serving_an_unmigrated_database_without_migrating_refuses_to_start(tmp_path: Path) -> None:
    # Served anyway, every call failed with STORAGE_UNAVAILABLE, which clients retry.
    missing, empty = tmp_path / "missing.db", tmp_path / "empty.db"
    empty.touch()
    for db, found in ((missing, "does not exist"), (empty, "never migrated")):
        for workers in ("1", "2"):
            result = _run(
                "serve", "--db", f"sqlite:///{db}", "--listen", "127.0.0.1:0", "--no-migrate", "--workers", workers
            )
            _one_line(result, found, "sessionlog db upgrade", "--no-migrate")
    # Migrations turned off by the environment: the message said "serve without --no-migrate",
    # a flag the operator never gave; it names the variable too.
    result = _run("serve", "--db", f"sqlite:///{empty}", "--listen", "127.0.0.1:0", env={"SESSIONLOG_MIGRATE": "false"})
    _one_line(result, "never migrated", "sessionlog db upgrade", "SESSIONLOG_MIGRATE")
    assert not missing.exists()  # nothing created
    upgraded = _run("db", "upgrade", "--db", f"sqlite:///{empty}")
    assert upgraded.returncode == 0, upgraded.stderr


def test_an_unmigrated_postgresql_database_is_named_by_the_url_the_operator_passed() -> None:
    """Not the URL rewritten for the driver (`postgresql+psycopg://`), which the operator never
    wrote; the password masked, as before."""
    from tests.conftest import PG_ADMIN_URL, scratch_pg

    with scratch_pg("sessionlog_unmigrated") as scratch:
        name = scratch.rsplit("/", 1)[1]
        host = PG_ADMIN_URL.split("@", 1)[1].rsplit("/", 1)[0]
        for scheme in ("postgresql", "postgres"):
            url = f"{scheme}://postgres:pw-7d1e@{host}/{name}"
            for workers in ("1", "2"):
                result = _run("serve", "--db", url, "--listen", "127.0.0.1:0", "--no-migrate", "--workers", workers)
                _one_line(result, f"the database {scheme}://postgres:***@{host}/{name} is at", "never migrated")
                assert "+psycopg" not in result.stderr and "pw-7d1e" not in result.stderr, result.stderr


def test_a_negative_worker_count_refuses_to_start(tmp_path: Path) -> None:
    result = _run("serve", "--db", f"sqlite:///{tmp_path / 'x.db'}", "--listen", "127.0.0.1:0", "--workers", "-1")
    _one_line(result, "SESSIONLOG_WORKERS=-1 must be at least 0")


def test_the_serving_line_names_no_metrics_address_it_could_not_take(tmp_path: Path) -> None:
    # Named anyway, it sent whoever read the log to the other server's session pages.
    from tests.support.servers import ServerProcess

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        server = ServerProcess(f"sqlite:///{tmp_path / 'm.db'}", env={"SESSIONLOG_METRICS_LISTEN": busy}).start()
        try:
            lines = [json.loads(line) for line in server.log if line.startswith("{")]
            warned = [line for line in lines if line.get("event") == "metrics endpoint not started"]
            serving = [line for line in lines if line.get("event") == "serving"]
            assert warned and warned[0]["listen"] == busy
            assert serving and serving[0]["metrics"] is None
        finally:
            server.kill()


def test_the_serving_line_names_the_metrics_port_it_bound(tmp_path: Path) -> None:
    # With port 0 it said "127.0.0.1:0", and nothing told the operator where the listener was.
    from tests.support.servers import ServerProcess

    server = ServerProcess(f"sqlite:///{tmp_path / 'm0.db'}", env={"SESSIONLOG_METRICS_LISTEN": "127.0.0.1:0"}).start()
    try:
        serving = [json.loads(line) for line in server.log if line.startswith("{") and '"serving"' in line]
        host, _, port = serving[0]["metrics"].rpartition(":")
        assert host == "127.0.0.1" and int(port) > 0, serving[0]
        with urllib.request.urlopen(f"http://{serving[0]['metrics']}/metrics", timeout=10) as response:
            assert response.status == 200 and b"sessionlog_" in response.read()
    finally:
        server.kill()


def test_the_serving_line_says_where_otlp_traces_go(tmp_path: Path) -> None:
    """Named with its password masked, as the database URL is; null when the export is off."""
    from tests.support.servers import ServerProcess

    endpoint = f"http://otel:s3cr3t-pw@127.0.0.1:{free_port()}/v1/traces"
    for env, expected in (
        ({"SESSIONLOG_OTLP_ENDPOINT": endpoint}, endpoint.replace(":s3cr3t-pw@", ":***@")),
        ({}, None),
    ):
        server = ServerProcess(f"sqlite:///{tmp_path / 'otlp.db'}", env=env).start()
        try:
            serving = [json.loads(line) for line in server.log if line.startswith("{") and '"serving"' in line]
            assert serving[0]["otlp"] == expected, serving[0]
            assert "s3cr3t-pw" not in "\n".join(server.log)
        finally:
            server.kill()


def test_access_errors_refuse_to_start_before_any_worker_starts(tmp_path: Path) -> None:
    # With several workers (`serve`'s default on a machine of two cores or more) these were
    # found by each worker as it started: each died with a traceback and was started again,
    # once a second, and `serve` never exited (the Dockerfile's 0.0.0.0 without tokens did so).
    db = f"sqlite:///{tmp_path / 'x.db'}"
    workers = ("serve", "--db", db, "--workers", "2")
    _one_line(_run(*workers, "--listen", "0.0.0.0:0"), "without bearer tokens")
    missing = tmp_path / "tokens.jsonl"
    _one_line(_run(*workers, "--listen", "127.0.0.1:0", env={"SESSIONLOG_TOKENS_FILE": str(missing)}), str(missing))
    no_cert = {"SESSIONLOG_TLS_CERT_FILE": str(tmp_path / "cert.pem"), "SESSIONLOG_TLS_KEY_FILE": str(missing)}
    _one_line(_run(*workers, "--listen", "127.0.0.1:0", env=no_cert), str(missing))


def test_a_certificate_and_key_that_are_no_pair_refuse_to_start_naming_both(tmp_path: Path) -> None:
    # gRPC found out only as it bound: its own log lines, then "could not bind: the port is in
    # use"; with workers each died and was started again, and `serve` never exited.
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    _, cert = make_certificate(tmp_path / "one")
    other_key, _ = make_certificate(tmp_path / "two")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    db = f"sqlite:///{tmp_path / 'x.db'}"
    for workers in ("1", "2"):
        for cert_file, key_file, said in [(cert, other_key, "KEY_VALUES_MISMATCH"), (garbage, other_key, "PEM")]:
            env = {"SESSIONLOG_TLS_CERT_FILE": str(cert_file), "SESSIONLOG_TLS_KEY_FILE": str(key_file)}
            done = _run("serve", "--db", db, "--workers", workers, "--listen", "127.0.0.1:0", env=env)
            _one_line(done, f"SESSIONLOG_TLS_CERT_FILE ({cert_file}) and SESSIONLOG_TLS_KEY_FILE ({key_file})", said)
            assert done.returncode == 2 and "could not bind" not in done.stderr


def test_a_migration_chain_other_than_this_versions_is_one_line(tmp_path: Path) -> None:
    """SESSIONLOG_MIGRATIONS_DIR naming a chain Alembic cannot follow (two heads: Alembic's own
    error, which the command line names without loading Alembic up front) or one that ends at
    another revision than this server's schema: one line each, and nothing served."""
    chain = tmp_path / "migrations"
    (chain / "versions").mkdir(parents=True)
    (chain / "env.py").write_text((ROOT / "migrations" / "env.py").read_text())
    first = (ROOT / "migrations" / "versions" / "0001_initial.py").read_text()
    (chain / "versions" / "0001_initial.py").write_text(first)
    (chain / "versions" / "0002_other.py").write_text(first.replace('revision: str = "0001"', 'revision: str = "0002"'))
    env = {"SESSIONLOG_MIGRATIONS_DIR": str(chain)}
    two_heads = _run("db", "upgrade", "--db", f"sqlite:///{tmp_path / 'two.db'}", env=env)
    assert two_heads.returncode == 2
    _one_line(two_heads, "Multiple head revisions are present")
    (chain / "versions" / "0002_other.py").unlink()
    short = _run("serve", "--db", f"sqlite:///{tmp_path / 'short.db'}", "--listen", "127.0.0.1:0", env=env)
    assert short.returncode == 2
    _one_line(short, f"the migrations in {chain} end at schema revision 0001, but this server needs")
