"""The signals that stop `serve` gracefully (in-flight batches committed, writer streams told
SHUTTING_DOWN): SIGTERM (systemd, docker, kill), SIGINT (Ctrl-C) and SIGHUP (the terminal or
ssh session that started it went away). SIGHUP's default, an immediate exit, skipped the drain
without a log line. Kept apart from `server` so the worker supervisor can use them without
loading gRPC.

A process that will stop on them holds them (blocks them: one that comes waits, pending) from
its start until its handlers for them are in place, then releases them (`release_stop_signals`),
so one that comes while it starts up is handled, not met by the default, an immediate exit. A
worker is born with them held: its parent holds them across the spawn (`stop_signals_held`), as
a child starts with its parent's signal mask.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    sig for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None)) if sig is not None
)
"""What stops the service gracefully (SIGHUP where the platform has it)."""


def hold_stop_signals() -> None:
    """Block `STOP_SIGNALS` in this thread (and the threads and processes it starts): one that
    comes waits until `release_stop_signals`."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def release_stop_signals() -> None:
    """Unblock `STOP_SIGNALS` in this thread, once the process's handlers for them are in place:
    one held since start-up is delivered to them now."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@contextmanager
def stop_signals_held() -> Iterator[None]:
    """`STOP_SIGNALS` held for the block, then this thread's mask as it was (one that came is
    delivered then)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


__all__ = ["STOP_SIGNALS", "hold_stop_signals", "release_stop_signals", "stop_signals_held"]
