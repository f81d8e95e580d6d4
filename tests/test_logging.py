"""The server's log lines: one JSON object per line, each written whole."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading

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


def test_the_standard_librarys_log_lines_are_json_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Alembic logs through the standard library at start-up ("Running upgrade ..."):
    those lines went out as plain text between the JSON ones, which a collector reading stderr
    as JSON Lines cannot parse."""
    stderr = RecordingStderr()
    monkeypatch.setattr(sys, "stderr", stderr)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # as in a fresh `serve` process
    monkeypatch.setattr(root, "level", root.level)
    try:
        configure("info")
        migration = logging.getLogger("alembic.runtime.migration")
        migration.info("Running upgrade %s -> %s, %s", "", "0001", "Initial schema.")
        migration.debug("below the level")
        # Alembic's chatter each time migrations ran, seven plugin lines and a self-description
        # whose "non-transactional DDL" contradicts migrations/env.py: dropped, its warnings not.
        logging.getLogger("alembic.runtime.plugins").info("setup plugin %s", "alembic.autogenerate.schemas")
        migration.info("Context impl %s.", "SQLiteImpl")
        migration.info("Will assume non-transactional DDL.")
        migration.warning("Will assume a warning is kept.")
    finally:
        structlog.reset_defaults()
    assert len(stderr.writes) == 2, stderr.writes
    line = stderr.writes[0]
    assert line.endswith("\n") and line.count("\n") == 1
    record = json.loads(line)
    assert record["event"] == "Running upgrade  -> 0001, Initial schema."
    assert (record["level"], record["logger"]) == ("info", "alembic.runtime.migration")
    assert "timestamp" in record
    assert json.loads(stderr.writes[1])["event"] == "Will assume a warning is kept."


def test_a_workers_lines_name_it_from_every_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The change feed's "reconnecting" warning and the writer thread's lines come from threads
    of their own, which a worker index bound as a context variable never reached."""
    stderr = RecordingStderr()
    monkeypatch.setattr(sys, "stderr", stderr)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    try:
        configure("info", worker=3)
        thread = threading.Thread(target=lambda: structlog.get_logger("t").warning("from a thread"))
        thread.start()
        thread.join()
        structlog.get_logger("t").info("own", worker=9)  # a field the line sets itself wins
        logging.getLogger("alembic").info("stdlib")
    finally:
        structlog.reset_defaults()
    lines = [json.loads(write) for write in stderr.writes]
    assert [(line["event"], line["worker"]) for line in lines] == [("from a thread", 3), ("own", 9), ("stdlib", 3)]
