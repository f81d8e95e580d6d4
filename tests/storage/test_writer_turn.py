"""The turn to write a SQLite file (storage/writer_turn.py): one holder at a time across
processes (two `WriterTurn`s stand for two workers: each opens the lock file on its own, as a
process does), a waiter proceeds as soon as the holder lets go, and one that waits too long
fails, writing nothing, without leaving the turn taken."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sessionlog.core.errors import Unavailable
from sessionlog_server.storage.writer_turn import WriterTurn

WAIT_S = 30.0


def test_one_writer_at_a_time_and_the_next_goes_on_release(tmp_path: Path) -> None:
    database = str(tmp_path / "s.db")
    first, second = WriterTurn(database, WAIT_S), WriterTurn(database, WAIT_S)
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
    turn = WriterTurn(str(tmp_path / "s.db"), WAIT_S)
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


def test_a_turn_held_too_long_fails_the_waiter_and_is_not_kept_after(tmp_path: Path) -> None:
    database = str(tmp_path / "s.db")
    stopped, writer = WriterTurn(database, WAIT_S), WriterTurn(database, 0.2)
    try:
        with stopped.held():  # a worker stopped while holding the turn
            asked = time.monotonic()
            with pytest.raises(Unavailable) as refused, writer.held():
                raise AssertionError("got the turn while another process held it")
            assert 0.2 <= time.monotonic() - asked < 5
            assert refused.value.reason == "STORAGE_UNAVAILABLE"
            assert "turn to write" in str(refused.value)
            with pytest.raises(Unavailable), writer.held():  # a second writer waits on the same helper
                raise AssertionError("got the turn while another process held it")
        # The helper got the turn after its writers gave up: it let it go at once.
        deadline = time.monotonic() + 5
        while True:
            try:
                with stopped.held():
                    break
            except Unavailable:
                assert time.monotonic() < deadline, "the turn stayed taken after the waiter gave up"
        with writer.held():  # and the writer that gave up gets it when it is free
            pass
    finally:
        stopped.close()
        writer.close()


def test_a_waiter_still_waiting_when_the_holder_lets_go_gets_the_turn(tmp_path: Path) -> None:
    database = str(tmp_path / "s.db")
    first, second = WriterTurn(database, WAIT_S), WriterTurn(database, 0.2)
    got = threading.Event()

    def wait_for_turn() -> None:
        with second.held():
            got.set()

    try:
        with first.held(), pytest.raises(Unavailable), second.held():  # gives up; the helper waits on
            raise AssertionError("got the turn while another process held it")
        first_released = threading.Thread(target=wait_for_turn)
        with first.held():
            first_released.start()
            time.sleep(0.05)  # the second writer is waiting (on the helper still blocked)
        first_released.join(5)
        assert got.is_set(), "the waiting writer was not handed the turn"
        with first.held():  # it gave the turn back
            pass
    finally:
        first.close()
        second.close()
