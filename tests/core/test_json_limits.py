"""One decoder, one set of limits (issue 11 §1): both decoding paths accept exactly the same
depths, canonicalisation equals RFC 8785 wherever RFC 8785 is defined and serves what it
leaves out (big integers, lone surrogates) losslessly, at any accepted depth."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionlog.core import jsonvalue
from sessionlog.core.errors import ValidationError
from sessionlog.core.jsonvalue import MAX_JSON_DEPTH, canonical, dumps_bytes, loads
from sessionlog.core.limits import DEFAULT_LIMITS

FLOATS = st.floats(allow_nan=False, allow_infinity=False)
SAFE_INTS = st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)))
VALUES = st.recursive(
    st.none() | st.booleans() | FLOATS | SAFE_INTS | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=500)
@given(VALUES)
def test_canonical_is_rfc8785_where_rfc8785_is_defined(value: object) -> None:
    assert canonical(value) == rfc8785.dumps(value)


@pytest.mark.parametrize(
    "number", [1e21, 1e-7, 123.0, 0.1, 5e-324, 1.7976931348623157e308, 1e20, -0.0, 1e-6, 12345678901234567890.0]
)
def test_canonical_numbers_are_ecmascripts(number: float) -> None:
    assert canonical(number) == rfc8785.dumps(number)


def test_big_integers_and_lone_surrogates_are_canonicalised_losslessly() -> None:
    value = loads(b'{"id":18446744073709551617,"s":"\\ud83d","\\udc00":-99999999999999999999}')
    text = canonical(value)
    assert text == b'{"id":18446744073709551617,"s":"\\ud83d","\\udc00":-99999999999999999999}'
    assert loads(text) == value  # and back, exactly
    assert loads(dumps_bytes(value)) == value


@pytest.mark.parametrize("as_bytes", [True, False])
def test_both_decoding_paths_accept_the_same_depths(as_bytes: bool) -> None:
    def nested(depth: int, extra: str = "") -> str:
        return "[" * (depth - 1) + '{"a":1' + extra + "}" + "]" * (depth - 1)

    for text in [nested(MAX_JSON_DEPTH), nested(MAX_JSON_DEPTH, ',"n":123456789012345678901234')]:
        value = loads(text.encode() if as_bytes else text)  # orjson path, and the big-number path
        assert jsonvalue.decoded_depth(value) == MAX_JSON_DEPTH
        assert loads(canonical(value)) == value and loads(dumps_bytes(value)) == value
    brackets_in_strings = json.dumps(["[" * 1000, "{" * 1000])  # not nesting: accepted
    assert loads(brackets_in_strings.encode() if as_bytes else brackets_in_strings)
    for text in [nested(MAX_JSON_DEPTH + 1), nested(MAX_JSON_DEPTH + 1, ',"n":123456789012345678901234')]:
        with pytest.raises(ValidationError) as refused:
            loads(text.encode() if as_bytes else text)
        assert refused.value.reason == "JSON_TOO_DEEP"


@pytest.mark.parametrize("way", ["loads bytes", "loads text", "loads_proposed"])
def test_integers_orjson_would_round_are_decoded_exactly(way: str) -> None:
    """orjson decodes these texts into floats; a float that large sends the text down the exact
    path, which a float of that size written as one also takes, and keeps it a float."""

    def decode(text: bytes) -> Any:
        if way == "loads_proposed":
            return jsonvalue.loads_proposed(text)
        return loads(text if way == "loads bytes" else text.decode())

    for number in (2**64, -(2**63) - 1, 10**30, -(10**25)):
        text = b'{"n":[1,{"m":%d}],"f":1.5}' % number
        value = decode(text)
        assert value["n"][1]["m"] == number and type(value["n"][1]["m"]) is int
    for number in (2**64 - 1, -(2**63)):  # within 64 bits: orjson's own integers
        assert decode(b'{"n":%d}' % number)["n"] == number
    assert decode(b'{"f":1e19,"g":-9.3e18}') == {"f": 1e19, "g": -9.3e18}
    assert jsonvalue.decoded_depth({"a": [1, {"b": 1e19}]}) == jsonvalue.INEXACT
    assert jsonvalue.decoded_depth({"a": [1, {"b": 9.2e18, "c": []}]}) == 4


def test_proposed_json_nested_too_deeply_is_refused_whichever_path_decodes_it() -> None:
    nested = b"[" * (MAX_JSON_DEPTH - 1) + b'{"a":1}' + b"]" * (MAX_JSON_DEPTH - 1)
    too_deep = b"[" + nested + b"]"
    for text in (nested, nested.replace(b"1", b"99999999999999999999999")):
        assert jsonvalue.decoded_depth(jsonvalue.loads_proposed(text)) == MAX_JSON_DEPTH
    for text in (too_deep, too_deep.replace(b"1", b"99999999999999999999999"), b"[" * 2000 + b"]" * 2000):
        for max_values in (DEFAULT_LIMITS.max_json_values, 10):  # decoded at once, or measured first
            with pytest.raises(ValidationError) as refused:
                jsonvalue.loads_proposed(text, max_values=max_values)
            assert refused.value.reason == ("JSON_TOO_DEEP" if max_values > 10 else "JSON_TOO_MANY_VALUES")


OBJECTS = st.dictionaries(TEXT, VALUES, max_size=4)
ENCODINGS = st.sampled_from(
    [
        {"separators": (",", ":"), "ensure_ascii": False},  # what the clients write
        {"separators": (", ", ": "), "ensure_ascii": False},  # spaced
        {"separators": (",", ":"), "ensure_ascii": True},  # every non-ASCII character escaped
        {"indent": 2, "ensure_ascii": True},
    ]
)


@settings(max_examples=400)
@given(OBJECTS, ENCODINGS)
def test_a_proposed_object_without_a_repeated_key_is_accepted_however_it_is_written(
    value: dict[str, object], encoding: dict[str, object]
) -> None:
    text = json.dumps(value, **encoding).encode("utf-8")  # type: ignore[arg-type]
    assert jsonvalue.loads_proposed(text) == value


@settings(max_examples=400)
@given(OBJECTS, TEXT, VALUES, VALUES, ENCODINGS, st.booleans())
def test_a_proposed_object_repeating_a_key_is_refused_however_it_is_written(
    value: dict[str, object],
    key: str,
    first: object,
    second: object,
    encoding: dict[str, object],
    nested: bool,
) -> None:
    """Whichever path `check_unique_keys` takes (the text is what orjson writes, it holds no
    `\\u` escape, or it does), a key named twice in any object is refused, naming the key."""
    pair = json.dumps({key: first}, **encoding)[1:-1].strip()  # type: ignore[arg-type]
    again = json.dumps({key: second}, **encoding)[1:-1].strip()  # type: ignore[arg-type]
    inner = "{" + pair + "," + again + "}"
    rest = json.dumps(value, **encoding)  # type: ignore[arg-type]
    body = rest[1:-1].strip()
    if nested:
        text = "{" + (body + "," if body else "") + json.dumps("nested") + ":" + inner + "}"
    else:
        text = "{" + (body + "," if body and key not in value else "") + pair + "," + again + "}"
    with pytest.raises(ValidationError) as refused:
        jsonvalue.loads_proposed(text.encode("utf-8"))
    assert refused.value.reason == "DUPLICATE_KEY"


def _containers(count: int, *, in_strings: int = 0) -> bytes:
    """A JSON object holding `count` (at least 2) objects and arrays in all, itself and its
    array included, and a string of `in_strings` brackets, which are no containers."""
    inner = b",".join(b"[]" if i % 2 else b"{}" for i in range(count - 2))
    return b'{"s":"' + b"[{" * (in_strings // 2) + b'","a":[' + inner + b"]}"


def test_proposed_json_holding_more_objects_and_arrays_than_the_limit_is_refused() -> None:
    """8 million `{"k":1}` in a 64 MB event held the server's event loop ~5 s (decoding costs per
    value, not per byte). At the limit it is decoded; one over is refused, naming the limit and
    the count, with the limit of the default (`Limits.max_json_containers`) or a given one."""
    limit = DEFAULT_LIMITS.max_json_containers
    at = b"[" + b",".join([b"[]"] * (limit - 1)) + b"]"
    assert len(jsonvalue.loads_proposed(at)) == limit - 1
    with pytest.raises(ValidationError) as refused:
        jsonvalue.loads_proposed(at[:-1] + b",{}]")
    error = refused.value
    assert error.reason == "JSON_TOO_MANY_CONTAINERS"
    assert (error.metadata["limit"], error.metadata["count"]) == (str(limit), str(limit + 1))
    assert f"holds {limit + 1} objects and arrays, over the limit of {limit}" in error.message
    assert len(jsonvalue.loads_proposed(_containers(50), max_containers=50)["a"]) == 48
    with pytest.raises(ValidationError) as small:
        jsonvalue.loads_proposed(_containers(51), max_containers=50, what="event data")
    assert small.value.reason == "JSON_TOO_MANY_CONTAINERS" and small.value.metadata["count"] == "51"
    assert small.value.message.startswith("event data holds 51 objects")


def test_brackets_inside_strings_are_not_containers() -> None:
    """Text and code in strings are full of brackets: only those outside strings count, however
    many are inside (escaped quotes and backslashes included)."""
    assert _containers(50, in_strings=10_000).count(b"[") > 5_000
    assert jsonvalue.loads_proposed(_containers(50, in_strings=10_000), max_containers=50)["a"]
    tricky = b'{"s":"\\"[[[\\\\","t":"\\\\\\"{{{{","u":["]]]]\\u005b"]}'  # 3 outside, 9 inside
    assert jsonvalue.loads_proposed(tricky, max_containers=3)["t"] == '\\"{{{{'
    with pytest.raises(ValidationError) as refused:
        jsonvalue.loads_proposed(_containers(51, in_strings=10_000), max_containers=50)
    assert refused.value.metadata["count"] == "51"


def test_containers_are_counted_before_anything_is_decoded_and_only_as_far_as_needed() -> None:
    """Malformed text over the limit is refused for its containers (no decoder ran). Strings are
    blanked up to the first brackets past the limit: then the error says "more than", without a
    count."""
    with pytest.raises(ValidationError) as malformed:
        jsonvalue.loads_proposed(b"[" + b"[]," * 100, max_containers=50)
    assert malformed.value.reason == "JSON_TOO_MANY_CONTAINERS"
    with pytest.raises(ValidationError) as far:
        jsonvalue.loads_proposed(b"[" + b",".join([b'{"k":1}'] * 10_000) + b"]", max_containers=50)
    assert "more than 50 objects and arrays" in far.value.message and "count" not in far.value.metadata


def test_read_paths_count_no_containers() -> None:
    """What was stored before the limit (or under a higher one) is still read back."""
    text = _containers(DEFAULT_LIMITS.max_json_containers + 10)
    assert len(loads(text)["a"]) == DEFAULT_LIMITS.max_json_containers + 8
    assert len(jsonvalue.loads_served(text)["a"]) == DEFAULT_LIMITS.max_json_containers + 8


def _values(value: object) -> int:
    """How many values a decoded value's arrays and objects hold: each element and each member once."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (dict, list)):
            count += len(item)
            stack.extend(item.values() if isinstance(item, dict) else item)
    return count


def test_proposed_json_holding_more_values_than_the_limit_is_refused() -> None:
    """One object of 4.5 million keys held the server's event loop ~2.5 s (~8 s with one integer
    past 64 bits): decoding costs per value. At the limit it is decoded; one over is refused,
    naming the limit and the count, with the limit of the default (`Limits.max_json_values`) or a
    given one. Each element and each member counts once; the top-level value does not."""
    limit = DEFAULT_LIMITS.max_json_values
    at = b'{"a":[' + b",".join([b"1"] * (limit - 1)) + b"]}"
    assert len(jsonvalue.loads_proposed(at)["a"]) == limit - 1
    with pytest.raises(ValidationError) as refused:
        jsonvalue.loads_proposed(at[:-2] + b',"x"]}')
    error = refused.value
    assert error.reason == "JSON_TOO_MANY_VALUES"
    assert (error.metadata["limit"], error.metadata["count"]) == (str(limit), str(limit + 1))
    assert f"holds {limit + 1} values in its arrays and objects, over the limit of {limit}" in error.message
    keys = b"{" + b",".join(b'"k%d":[]' % i for i in range(limit + 1)) + b"}"  # the costly shape: members
    with pytest.raises(ValidationError) as members:
        jsonvalue.loads_proposed(keys, max_containers=limit + 2)
    assert members.value.reason == "JSON_TOO_MANY_VALUES"
    nested = {"a": [1, {"b": [2, 3], "c": {}}, [[]]], "d": "e"}  # 10 values
    text = json.dumps(nested).encode()
    assert jsonvalue.loads_proposed(text, max_values=10) == nested
    with pytest.raises(ValidationError) as small:
        jsonvalue.loads_proposed(text, max_values=9, what="event data")
    assert small.value.reason == "JSON_TOO_MANY_VALUES" and small.value.metadata["count"] == "10"
    assert small.value.message.startswith("event data holds 10 values")


@settings(max_examples=300)
@given(OBJECTS, ENCODINGS)
def test_values_are_counted_exactly_however_the_text_is_written(
    value: dict[str, object], encoding: dict[str, object]
) -> None:
    """Counted from the text (strings blanked, white space and empty containers taken into
    account), the values are those of the decoded value: accepted at the count, refused one below
    it naming the count. And no text holds more values than half its bytes, the bound under which
    nothing is counted."""
    text = json.dumps(value, **encoding).encode("utf-8")  # type: ignore[arg-type]
    count = _values(value)
    assert count <= len(text) // 2
    assert jsonvalue.loads_proposed(text, max_values=count) == value
    if count:
        with pytest.raises(ValidationError) as refused:
            jsonvalue.loads_proposed(text, max_values=count - 1)
        assert refused.value.reason == "JSON_TOO_MANY_VALUES"
        assert refused.value.metadata.get("count", str(count)) == str(count)


def test_commas_inside_strings_are_not_values() -> None:
    """Text in strings is full of commas: only those outside strings separate values, however many
    are inside (escaped quotes and backslashes included), and a container holding only strings
    or white space is counted as what it is."""
    prose = "one, two, three, " * 10_000
    value = {"s": prose, "t": ['\\",', '",\\\\', ",", ""], "u": {"k,": "v,"}, "e": [], "f": [" , "]}
    for text in (json.dumps(value).encode(), json.dumps(value, indent=2, ensure_ascii=True).encode()):
        assert text.count(b",") > 30_000
        assert jsonvalue.loads_proposed(text, max_values=11) == value
        with pytest.raises(ValidationError) as refused:
            jsonvalue.loads_proposed(text, max_values=10)
        assert refused.value.metadata["count"] == "11"
    spaced = b'{"s":"\\",[", "t":[ ], "u":{ \n }, "v":[ "a,b" , [\t] ], "w":{ "k" : "," }}'  # 8 values
    assert jsonvalue.loads_proposed(spaced, max_values=8)["v"] == ["a,b", []]
    with pytest.raises(ValidationError) as refused:
        jsonvalue.loads_proposed(spaced, max_values=7)
    assert refused.value.metadata["count"] == "8"


def test_values_are_counted_before_anything_is_decoded_and_only_as_far_as_needed() -> None:
    """Malformed text over the limit is refused for its values (no decoder ran). Strings are
    blanked up to the first values past the limit: then the error says "more than", without a
    count."""
    with pytest.raises(ValidationError) as malformed:
        jsonvalue.loads_proposed(b'{"a":[' + b"1," * 100, max_values=50)
    assert malformed.value.reason == "JSON_TOO_MANY_VALUES"
    with pytest.raises(ValidationError) as far:
        jsonvalue.loads_proposed(b"{" + b",".join(b'"k%d":"v"' % i for i in range(10_000)) + b"}", max_values=50)
    assert "more than 50 values" in far.value.message and "count" not in far.value.metadata


def test_the_depth_is_measured_on_the_blanking_that_counts_the_values() -> None:
    """A text counted for its values is blanked once; its depth is measured on that blanking."""
    deep = b"[" * 256 + b",".join([b'"a,[{"'] * 100) + b"]" * 256  # 255 nested arrays and 100 strings
    assert jsonvalue.decoded_depth(jsonvalue.loads_proposed(deep, max_values=355)) == MAX_JSON_DEPTH
    with pytest.raises(ValidationError) as refused:
        jsonvalue.loads_proposed(deep, max_values=354)
    assert refused.value.metadata["count"] == "355"
    with pytest.raises(ValidationError, match="nested more than"):
        jsonvalue.loads_proposed(b"[" + deep + b"]", max_values=356)


def test_read_paths_count_no_values() -> None:
    """What was stored before the limit (or under a higher one) is still read back."""
    text = b'{"a":[' + b",".join([b"1"] * (DEFAULT_LIMITS.max_json_values + 10)) + b"]}"
    assert len(loads(text)["a"]) == DEFAULT_LIMITS.max_json_values + 10
    assert len(jsonvalue.loads_served(text)["a"]) == DEFAULT_LIMITS.max_json_values + 10


def test_a_string_left_open_behind_many_brackets_is_measured_in_linear_time() -> None:
    """The depth measure blanks strings with a regex; with the closing quote required, a string
    left open (malformed) was scanned to its end from each of its escaped quotes: 80 KB held the
    event loop 19 s. Now one pass: refused at once, as every malformed text is."""
    text = b"[" * 300 + b'"' + b'\\"' * 60_000
    start = time.perf_counter()
    for decode in (loads, jsonvalue.loads_proposed):
        with pytest.raises(ValidationError):
            decode(text)
    assert time.perf_counter() - start < 2


def test_many_strings_behind_many_brackets_are_blanked_as_one_run() -> None:
    """Measuring the depth blanks strings, which cost a regex match each (~0.17 µs): 21 million
    empty strings behind 257 brackets (63 MB) held the event loop ~4 s before anything was
    decoded. Strings with no bracket between them are one match now (~0.03 µs a string): a
    text takes at most one match more than the brackets outside its strings, whatever the
    number of strings. Counted, not timed, so a loaded machine cannot fail it."""
    text = b"[" + b"[]," * 300 + b",".join([b'"a\\"b"', b'""', b'"[]"'] * 100_000) + b"]"
    outside, matches = jsonvalue._STRING_RUNS.subn(b"", text)
    brackets = outside.count(b"[") + outside.count(b"]")
    assert brackets == 602
    assert matches <= brackets + 1
    with pytest.raises(ValidationError, match="nested more than"):
        jsonvalue.check_depth(b"[" * 300 + b",".join([b'""'] * 1_000) + b"]" * 300)


@pytest.mark.parametrize(
    "text",
    [
        b'{"e":1,"e":"\\u003A"}',  # the kept value holds a colon, escaped (upper case)
        b'{"e":1,"x":"\\u003a\\u003a","e":2}',
        b'{"e":"\\\\u003a","e":"\\\\\\u003a"}',  # an escaped backslash, then an escaped colon
        b'{"n":[{"\\u006b":1,"\\u006b":2}]}',
    ],
)
def test_a_repeated_key_is_found_in_text_with_escapes(text: bytes) -> None:
    """Keys are counted by colons, a colon written as its escape included."""
    with pytest.raises(ValidationError) as refused:
        jsonvalue.loads_proposed(text)
    assert refused.value.reason == "DUPLICATE_KEY"


def test_escaped_colons_and_backslashes_without_a_repeat_are_accepted() -> None:
    text = b'{"a\\u003a":"\\\\u003a","b":["\\u003A",{"\\\\":"\\\\\\u003a"}]}'
    assert jsonvalue.loads_proposed(text) == {"a:": "\\u003a", "b": [":", {"\\": "\\:"}]}
