"""The strict JSONL reader (SPEC §10): one test per rule."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sessionlog.core.errors import ValidationError
from sessionlog.core.formats.jsonl import (
    JsonlReader,
    JsonlWarning,
    read_bytes,
    read_chunks,
    read_chunks_numbered,
    read_file,
    read_file_numbered,
    read_stream,
)
from sessionlog.core.jsonvalue import MAX_JSON_DEPTH


def feed_all(chunks: list[bytes], **options: object) -> list[dict[str, object]]:
    reader = JsonlReader(**options)  # type: ignore[arg-type]
    out: list[dict[str, object]] = []
    for chunk in chunks:
        out.extend(reader.feed(chunk))
    out.extend(obj for _, obj in reader.close())
    return out


def error_of(data: bytes, **options: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        feed_all([data], **options)
    return caught.value


# --- framing -------------------------------------------------------------------------------


def test_reads_one_object_per_lf_terminated_line() -> None:
    assert feed_all([b'{"a":1}\n{"b":[2,3]}\n']) == [{"a": 1}, {"b": [2, 3]}]


def test_objects_come_out_as_soon_as_their_line_is_complete() -> None:
    reader = JsonlReader()
    assert reader.feed(b'{"a":1}\n{"b"') == [{"a": 1}]
    assert reader.feed(b":2}") == []
    assert reader.feed(b"\n") == [{"b": 2}]
    reader.close()


@pytest.mark.parametrize("char", ["é", "中", "😀"])
def test_multibyte_character_split_at_every_byte_offset(char: str) -> None:
    line = ('{"text":"a' + char + 'b","k":"' + char + '"}\n').encode()
    expected = [{"text": "a" + char + "b", "k": char}]
    for cut in range(1, len(line)):
        assert feed_all([line[:cut], line[cut:]]) == expected, cut
    # and every byte on its own
    assert feed_all([bytes([b]) for b in line]) == expected
    # every pair of cuts inside the first character
    start = line.index(char.encode())
    width = len(char.encode())
    for i in range(start + 1, start + width):
        for j in range(i + 1, start + width + 1):
            assert feed_all([line[:i], line[i:j], line[j:]]) == expected, (i, j)


def test_u2028_and_u2029_inside_strings_are_content_not_line_breaks() -> None:
    data = '{"s":"one\u2028two\u2029three"}\n{"n":2}\n'.encode()
    assert feed_all([data]) == [{"s": "one\u2028two\u2029three"}, {"n": 2}]


@pytest.mark.parametrize("sep", ["\x85", "\x0b", "\x0c", "\x1c"])
def test_other_unicode_separators_are_content_too(sep: str) -> None:
    # raw control characters are invalid inside JSON strings, so put them between tokens
    # only where JSON allows non-ASCII: NEL (U+0085) is a legal string character
    if sep == "\x85":
        assert feed_all([('{"s":"a' + sep + 'b"}\n').encode()]) == [{"s": "a\x85b"}]
    else:
        err = error_of(('{"s":"a' + sep + 'b"}\n').encode())
        assert err.reason == "MALFORMED_JSON"


def test_crlf_lines_lose_exactly_one_cr() -> None:
    assert feed_all([b'{"a":1}\r\n{"b":2}\r\n']) == [{"a": 1}, {"b": 2}]
    # a second CR is JSON whitespace after the object, so it parses; a CR inside a string is not
    assert feed_all([b'{"a":1}\r\r\n']) == [{"a": 1}]


def test_cr_split_from_its_lf_across_chunks() -> None:
    assert feed_all([b'{"a":1}\r', b'\n{"b":2}\r', b"\n"]) == [{"a": 1}, {"b": 2}]


def test_lone_cr_is_not_a_line_break() -> None:
    err = error_of(b'{"a":1}\r{"b":2}\n')
    assert err.reason == "MALFORMED_JSON"
    assert err.metadata["line"] == "1"


# --- blank lines ---------------------------------------------------------------------------


def test_blank_lines_are_skipped_but_counted() -> None:
    reader = JsonlReader()
    got = reader.feed_numbered(b'\n{"a":1}\n  \t\n\r\n{"b":2}\n')
    reader.close()
    assert got == [(2, {"a": 1}), (5, {"b": 2})]


def test_blank_lines_can_be_refused() -> None:
    err = error_of(b'{"a":1}\n\n', skip_blank=False)
    assert err.reason == "BLANK_LINE"
    assert err.metadata["line"] == "2"


# --- objects only and lossless JSON ---------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kind"),
    [(b"[1,2]", "array"), (b'"s"', "string"), (b"3", "number"), (b"null", "null"), (b"true", "boolean")],
)
def test_every_line_must_be_an_object(line: bytes, kind: str) -> None:
    err = error_of(b'{"ok":1}\n' + line + b"\n")
    assert err.reason == "LINE_NOT_OBJECT"
    assert err.metadata["line"] == "2"
    assert kind in err.message


def test_malformed_json_names_the_line() -> None:
    err = error_of(b'{"a":1}\n{"a":}\n')
    assert err.reason == "MALFORMED_JSON"
    assert err.metadata["line"] == "2"
    assert "line 2" in err.message


@pytest.mark.parametrize(
    ("line", "key"),
    [
        (b'{"type":"x/a","type":"turn/start"}', "type"),
        (b'{"data":{"message":{"role":"user","content":"a","content":"b"}}}', "content"),
        (b'{"data":{"a":1,"\\u0061":2}}', "a"),
    ],
)
def test_a_line_naming_a_key_twice_is_refused_and_named(line: bytes, key: str) -> None:
    """The decoder kept the last value: `append` sent the event without the other, `replay` and
    `import` counted a Pi message's second role. Refused as the service refuses it."""
    err = error_of(b'{"a":1}\n' + line + b"\n")
    assert (err.reason, err.metadata["line"], err.metadata["key"]) == ("DUPLICATE_KEY", "2", key)
    assert err.message.startswith("line 2: ")


def _nested_data_line(depth: int) -> bytes:
    """An envelope line whose data nests `depth` levels (its object and arrays within)."""
    return b'{"type":"x/d","ignorable":true,"data":{"a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}}"


def test_a_line_holding_data_at_the_depth_limit_is_read() -> None:
    """The service takes data MAX_JSON_DEPTH deep; its line (an envelope, an export's event) is
    a level deeper, and was refused: a session's own export could not be imported or replayed."""
    (line,) = feed_all([_nested_data_line(MAX_JSON_DEPTH) + b"\n"])
    assert line["type"] == "x/d"
    err = error_of(_nested_data_line(MAX_JSON_DEPTH + 1) + b"\n")
    assert (err.reason, err.metadata["line"]) == ("JSON_TOO_DEEP", "1")
    # It said "line 1: line 1 is nested more than 257 levels deep", where the docs say 256.
    assert err.message == (
        f"line 1: the line (an envelope, its data at most {MAX_JSON_DEPTH} levels) is nested more than "
        f"{MAX_JSON_DEPTH + 1} levels deep"
    )


@pytest.mark.parametrize("token", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_numbers_are_refused(token: bytes) -> None:
    err = error_of(b'{"a":1}\n{"x":' + token + b"}\n")
    assert err.reason == "NON_FINITE_NUMBER"
    assert err.metadata["line"] == "2"


def test_lone_surrogate_escapes_are_json_grammar_and_kept() -> None:
    """An escape is JSON grammar, not a UTF-8 byte: Pi reads a lone one and so do we."""
    assert feed_all([b'{"e":"\\ud83d\\ude00"}\n']) == [{"e": "😀"}]
    assert feed_all([b'{"e":"\\\\ud800"}\n']) == [{"e": "\\ud800"}]  # an escaped backslash
    assert feed_all([b'{"a":1}\n{"e":"\\ud800"}\n']) == [{"a": 1}, {"e": "\ud800"}]
    err = error_of(b'{"a":1}\n{"e":"\xed\xa0\x80"}\n')  # a surrogate as (invalid) UTF-8 bytes
    assert err.reason == "INVALID_UTF8"
    assert err.metadata["line"] == "2"


def test_integers_stay_integers() -> None:
    (obj,) = feed_all([b'{"big":123456789012345678901234567890,"f":1.5}\n'])
    assert obj["big"] == 123456789012345678901234567890
    assert isinstance(obj["big"], int)


# --- UTF-8 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [b"\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe4\xb8"],
    ids=["ff", "truncated-2", "overlong", "surrogate", "above-max", "truncated-3"],
)
def test_invalid_utf8_names_the_line(bad: bytes) -> None:
    data = b'{"a":1}\n{"a":2}\n{"s":"x' + bad + b'y"}\n'
    err = error_of(data)
    assert err.reason == "INVALID_UTF8"
    assert err.metadata["line"] == "3"
    assert "line 3" in err.message


def test_invalid_utf8_split_across_chunks_still_names_the_line() -> None:
    data = b'{"a":1}\n{"s":"\xe4\xb8\xff"}\n'
    for cut in range(1, len(data)):
        with pytest.raises(ValidationError) as caught:
            feed_all([data[:cut], data[cut:]])
        assert caught.value.reason == "INVALID_UTF8"
        assert caught.value.metadata["line"] == "2"


def test_bom_is_not_json_whitespace() -> None:
    err = error_of('\ufeff{"a":1}\n'.encode())
    assert err.reason == "MALFORMED_JSON"


# --- limits --------------------------------------------------------------------------------


def test_line_over_the_limit_is_refused_and_named() -> None:
    err = error_of(b'{"a":1}\n{"s":"' + b"x" * 100 + b'"}\n', max_line_bytes=50)
    assert err.reason == "LINE_TOO_LONG"
    assert err.metadata["line"] == "2"


def test_line_exactly_at_the_limit_is_accepted() -> None:
    line = b'{"s":"' + b"x" * 10 + b'"}'
    assert feed_all([line + b"\n"], max_line_bytes=len(line)) == [{"s": "x" * 10}]
    err = error_of(line + b"\n", max_line_bytes=len(line) - 1)
    assert err.reason == "LINE_TOO_LONG"


def test_long_line_is_refused_before_it_is_held_whole() -> None:
    reader = JsonlReader(max_line_bytes=64, max_chunk_bytes=16)
    reader.feed(b'{"ok":1}\n{"s":"')
    with pytest.raises(ValidationError) as caught:
        for _ in range(10):  # the line never ends: refused once 64 bytes are pending
            reader.feed(b"x" * 16)
    assert caught.value.reason == "LINE_TOO_LONG"
    assert caught.value.metadata["line"] == "2"
    assert reader.bytes_read <= 16 + 64 + 16


def test_pending_tail_over_the_limit_is_refused_without_lf() -> None:
    reader = JsonlReader(max_line_bytes=8)
    with pytest.raises(ValidationError) as caught:
        reader.feed(b'{"s":"xxxxxxxx')
    assert caught.value.reason == "LINE_TOO_LONG"
    assert caught.value.metadata["line"] == "1"


def test_chunk_over_the_limit_is_refused() -> None:
    reader = JsonlReader(max_chunk_bytes=8)
    assert reader.feed(b'{"a":1}\n') == [{"a": 1}]
    with pytest.raises(ValidationError) as caught:
        reader.feed(b'{"a":12}\n')
    assert caught.value.reason == "CHUNK_TOO_LARGE"
    assert caught.value.metadata["line"] == "2"


def test_file_helpers_respect_a_small_chunk_limit(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a":"' + b"y" * 40 + b'"}\n' + b'{"b":1}\n')
    got = list(read_file(path, JsonlReader(max_chunk_bytes=7)))
    assert got == [{"a": "y" * 40}, {"b": 1}]


# --- truncated last line -------------------------------------------------------------------


def test_truncated_last_line_is_an_error_by_default() -> None:
    err = error_of(b'{"a":1}\n{"b":2')
    assert err.reason == "TRUNCATED_LAST_LINE"
    assert err.metadata["line"] == "2"
    assert "6 bytes" in err.message


@pytest.mark.parametrize("lenient", [False, True])
def test_a_whole_object_without_lf_is_the_last_record(lenient: bool) -> None:
    # It was refused (strict) or dropped with a warning (lenient, which halved a replayed
    # session's cost whose file had lost only its final LF). A cut object cannot parse: its
    # closing brace is what was cut.
    reader = JsonlReader(lenient=lenient)
    assert reader.feed_numbered(b'{"a":1}\n{"b":2}') == [(1, {"a": 1})]
    assert reader.close() == [(2, {"b": 2})]
    assert reader.warnings == [] and reader.records == 2 and reader.line_number == 2
    assert reader.close() == []  # once
    assert list(read_chunks_numbered([b'{"a":', b"1}"])) == [(1, {"a": 1})]
    for cut in (b'{"b":2', b"[1,2]", b'"text"', b'{"b":"\xc3'):  # cut, or no object: as before
        assert error_of(b'{"a":1}\n' + cut).reason == "TRUNCATED_LAST_LINE", cut


def test_lenient_mode_drops_the_truncated_line_with_a_warning() -> None:
    seen: list[JsonlWarning] = []
    reader = JsonlReader(lenient=True, on_warning=seen.append)
    got = reader.feed(b'{"a":1}\n{"b":')
    reader.close()
    assert got == [{"a": 1}]
    assert seen == reader.warnings
    (warning,) = seen
    assert warning.reason == "TRUNCATED_LAST_LINE"
    assert warning.line == 2
    assert warning.dropped_bytes == 5
    assert "5 bytes" in warning.message


def test_lenient_mode_still_refuses_bad_complete_lines() -> None:
    err = error_of(b'{"a":}\n{"b":', lenient=True)
    assert err.reason == "MALFORMED_JSON"


def test_empty_input_and_input_ending_in_lf_are_fine() -> None:
    assert feed_all([]) == []
    assert feed_all([b""]) == []
    assert feed_all([b"\n\n"]) == []


def test_a_reader_that_raised_accepts_no_more_input() -> None:
    reader = JsonlReader()
    with pytest.raises(ValidationError):
        reader.feed(b"[]\n")
    with pytest.raises(ValidationError) as caught:
        reader.feed(b"{}\n")
    assert caught.value.reason == "READER_CLOSED"
    reader.close()  # nothing pending: no truncation error on top


def test_no_input_after_close() -> None:
    reader = JsonlReader()
    reader.close()
    with pytest.raises(ValidationError) as caught:
        reader.feed(b"{}\n")
    assert caught.value.reason == "READER_CLOSED"


# --- helpers -------------------------------------------------------------------------------


def test_stream_file_bytes_and_chunk_helpers_agree(tmp_path: Path) -> None:
    data = '{"a":"中文"}\n{"b":"😀"}\r\n\n{"c":3}\n'.encode()
    expected = [{"a": "中文"}, {"b": "😀"}, {"c": 3}]
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    assert read_bytes(data) == expected
    assert list(read_stream(io.BytesIO(data), chunk_size=3)) == expected
    assert list(read_file(path, chunk_size=1)) == expected
    assert [n for n, _ in read_file_numbered(path, chunk_size=2)] == [1, 2, 4]
    assert list(read_chunks(iter([data[:5], data[5:]]))) == expected


def test_reader_counts_records_and_bytes() -> None:
    reader = JsonlReader()
    reader.feed(b'{"a":1}\n\n{"b":2}\n')
    reader.close()
    assert (reader.records, reader.bytes_read, reader.line_number) == (2, 17, 3)
