"""A Pi file whose text holds a lone UTF-16 surrogate escape (issue 11 §1).

Pi writes session lines with JSON.stringify, which writes a lone surrogate (a model's broken
emoji) as the escape `\\ud83d`, and reads them back with JSON.parse, which keeps it in the string
it sends on to the model. The judge is Pi's own context (fixtures/pi-generated/oracle) of the
same file, with the same character added to the same message: Pi copies messages into its
context unchanged. Offline replay, our buildSessionContext, import through a server and every
projection of the imported session must all accept and keep it.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from sessionlog.client import SessionLogClient
from sessionlog.core.formats.pi.context import session_context
from sessionlog.core.formats.pi.load import load_pi_bytes
from sessionlog.core.formats.pi.tree import PiTree
from tests.formats.test_transfer_cli import app, imported
from tests.support.fixtures import oracle as pi_oracle
from tests.support.fixtures import pi_generated_sessions
from tests.support.servers import ROOT

LONE = "\ud83d"


def _user_text(message: dict[str, Any]) -> str | None:
    content = message.get("content")
    if isinstance(content, str):
        return content
    for block in content or []:
        if block.get("type") == "text":
            return str(block["text"])
    return None


def _with_lone_surrogate(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A copy of a Pi fixture with a lone surrogate escape added to one user message's text, and
    Pi's context for it (the oracle's, with the same character added)."""
    session = pi_generated_sessions()[0]
    expected = copy.deepcopy(pi_oracle(session)["defaultContext"])
    message = next(m for m in expected["messages"] if m["role"] == "user" and _user_text(m))
    text = _user_text(message)
    assert text is not None
    escaped = json.dumps(text, ensure_ascii=False)  # as JSON.stringify writes it
    raw = session.read_bytes().decode("utf-8")
    needle = f'"text":{escaped}' if f'"text":{escaped}' in raw else f'"content":{escaped}'
    assert needle in raw
    raw = raw.replace(needle, needle[:-1] + '\\ud83d"', 1)
    if isinstance(message["content"], str):
        message["content"] += LONE
    else:
        block = next(b for b in message["content"] if b.get("type") == "text")
        block["text"] += LONE
    out = tmp_path / session.name
    out.write_bytes(raw.encode("utf-8"))
    return out, expected


def test_replay_and_our_context_accept_and_keep_the_lone_surrogate(tmp_path: Path) -> None:
    path, expected = _with_lone_surrogate(tmp_path)
    tree = PiTree(load_pi_bytes(path.read_bytes()).entries)
    assert session_context(tree)["messages"] == expected["messages"]
    for extra in ([], ["--lenient"]):
        replay = subprocess.run(
            [sys.executable, "-m", "sessionlog", "replay", str(path), *extra],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert replay.returncode == 0, replay.stderr


def test_import_serves_the_lone_surrogate_from_every_projection(
    cli: CliRunner,
    client: SessionLogClient,
    sid: str,
    tmp_path: Path,
) -> None:
    path, expected = _with_lone_surrogate(tmp_path)
    main = imported(cli, str(path), "--id", sid)[0]["id"]  # the edited file, not the fixture's session
    assert client.model_history(main) == expected["messages"]
    request = client.request(main)
    assert request["request"]["messages"] == expected["messages"]
    assert any(LONE in json.dumps(row, ensure_ascii=False) for row in client.transcript(main))
    assert client.stats(main)["messages"] == len(expected["messages"])


def test_export_writes_the_lone_surrogate_as_pis_escape(
    cli: CliRunner,
    client: SessionLogClient,
    sid: str,
    tmp_path: Path,
) -> None:
    """`export --format pi` writes the line as JSON.stringify does, the lone surrogate as its
    escape; it died with UnicodeEncodeError (to stdout and with -o alike), and the file could
    not be exported at all. The export opens again at the same context."""
    path, expected = _with_lone_surrogate(tmp_path)
    main = imported(cli, str(path), "--id", sid)[0]["id"]  # the edited file, not the fixture's session
    out = tmp_path / "exported.jsonl"
    result = cli.invoke(app, ["export", main, "--format", "pi", "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    line = next(text for text in path.read_text("utf-8").splitlines() if "\\ud83d" in text)
    assert line.encode("utf-8") in out.read_bytes().splitlines()
    assert session_context(PiTree(load_pi_bytes(out.read_bytes()).entries))["messages"] == expected["messages"]
