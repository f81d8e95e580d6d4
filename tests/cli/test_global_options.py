"""The global options (`--server`, `--token`, `--ca-file`) are taken after the command too:
`sessionlog events X --server HOST:PORT` said "No such option: --server", where people put
options at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.servers import ROOT, ServerThread


def sessionlog(*args: str) -> subprocess.CompletedProcess[str]:
    """`sessionlog ARGS` with no server in the environment: only the arguments name it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONLOG_")}
    return subprocess.run(
        [sys.executable, "-m", "sessionlog", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )


def test_global_options_go_after_the_command(server: ServerThread, sid: str) -> None:
    created = sessionlog("create", "--id", sid, "--server", server.target)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["id"] == sid
    for args in (
        ("events", sid, "--server", server.target),
        ("events", sid, f"--server={server.target}", "--from", "0"),
        ("--server", "127.0.0.1:1", "events", sid, "--server", server.target),  # the last one counts
    ):
        listed = sessionlog(*args)
        assert listed.returncode == 0, (args, listed.stderr)
        assert [json.loads(line)["seq"] for line in listed.stdout.splitlines()] == [], args
    # An option's value is no option: `--cwd --server` is a cwd.
    odd = sessionlog("create", "--id", f"{sid}-2", "--cwd", "--server", "--server", server.target)
    assert odd.returncode == 0, odd.stderr
    assert json.loads(odd.stdout)["cwd"] == "--server"


def test_a_global_option_after_the_command_still_needs_its_value() -> None:
    result = sessionlog("events", "s", "--server")
    assert result.returncode == 2
    assert "'--server' requires an argument" in result.stderr, result.stderr
