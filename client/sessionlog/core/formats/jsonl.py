"""The one strict JSON Lines reader of the project (SPEC §10).

Every JSONL file or stream sessionlog reads (its own exports, Pi session files, `pi --mode json`
output, run records) goes through `JsonlReader`, so the rules hold everywhere:

- **Framing.** Lines end at LF (0x0A) only. U+2028/U+2029, NEL, VT, FF are content, never line
  breaks. One trailing CR per line is removed (CRLF files read like LF files).
- **UTF-8, strict and incremental.** Chunks may split a character anywhere. Splitting the byte
  stream on LF before decoding is exactly as good as an incremental decoder, because byte 0x0A
  never occurs inside a multi-byte UTF-8 sequence; each complete line is then decoded strictly, so
  an invalid byte is reported with the number of the line that holds it.
- **Objects only.** Every line must be one JSON object, parsed with the lossless-JSON rules of
  `sessionlog.core.jsonvalue` (no NaN/Infinity, the same depth limit; a lone surrogate escape
  is JSON grammar and kept, as Pi keeps it).
- **Blank lines are skipped.** A line holding nothing but JSON whitespace (space, tab, CR) carries
  no record; Pi skips such lines too, and refusing them would reject files Pi itself accepts. They
  still count in line numbers. Pass `skip_blank=False` to refuse them (`BLANK_LINE`).
- **Limits.** A chunk longer than `max_chunk_bytes` is refused before it is looked at; a line is
  refused as soon as its bytes so far (CR included, LF not) exceed `max_line_bytes`, before it is
  held whole.
- **Truncation.** Bytes after the last LF that are a whole JSON object are the last record (a file
  whose final LF an editor dropped, `printf` without `\n`): a truncated object cannot parse, as
  its closing brace is what was cut. Any other bytes there are a truncated last line (a crashed
  writer): an error by default; with `lenient=True` they are dropped and a `JsonlWarning` says
  how many bytes.

Line numbers are 1-based and count physical lines (blank ones included), so they match an editor.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from sessionlog.core.errors import ValidationError
from sessionlog.core.jsonvalue import MAX_JSON_DEPTH, STRICT_DECODER, check_depth, check_unique_keys, kind

JsonObject = dict[str, Any]

DEFAULT_MAX_LINE_BYTES = 128 * 1024 * 1024
"""Largest line accepted by default: a 64 MiB event (Limits.max_event_bytes) plus headroom."""
DEFAULT_MAX_CHUNK_BYTES = 16 * 1024 * 1024
"""Largest chunk `feed` accepts by default."""
DEFAULT_READ_CHUNK_BYTES = 1024 * 1024
"""Chunk size of the file and stream helpers (Pi 1.x also reads in 1 MiB chunks)."""

_BLANK = b" \t\r"


@dataclass(frozen=True, slots=True)
class JsonlWarning:
    """Something a lenient read let pass; `line` is the physical line it concerns."""

    reason: str
    message: str
    line: int
    dropped_bytes: int = 0


WarningCallback = Callable[[JsonlWarning], None]


class JsonlReader:
    """Incremental strict JSONL parser: `feed` byte chunks, get complete objects, then `close`.

    The reader holds at most one partial line (bounded by `max_line_bytes`) between chunks, so a
    file of any size is read in constant memory per line.
    """

    __slots__ = (
        "_closed",
        "_lenient",
        "_line",
        "_max_chunk",
        "_max_line",
        "_on_warning",
        "_pending",
        "_pending_size",
        "_skip_blank",
        "bytes_read",
        "records",
        "warnings",
    )

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
        lenient: bool = False,
        skip_blank: bool = True,
        on_warning: WarningCallback | None = None,
    ) -> None:
        if max_line_bytes < 1 or max_chunk_bytes < 1:
            raise ValueError("max_line_bytes and max_chunk_bytes must be positive")
        self._max_line = max_line_bytes
        self._max_chunk = max_chunk_bytes
        self._lenient = lenient
        self._skip_blank = skip_blank
        self._on_warning = on_warning
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._line = 0
        self._closed = False
        self.bytes_read = 0
        """Total bytes fed so far."""
        self.records = 0
        """Objects returned so far."""
        self.warnings: list[JsonlWarning] = []
        """Every warning of a lenient read, also passed to `on_warning` as it happens."""

    @property
    def max_chunk_bytes(self) -> int:
        """The largest chunk `feed` accepts."""
        return self._max_chunk

    @property
    def line_number(self) -> int:
        """Physical lines completed so far (the next line read is `line_number + 1`)."""
        return self._line

    def feed(self, chunk: bytes) -> list[JsonObject]:
        """Take the next chunk of bytes; return the objects of the lines it completes."""
        return [obj for _, obj in self.feed_numbered(chunk)]

    def feed_numbered(self, chunk: bytes) -> list[tuple[int, JsonObject]]:
        """Like `feed`, pairing each object with its 1-based physical line number.

        After an error the reader is closed: the stream is not valid JSONL, and resuming past the
        bad line would silently lose it.
        """
        if self._closed:
            raise ValidationError("READER_CLOSED", "JSONL reader is closed; no more input is accepted")
        try:
            return self._feed(chunk)
        except ValidationError:
            self._closed = True
            self._pending = []
            raise

    def _feed(self, chunk: bytes) -> list[tuple[int, JsonObject]]:
        size = len(chunk)
        if size > self._max_chunk:
            raise ValidationError(
                "CHUNK_TOO_LARGE",
                f"line {self._line + 1}: a read chunk of {size} bytes exceeds the limit of {self._max_chunk} bytes",
                line=self._line + 1,
                limit=self._max_chunk,
                size=size,
            )
        self.bytes_read += size
        if not size:
            return []
        parts = bytes(chunk).split(b"\n")
        tail = parts.pop()
        out: list[tuple[int, JsonObject]] = []
        if parts:
            if self._pending:
                self._check_length(self._pending_size + len(parts[0]), self._line + 1)
                self._pending.append(parts[0])
                parts[0] = b"".join(self._pending)
                self._pending = []
                self._pending_size = 0
            for line in parts:
                self._line += 1
                obj = self._parse_line(line)
                if obj is not None:
                    out.append((self._line, obj))
        if tail:
            self._check_length(self._pending_size + len(tail), self._line + 1)
            self._pending.append(tail)
            self._pending_size += len(tail)
        self.records += len(out)
        return out

    def close(self) -> list[tuple[int, JsonObject]]:
        """End of input; returns the last record if the bytes after the last LF are one whole
        JSON object (none else). A partial last line is an error, or (lenient) dropped with a
        warning. Callers must use what it returns, as what `feed_numbered` returns."""
        if self._closed:
            return []
        self._closed = True
        if not self._pending:
            return []
        size = self._pending_size
        line = b"".join(self._pending)
        self._pending = []
        self._pending_size = 0
        number = self._line + 1
        last = _whole_object(line, number)
        if last is not None:
            self._line = number
            self.records += 1
            return [(number, last)]
        if not self._lenient:
            raise ValidationError(
                "TRUNCATED_LAST_LINE",
                f"line {number}: the last line has no LF ({size} bytes); the file looks truncated",
                line=number,
                size=size,
            )
        warning = JsonlWarning(
            "TRUNCATED_LAST_LINE",
            f"line {number}: dropped a truncated last line of {size} bytes (no LF)",
            number,
            size,
        )
        self.warnings.append(warning)
        if self._on_warning is not None:
            self._on_warning(warning)
        return []

    def _check_length(self, size: int, number: int) -> None:
        if size > self._max_line:
            raise ValidationError(
                "LINE_TOO_LONG",
                f"line {number}: longer than the limit of {self._max_line} bytes",
                line=number,
                limit=self._max_line,
            )

    def _parse_line(self, line: bytes) -> JsonObject | None:
        number = self._line
        if len(line) > self._max_line:
            self._check_length(len(line), number)
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.strip(_BLANK):
            if self._skip_blank:
                return None
            raise ValidationError("BLANK_LINE", f"line {number}: blank line", line=number)
        return parse_line(line, number)


def _whole_object(line: bytes, number: int) -> JsonObject | None:
    """A last line without LF as the record it is, if it is one whole JSON object by the rules
    of any line (`parse_line`), else None: it was cut (or breaks a rule: told as cut, as before)."""
    try:
        return parse_line(line, number)
    except ValidationError:
        return None


def parse_line(line: bytes, number: int) -> JsonObject:
    """Decode one line (without its LF and CR) strictly; errors name line `number`."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(
            "INVALID_UTF8",
            f"line {number}: invalid UTF-8 at byte {exc.start} of the line ({exc.reason})",
            line=number,
            offset=exc.start,
        ) from None
    try:
        # A line is a level above the values the service measures (an envelope's or an exported
        # event's data): data at the limit, which the service took, is a line one deeper.
        check_depth(text, LINE_DEPTH_WHAT, max_depth=MAX_JSON_DEPTH + 1)
        value = STRICT_DECODER.decode(text)
        # As the service refuses it in what is sent to it: the decoder kept the last of a
        # repeated key, and what the file held reached the service (or a fold) without the others.
        check_unique_keys(line, value)
    except json.JSONDecodeError as exc:
        raise ValidationError("MALFORMED_JSON", f"line {number}: not valid JSON: {exc}", line=number) from None
    except RecursionError:
        raise ValidationError("JSON_TOO_DEEP", f"line {number}: nested too deeply", line=number) from None
    except ValidationError as exc:
        kept = {name: text for name, text in exc.metadata.items() if name != "line"}  # a repeated key's name
        raise ValidationError(exc.reason, f"line {number}: {exc.message}", line=number, **kept) from None
    if not isinstance(value, dict):
        raise ValidationError(
            "LINE_NOT_OBJECT",
            f"line {number}: a JSONL line must be a JSON object, not {kind(value)}",
            line=number,
        )
    return value


LINE_DEPTH_WHAT = f"the line (an envelope, its data at most {MAX_JSON_DEPTH} levels)"
"""What a line nested too deep is told as: the line may nest one level more than the service's
limit, which counts from an event's data (it said "line 1: line 1 is nested more than 257 levels
deep", where the docs say 256)."""


def iter_chunks(stream: IO[bytes], chunk_size: int = DEFAULT_READ_CHUNK_BYTES) -> Iterator[bytes]:
    """Read a binary stream in chunks of at most `chunk_size` bytes until EOF."""
    while True:
        chunk = stream.read(chunk_size)
        if not chunk:
            return
        yield chunk


def read_chunks_numbered(
    chunks: Iterable[bytes], reader: JsonlReader | None = None
) -> Iterator[tuple[int, JsonObject]]:
    """Parse an iterable of byte chunks to `(line number, object)`; closes the reader at the end."""
    reader = reader or JsonlReader()
    for chunk in chunks:
        yield from reader.feed_numbered(chunk)
    yield from reader.close()


def read_chunks(chunks: Iterable[bytes], reader: JsonlReader | None = None) -> Iterator[JsonObject]:
    """Parse an iterable of byte chunks to objects; closes the reader at the end."""
    for _, obj in read_chunks_numbered(chunks, reader):
        yield obj


def read_stream(
    stream: IO[bytes],
    reader: JsonlReader | None = None,
    *,
    chunk_size: int = DEFAULT_READ_CHUNK_BYTES,
) -> Iterator[JsonObject]:
    """Parse a binary stream (a file, a pipe, stdout of a subprocess) by chunks."""
    reader = reader or JsonlReader()
    return read_chunks(iter_chunks(stream, min(chunk_size, reader.max_chunk_bytes)), reader)


def read_file_numbered(
    path: str | os.PathLike[str],
    reader: JsonlReader | None = None,
    *,
    chunk_size: int = DEFAULT_READ_CHUNK_BYTES,
    on_read: Callable[[int], object] | None = None,
) -> Generator[tuple[int, JsonObject], None, None]:
    """Parse a JSONL file by chunks to `(line number, object)` pairs.

    `on_read(n)` is called with the size of each chunk as it is read (a progress bar's hook).
    """
    reader = reader or JsonlReader()
    with open(path, "rb") as stream:
        chunks = iter_chunks(stream, min(chunk_size, reader.max_chunk_bytes))
        if on_read is not None:
            chunks = _reporting(chunks, on_read)
        yield from read_chunks_numbered(chunks, reader)


def _reporting(chunks: Iterable[bytes], on_read: Callable[[int], object]) -> Iterator[bytes]:
    for chunk in chunks:
        on_read(len(chunk))
        yield chunk


def read_file(
    path: str | os.PathLike[str],
    reader: JsonlReader | None = None,
    *,
    chunk_size: int = DEFAULT_READ_CHUNK_BYTES,
) -> Iterator[JsonObject]:
    """Parse a JSONL file by chunks to objects."""
    for _, obj in read_file_numbered(path, reader, chunk_size=chunk_size):
        yield obj


def read_bytes(data: bytes, reader: JsonlReader | None = None) -> list[JsonObject]:
    """Parse a whole JSONL document held in memory (fed in `max_chunk_bytes` slices)."""
    reader = reader or JsonlReader()
    step = min(reader.max_chunk_bytes, DEFAULT_READ_CHUNK_BYTES * 16)
    view = memoryview(data)
    return list(read_chunks((bytes(view[i : i + step]) for i in range(0, len(data), step)), reader))
