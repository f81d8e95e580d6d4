"""Read a Pi session file: strict JSONL (SPEC §10), header and entries, then migrate to v3.

Pi itself skips lines it cannot parse; sessionlog does not, because a silently skipped line is a
silently lost message. The one exception is the crashed writer's truncated last line, which
`lenient=True` drops with a warning (kept on `PiFile.warnings`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from sessionlog.core.formats.jsonl import (
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_READ_CHUNK_BYTES,
    JsonlReader,
    read_chunks_numbered,
    read_file_numbered,
)
from sessionlog.core.formats.pi.entries import PiFile, parse_pi_objects
from sessionlog.core.formats.pi.migrate import IdFactory, migrate


def load_pi_file(
    path: str | os.PathLike[str],
    *,
    lenient: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    new_id: IdFactory | None = None,
    on_read: Callable[[int], object] | None = None,
) -> PiFile:
    """Parse and migrate the session file at `path` (`on_read`: see `jsonl.read_file_numbered`)."""
    reader = JsonlReader(lenient=lenient, max_line_bytes=max_line_bytes)
    parsed = parse_pi_objects(read_file_numbered(path, reader, on_read=on_read))
    parsed.warnings = list(reader.warnings)
    return migrate(parsed, new_id)


def load_pi_chunks(
    chunks: Iterable[bytes],
    *,
    lenient: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    new_id: IdFactory | None = None,
) -> PiFile:
    """Parse and migrate a session file given as byte chunks."""
    reader = JsonlReader(lenient=lenient, max_line_bytes=max_line_bytes)
    parsed = parse_pi_objects(read_chunks_numbered(chunks, reader))
    parsed.warnings = list(reader.warnings)
    return migrate(parsed, new_id)


def load_pi_bytes(data: bytes, *, lenient: bool = False, new_id: IdFactory | None = None) -> PiFile:
    """Parse and migrate a session file held in memory."""
    step = DEFAULT_READ_CHUNK_BYTES
    chunks = (data[i : i + step] for i in range(0, len(data), step))
    return load_pi_chunks(chunks, lenient=lenient, new_id=new_id)
