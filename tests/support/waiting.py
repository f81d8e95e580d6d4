"""Waiting for a condition the service reaches on its own (a background repair, a lapse).

Polls an observable condition with a deadline instead of sleeping a fixed time: the test
goes on as soon as the service is there, and fails with the last value when it never gets
there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def retrying(action: Callable[[], T], errors: type[BaseException], *, timeout: float = 30.0) -> T:
    """`action()`, called again while it raises `errors` (the service is not back yet), up to
    `timeout` seconds; the last error is raised after that."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except errors:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def eventually(probe: Callable[[], T], done: Callable[[T], bool], *, timeout: float = 30.0, every: float = 0.05) -> T:
    """Call `probe` until `done(result)`; returns that result, or fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in {timeout} s; last value: {value!r}")
        time.sleep(every)
