"""The server's log lines: one JSON object per line, each written whole."""

from __future__ import annotations

import io
import json
import sys

import pytest
import structlog

from sessionlog_server.logging import configure


class RecordingStderr(io.StringIO):
    """A stderr that keeps every `write` call apart, as an unbuffered pipe would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def test_each_log_line_is_one_write_of_one_json_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several worker processes share one stderr: a line written in two parts (text, then its
    newline) can be split by another worker's line, which is how two `serving` lines once ran
    together on one line."""
    stderr = RecordingStderr()
    monkeypatch.setattr(sys, "stderr", stderr)
    try:
        configure("info")
        log = structlog.get_logger("test")
        log.info("serving", port=1234, worker=0)
        log.warning("second", worker=1)
    finally:
        structlog.reset_defaults()
    assert len(stderr.writes) == 2
    for write in stderr.writes:
        assert write.endswith("\n") and write.count("\n") == 1
        assert isinstance(json.loads(write), dict)
    assert json.loads(stderr.writes[0])["port"] == 1234


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure("loud")
