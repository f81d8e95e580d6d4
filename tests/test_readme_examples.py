"""The README's examples, run as written against a real server: the harness in a few lines,
its sequel after a crash, the asyncio harness and the command line's three commands.

Each is taken from README.md as it stands (only the address changes, to the test server's),
and run by the interpreter and the `sessionlog` command of this environment, in a directory of
its own, as a user's script would be. The server has a database of its own: the examples name
their sessions (`demo`, `s1`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionlog_server.storage.migrate import upgrade
from tests.support.servers import ROOT, ServerThread

README = (ROOT / "README.md").read_text("utf-8")
DEFAULT_TARGET = "127.0.0.1:50051"


def block(after: str, language: str, nth: int = 0) -> str:
    """The `nth` fenced `language` block after the line `after` of the README."""
    start = README.index(after)
    blocks = re.findall(rf"^```{language}\n(.*?)^```$", README[start:], flags=re.MULTILINE | re.DOTALL)
    return str(blocks[nth])


@pytest.fixture(scope="module")
def readme_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    url = f"sqlite:///{tmp_path_factory.mktemp('readme') / 'sessionlog.db'}"
    upgrade(url)
    with ServerThread(url) as server:
        yield server


def run_python(server: ServerThread, source: str, cwd: Path) -> list[str]:
    """`source` run as a script in `cwd` against `server`; its stdout lines."""
    assert DEFAULT_TARGET in source
    script = cwd / "harness.py"
    script.write_text(source.replace(DEFAULT_TARGET, server.target), "utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_harness_in_a_few_lines_and_after_a_crash(readme_server: ServerThread, tmp_path: Path) -> None:
    harness = block("## A harness in a few lines", "python")
    after_a_crash = block("### After a crash, a fork, a past request, the cost", "python")
    out = run_python(readme_server, harness + "\n" + after_a_crash, tmp_path)
    assert out[0] == "[4]"  # "[4]: 0 is the header, 1 the reserved empty system node, 2-3 the batch"
    assert out[1] == "[{'role': 'user', 'content': 'list the files'}]"
    sha256 = out[2]
    assert re.fullmatch(r"[0-9a-f]{64}", sha256) and out[3] == "0.0"
    assert out[4:9] == ["0 request/header", "1 system/message", "2 user/message", "3 turn/start", "4 turn/end"]
    # After a crash: nothing open to repair, the seed boundary at 5; the request at seq 3 is the
    # one above (no message since), under the header at seq 0; the fork cut turn 1 open.
    assert out[9:] == ["[] 6", f"{sha256} 0", "[5]", "0.0 0.0"]


def test_the_asyncio_harness(readme_server: ServerThread, tmp_path: Path) -> None:
    out = run_python(readme_server, block("`sessionlog.aio.AsyncSessionLogClient` has the same", "python"), tmp_path)
    assert out[0] == "[0]"
    assert out[1].startswith("{'events': 1,") and "'turns': 1," in out[1]


def test_the_command_line_example(readme_server: ServerThread, tmp_path: Path) -> None:
    commands = block("Bad input (a malformed line", "sh")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "SESSIONLOG_SERVER": readme_server.target,
    }
    done = subprocess.run(
        ["bash", "-e", "-c", commands], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    created, appended, history = done.stdout.splitlines()
    assert json.loads(created)["id"] == "s1"
    assert appended == "1"  # "prints 1 (seq 0 is the empty system node)"
    assert history == '{"messages":[{"role":"user","content":"hi"}]}'  # as the README's comment shows it
