"""Files the CLI writes with `-o` (`export`, `view`; `write_atomically`) get the mode a user
expects: what the umask leaves for a new one, their own for one they replace."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionlog.cli.common import write_atomically


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def test_a_new_file_gets_what_the_umask_leaves(tmp_path: Path, umask_022: None) -> None:
    # mkstemp's 0600 was kept: a session page written to share was its owner's alone.
    target = tmp_path / "page.html"
    write_atomically(target, [b"<html>"])
    assert stat.S_IMODE(target.stat().st_mode) == 0o644 and target.read_bytes() == b"<html>"


def test_a_replaced_file_keeps_its_mode(tmp_path: Path, umask_022: None) -> None:
    target = tmp_path / "export.jsonl"
    target.write_bytes(b"old")
    target.chmod(0o640)
    write_atomically(target, [b"new"])
    assert stat.S_IMODE(target.stat().st_mode) == 0o640 and target.read_bytes() == b"new"
