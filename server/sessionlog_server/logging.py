"""structlog set-up: one JSON object per line on stderr, never payloads."""

from __future__ import annotations

import logging
import sys

import structlog

LEVELS = ("debug", "info", "warning", "error")
"""The levels `configure` takes (any case)."""


def configure(level: str = "info") -> None:
    """JSON logs at `level` (debug, info, warning, error).

    Each line goes out in one write: `serve --workers N` shares one stderr among N processes, and
    under `PYTHONUNBUFFERED` structlog's `PrintLogger` wrote a line and its newline in two writes,
    so two workers' lines could run together on one line."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
