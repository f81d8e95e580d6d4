"""The signals that stop `serve` gracefully (in-flight batches committed, writer streams told
SHUTTING_DOWN): SIGTERM (systemd, docker, kill), SIGINT (Ctrl-C) and SIGHUP (the terminal or
ssh session that started it went away). SIGHUP's default, an immediate exit, skipped the drain
without a log line. Kept apart from `server` so the worker supervisor can use them without
loading gRPC.
"""

from __future__ import annotations

import signal

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    sig for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None)) if sig is not None
)
"""What stops the service gracefully (SIGHUP where the platform has it)."""

__all__ = ["STOP_SIGNALS"]
