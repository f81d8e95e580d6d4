"""The SQLite settings a configuration names (`config.Settings`), apart from the recorder that
applies them: `serve`'s parent reads its settings without loading the recorder, which only its
workers open."""

from __future__ import annotations

BUSY_TIMEOUT_MS = 30_000
"""How long a write waits for the file by default: for another process's turn to write it
(storage/writer_turn.py) and for SQLite's write lock (the busy handler), each; then it fails."""
SYNCHRONOUS_MODES = ("FULL", "NORMAL", "EXTRA", "OFF")
"""The values of SQLite's `synchronous` pragma (any case)."""
