"""`SESSIONLOG_GC_THRESHOLDS`: each `serve` process runs its collector with the thresholds asked
for (5000,20,20 by default, Python's own when empty), says so in its `serving` line, and a
value that is not three positive integers is refused with the setting's name."""

from __future__ import annotations

import json
import time

import pytest

from sessionlog.client import SessionLogClient
from sessionlog_server.transport.collector import parse_thresholds
from tests.support.events import user
from tests.support.servers import ServerProcess


@pytest.mark.parametrize(
    ("setting", "expected"), [(None, [5000, 20, 20]), ("", [700, 10, 10]), (" 20000, 5,7 ", [20000, 5, 7])]
)
def test_each_serving_process_collects_with_the_thresholds_asked_for(
    fresh_db: str, sid: str, setting: str | None, expected: list[int]
) -> None:
    env = {"SESSIONLOG_WORKERS": "2"} | ({} if setting is None else {"SESSIONLOG_GC_THRESHOLDS": setting})
    server = ServerProcess(fresh_db, env=env).start()
    try:
        deadline = time.monotonic() + 60  # `start` returns at the first worker's line
        while len(serving := _serving(server)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [record["gc_thresholds"] for record in serving] == [expected, expected], server.log
        with SessionLogClient(server.target, timeout=30) as client, client.writer(sid, create_if_missing=True) as w:
            assert w.append([user("hello")]).result(timeout=30).seqs == [1]
    finally:
        assert server.terminate() == 0


def _serving(server: ServerProcess) -> list[dict[str, object]]:
    return [json.loads(line) for line in server.log if line.startswith("{") and '"serving"' in line]


@pytest.mark.parametrize("spec", ["fast", "5000,20", "5000,20,20,1", "0,10,10", "5000,-1,10", "1e4,10,10"])
def test_thresholds_that_are_not_three_positive_integers_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="SESSIONLOG_GC_THRESHOLDS") as refused:
        parse_thresholds(spec)
    assert repr(spec) in str(refused.value)


def test_an_empty_setting_keeps_pythons_own() -> None:
    assert parse_thresholds("") is None and parse_thresholds("  ") is None
    assert parse_thresholds("5000,20,20") == (5000, 20, 20)
