"""`bench.server_instructions` counts a server that served exactly the events it was asked to.

The count itself runs the server under callgrind (minutes, so not here); what it rests on is
the run around it: every stream's events acknowledged, and a server that exits on SIGTERM
(callgrind writes its count only as the process exits).
"""

from __future__ import annotations

from pathlib import Path

from bench import server_instructions


def test_a_counted_run_serves_every_event_and_the_server_exits_cleanly() -> None:
    run = server_instructions.counted_run(5, wrapper=[])
    assert run["acked"] == server_instructions.STREAMS * 5
    assert not run["stalled"]
    assert run["exit_code"] == 0, run["stderr"][-2000:]


def test_a_counted_run_sends_its_events_in_batches_of_the_size_asked() -> None:
    run = server_instructions.counted_run(8, wrapper=[], streams=2, window=2, batch=4)
    assert (run["acked"], run["acknowledgements"]) == (16, 4)  # two batches a stream
    assert run["exit_code"] == 0, run["stderr"][-2000:]


def test_a_counted_unary_run_acknowledges_every_call_and_the_server_exits_cleanly() -> None:
    run = server_instructions.counted_run(5, wrapper=[], unary=True)
    assert run["acked"] == 5
    assert not run["stalled"]
    assert run["exit_code"] == 0, run["stderr"][-2000:]


def test_a_counted_run_on_postgresql_serves_every_event_and_the_server_exits_cleanly() -> None:
    run = server_instructions.counted_run(5, wrapper=[], streams=1, window=1, db="postgresql")
    assert run["acked"] == 5
    assert not run["stalled"]
    assert run["exit_code"] == 0, run["stderr"][-2000:]


def test_kept_profiles_get_a_file_each_in_a_directory_made_for_them(tmp_path: Path) -> None:
    """`--keep DIR`: the two runs' profiles, named by their events per stream, side by side."""
    fewer, more = server_instructions.keep_paths(tmp_path / "profiles", 100, 300)
    assert fewer.parent.is_dir() and fewer.parent == more.parent == tmp_path / "profiles"
    assert (fewer.name, more.name) == ("callgrind.100.out", "callgrind.300.out")
