"""The turn to write a SQLite file (storage/writer_turn.py): one holder at a time across
processes (two `WriterTurn`s stand for two workers: each opens the lock file on its own, as a
process does), and a waiter proceeds as soon as the holder lets go."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sessionlog_server.storage.writer_turn import WriterTurn


def test_one_writer_at_a_time_and_the_next_goes_on_release(tmp_path: Path) -> None:
    database = str(tmp_path / "s.db")
    first, second = WriterTurn(database), WriterTurn(database)
    entered = threading.Event()

    def take_second_turn() -> None:
        with second.held():
            entered.set()

    try:
        with first.held():
            waiter = threading.Thread(target=take_second_turn, daemon=True)
            waiter.start()
            assert not entered.wait(0.3), "the second writer got in while the first held the turn"
            released = time.monotonic()
        assert entered.wait(5)
        assert time.monotonic() - released < 0.5  # handed over on release, not after a sleep
        waiter.join(5)
        with first.held():  # and back again
            pass
    finally:
        first.close()
        second.close()
    assert Path(f"{database}-writer.lock").exists()


def test_threads_of_one_process_take_turns_too(tmp_path: Path) -> None:
    turn = WriterTurn(str(tmp_path / "s.db"))
    inside = 0
    most = 0
    lock = threading.Lock()

    def write() -> None:
        nonlocal inside, most
        for _ in range(50):
            with turn.held():
                with lock:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.0005)
                with lock:
                    inside -= 1

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    turn.close()
    assert most == 1
