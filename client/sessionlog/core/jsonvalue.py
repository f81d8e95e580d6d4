"""Lossless JSON (SPEC §2): parse strictly, serialise one way, hash canonically.

Payloads must survive a round trip unchanged: integers stay integers, and values JSON cannot
carry (NaN, Infinity, numbers beyond a double's range) are refused at the door instead of
being stored and failing later. One decoder and one set of limits serve the door and every
read path: nesting deeper than MAX_JSON_DEPTH is refused before any decoder recurses past
what it handles (orjson stops at 1024 levels by itself), so whatever is accepted can be read
back and projected. A lone UTF-16 surrogate escape
(`"\\ud83d"`, a model's broken emoji) is JSON grammar, accepted as Pi accepts it, and written
back as the same escape. `dumps` is the one storage/wire form; `canonical` is RFC 8785 for
hashing requests (SPEC §5), extended losslessly to big integers and lone surrogates.
"""

from __future__ import annotations

import enum
import json
import math
import re
import sys
import uuid
from array import array
from collections.abc import Iterator
from decimal import Decimal
from itertools import accumulate
from typing import Any

import orjson

from sessionlog.core.errors import ValidationError
from sessionlog.core.limits import DEFAULT_LIMITS


def _refuse_constant(name: str) -> Any:
    raise ValidationError("NON_FINITE_NUMBER", f"{name} is not valid JSON (lossless JSON only)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # e.g. 1e400: a JSON number no double can hold
        raise ValidationError("NUMBER_OUT_OF_RANGE", f"the number {text[:40]} is out of range (lossless JSON only)")
    return value


class _StrictDecoder(json.JSONDecoder):
    """Standard JSON decoding that refuses NaN, Infinity and numbers out of range.

    An integer literal over Python's conversion limit (4300 digits) raises a bare ValueError
    from inside the scanner; it becomes a ValidationError like every other refusal.
    """

    def decode(self, s: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().decode(s, *args, **kwargs)
        except json.JSONDecodeError:
            raise
        except ValueError:
            limit = sys.get_int_max_str_digits()
            raise ValidationError("NUMBER_OUT_OF_RANGE", f"an integer has more than {limit} digits") from None


STRICT_DECODER = _StrictDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
"""Standard JSON decoding that refuses NaN, Infinity and out-of-range numbers (ValidationError)."""


def _as_orjson_writes(value: Any) -> Any:
    """What orjson writes for the two kinds of value it serialises natively and the standard
    library does not: an Enum member as its value, a UUID as its text. The standard encoder
    takes them the same way, so whether a value is accepted never depends on which path wrote
    it."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_as_orjson_writes)

#: Dataclasses and datetimes go to the standard encoder (which refuses them, as it always has)
#: instead of being written by orjson's own conversions.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


#: For a proposed text measured before it is decoded, and a served page (`_decode`): orjson
#: turns integers outside [-2**63, 2**64) into floats, so text with 20 digits in a row, or a
#: minus sign and 19, takes the exact decoder. One C-speed pass maps every byte to its class
#: (a digit or a minus sign to b"1", an opening bracket to b"[", anything else to b"0"); that
#: copy answers the depth test (count b"[") and the long-number test (a run of 20 b"1"s; now
#: and then a string of digits and dashes matches too, which only costs the slower decoder).
_BYTE_CLASSES = bytes(0x31 if 0x30 <= i <= 0x39 or i == 0x2D else 0x5B if i in b"[{" else 0x30 for i in range(256))
_LONG_RUN = b"1" * 20


def loads(text: str | bytes, *, what: str = "JSON") -> Any:
    """Parse JSON text strictly: no NaN/Infinity, valid UTF-8, at most MAX_JSON_DEPTH deep.

    The text goes through orjson first (several times faster than the standard library's
    decoder with this module's hooks; a stored event's text is read back this way), and its
    value's depth is measured after it (orjson refuses past 1024 levels itself); anything it
    refuses (a lone surrogate escape, or an error), and any text holding a number too long
    for 64 bits, is measured first and parsed by the standard library, which keeps big
    integers exact and names the problem. Both paths refuse the same depths, so they accept
    exactly the same texts.
    """
    value = _decoded_at_once(text, what)
    if value is not _UNDECIDED:
        return value
    check_depth(text, what)
    return _decode_exactly(text, what)


def loads_proposed(
    text: bytes,
    *,
    what: str = "JSON",
    max_containers: int = DEFAULT_LIMITS.max_json_containers,
    max_values: int = DEFAULT_LIMITS.max_json_values,
) -> Any:
    """Parse JSON proposed for storage (an event's data, a header, a session's metadata): `loads`,
    holding at most `max_containers` objects and arrays (`Limits.max_json_containers`) and at most
    `max_values` values in them (`Limits.max_json_values`), both counted before anything is
    decoded, and no object in it names a key twice (`check_unique_keys`). Read paths use `loads`,
    which keeps the last of repeated keys as every JSON reader does and counts neither, so
    whatever was stored before these rules can still be read.

    A text of at most twice the smaller limit in bytes cannot pass either (a container or a
    value takes two bytes at least): it is decoded at once (`_decoded_at_once`)."""
    short = len(text) // 2 <= min(max_containers, max_values)
    value = _decoded_at_once(text, what) if short else _UNDECIDED
    if value is _UNDECIDED:
        classes = text.translate(_BYTE_CLASSES)
        _check_nesting(text, classes.count(b"["), what, max_containers, max_values)
        value = _decode_exactly(text, what) if short else _decode(text, what, classes)
    check_unique_keys(text, value)
    return value


def check_unique_keys(text: bytes, value: Any) -> None:
    """Refuse (DUPLICATE_KEY) JSON `text` whose objects name a key twice; `value` is the text
    decoded, which kept only the last of each repeated key.

    The text is stored as received, so a repeated key would stay in the log while every reader,
    the service's projections included, saw only its last value. The decoders do not report a
    repeat. Most texts are what orjson writes for their value (the clients write compact JSON):
    then the value written again is the text, byte for byte, and no key was dropped (one
    `orjson.dumps` and a compare: ~0.5 µs for the bench's 2 KB events, a tenth of counting).
    Otherwise colons are counted, at C speed. The value written again holds one colon per key
    and every colon of its strings as it is; the text holds one per key outside its strings and
    every colon of its strings, as it is or escaped (`\\u003a`). With no key repeated the two
    counts are equal; a repeat leaves more in the text (its key and its dropped value are in the
    text only). A value orjson cannot write (an integer past 64 bits, a lone surrogate) has its
    keys counted instead, against the text's colons outside strings. Only a text that does repeat
    a key is decoded again, to name it. (Blanking the strings of every text with an escape, a regex
    match each, and walking its value made 7 million escaped strings in 63 MB take 2.9 s to
    accept; 1.0 s now.)
    """
    try:
        written = orjson.dumps(value)
    except TypeError:  # what orjson cannot write; the standard encoder took 0.5 s for 2.5
        # million big integers, blanking the strings ~0.1 s
        if _KEYED_RUNS.sub(b"", text).count(b":") != _key_count(value):
            _KEY_FINDER.decode(text.decode("utf-8"))
        return
    if written == text:
        return
    if written.count(b":") != _colons(text):
        _KEY_FINDER.decode(text.decode("utf-8"))


def _colons(text: bytes) -> int:
    """The colons of well-formed JSON `text`, those written as a `\\u003a` escape included
    (after its escaped backslashes are dropped, so that `\\\\u003a` is not counted)."""
    if b"\\u" not in text:
        return text.count(b":")
    unescaped = text.replace(b"\\\\", b"")
    return unescaped.count(b":") + unescaped.count(b"\\u003a") + unescaped.count(b"\\u003A")


def _key_count(value: Any) -> int:
    """How many keys the objects of a decoded value hold, all together (iteratively: any depth)."""
    count = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            count += len(item)
            item = item.values()
        elif not isinstance(item, list):
            continue
        for child in item:
            if isinstance(child, (dict, list)):
                stack.append(child)
    return count


def _refuse_repeated_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, or DUPLICATE_KEY naming the first key it repeats."""
    result: dict[str, Any] = {}
    for key, item in pairs:
        if key in result:
            raise ValidationError(
                "DUPLICATE_KEY",
                f"an object names the key {key[:80]!r} twice; keys must be unique (which value counts is ambiguous)",
                key=escape_lone_surrogates(key[:200]),  # error metadata travels as UTF-8
            )
        result[key] = item
    return result


_KEY_FINDER = json.JSONDecoder(object_pairs_hook=_refuse_repeated_key)
"""Decodes text already accepted by `loads` again, to name a repeated key (`check_unique_keys`)."""


def loads_served(text: bytes, *, what: str = "JSON") -> Any:
    """Parse JSON a sessionlog server produced (a history or transcript page): the same decoder
    as `loads`, without measuring the depth again. Everything in it was accepted through `loads`
    (at most MAX_JSON_DEPTH deep) and the pages only wrap it in a list; the measure costs tens
    of milliseconds per megabyte, which a reader of a long history would pay on every page."""
    return _decode(text, what)


_UNDECIDED: Any = object()
"""`_decoded_at_once`'s answer for a text the measured path decides."""


def _decoded_at_once(text: str | bytes, what: str) -> Any:
    """`text` decoded by orjson and measured afterwards, or `_UNDECIDED`: the text is then
    measured first (`_check_nesting`) and decoded exactly (`_decode_exactly`, which also names
    what is wrong with a text orjson refuses), without trying orjson again.

    orjson refuses nesting past 1024 levels itself, so its decoding is bounded without a
    measure; the depth is then the value's (`decoded_depth`), refused past MAX_JSON_DEPTH as
    the text's would be. A float of 2**63 or more may be an integer orjson rounded (it turns
    any past 64 bits into a float): such a value is `_UNDECIDED`, and the measured path decodes
    its text exactly. Measuring the text first (a byte-class map of it and a count) cost a
    2 KB event more than orjson's decoding of it and the walk of its value together."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _UNDECIDED
    depth = decoded_depth(value)
    if depth == INEXACT:
        return _UNDECIDED
    if depth > MAX_JSON_DEPTH:
        _refuse_depth(what)
    return value


def _decode(text: str | bytes, what: str, classes: bytes | None = None) -> Any:
    """`classes`: the text's byte classes when the caller has mapped them already."""
    if isinstance(text, bytes):
        if classes is None:
            classes = text.translate(_BYTE_CLASSES)
        if classes.find(_LONG_RUN) < 0:  # `in` tries the run as an integer first: a TypeError each time
            try:
                return orjson.loads(text)
            except orjson.JSONDecodeError:
                pass  # the strict path says what is wrong (or accepts what orjson cannot)
    return _decode_exactly(text, what)


def _decode_exactly(text: str | bytes, what: str) -> Any:
    """The standard library's strict decoding of `text`: big integers exact, a lone surrogate
    escape accepted, and anything wrong named (INVALID_UTF8, MALFORMED_JSON)."""
    try:
        if isinstance(text, (bytes, bytearray, memoryview)):
            text = bytes(text).decode("utf-8")
        value = STRICT_DECODER.decode(text)
    except UnicodeDecodeError as exc:
        raise ValidationError("INVALID_UTF8", f"{what} is not valid UTF-8: {exc.reason}") from None
    except json.JSONDecodeError as exc:
        raise ValidationError("MALFORMED_JSON", f"{what} is not valid JSON: {exc}") from None
    except RecursionError:  # not reached below MAX_JSON_DEPTH; kept as a guard
        raise ValidationError("JSON_TOO_DEEP", f"{what} is nested too deeply") from None
    return value


def dumps(value: Any) -> str:
    """The compact storage and wire form (UTF-8 text, no ASCII escaping, no NaN; a lone
    surrogate is written as its `\\uXXXX` escape, the only form valid UTF-8 can carry)."""
    written = _orjson_form(value, may_be_non_finite=True)
    return written.decode("utf-8") if written is not None else _standard_form(value)


def dumps_bytes(value: Any) -> bytes:
    """`dumps` encoded as UTF-8."""
    return _utf8_form(value, may_be_non_finite=True)


def dumps_bytes_fast(value: Any) -> bytes:
    """`dumps_bytes` of a value already known to be lossless (it was decoded from accepted
    text), so a `null` in the output needs no second look."""
    return _utf8_form(value, may_be_non_finite=False)


def _utf8_form(value: Any, *, may_be_non_finite: bool) -> bytes:
    written = _orjson_form(value, may_be_non_finite=may_be_non_finite)
    return written if written is not None else _standard_form(value).encode("utf-8")


def _orjson_form(value: Any, *, may_be_non_finite: bool) -> bytes | None:
    """The value's JSON through orjson, 10-20x faster than the standard library's C encoder
    (a harness encodes every event it sends), or None where only the standard encoder writes
    what `dumps` promises: an integer past 64 bits, a lone surrogate, a key that is not a
    string, nesting past orjson's 255 levels (orjson refuses each), and a NaN or an infinity,
    which orjson writes as `null` where `dumps` must refuse them, so any `null` in the output of
    a value not known to be finite sends it to the standard encoder too. The two may spell a
    float differently (`1e20` / `1e+20`): the same JSON number."""
    try:
        written = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return None
    if may_be_non_finite and b"null" in written:
        return None
    return written


def _standard_form(value: Any) -> str:
    try:
        text = _ENCODER.encode(value)
        return escape_lone_surrogates(text) if _LONE_SURROGATE.search(text) else text
    except ValueError as exc:
        raise ValidationError("NON_FINITE_NUMBER", f"value is not lossless JSON: {exc}") from None
    except RecursionError:
        raise ValidationError("JSON_TOO_DEEP", "value is nested too deeply") from None


#: The deepest nesting of arrays and objects any JSON value may have, at the door and on every
#: read path: well inside what orjson (1024) and the standard library's recursive decoder and
#: encoder handle from a server's call stack, so whatever is accepted can be served.
MAX_JSON_DEPTH = 256

#: A JSON string, its run of plain characters taken at once between escapes (an alternation
#: per character cost the re engine a step each: 16 MB of string text took 2.3 s, now 0.06 s).
#: The closing quote is optional, so the pattern never fails once it starts: with it required,
#: a string left open (`[[[…"\\"\\"\\"…`, malformed) was scanned to its end from each of its
#: quotes, quadratic (80 KB held the event loop 19 s). Possessive (`*+`): nothing in it is ever
#: given back, so the engine keeps no backtracking state per repetition.
_STRING = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"?'
#: A run of strings with no bracket between them (`"a":"b","c"`), taken as one match: a match
#: costs the re engine ~0.17 µs besides its scan, and blanking string by string took ~4 s for 21
#: million strings (`["","",…]` behind 257 brackets, 63 MB); as one possessive run, 0.7 s (a
#: greedy one keeps a backtracking point per string: slower than separate matches). A run ends
#: only at a bracket or at the end of the text, so a text takes at most one match more than it
#: keeps brackets.
_STRING_RUNS = re.compile(_STRING + rb'(?:[^"\[\]{}]*+' + _STRING + rb")*+", re.DOTALL)
#: The same, its runs ending at a colon too: blanking them leaves every key's colon.
_KEYED_RUNS = re.compile(_STRING + rb'(?:[^"\[\]{}:]*+' + _STRING + rb")*+", re.DOTALL)
#: The same, its runs ending at a comma too: each run lies within one value of a container (an
#: element, or a member's key and value), so a well-formed text takes at most one match more than
#: it holds values, and blanking the runs leaves every comma that separates two values.
_VALUE_RUNS = re.compile(_STRING + rb'(?:[^"\[\]{},]*+' + _STRING + rb")*+", re.DOTALL)
#: A blanked run's placeholder: a container holding only strings must not look empty.
_BLANKED = b"0"
#: Text with its strings blanked as its shape: brackets as arrays', commas kept, JSON whitespace
#: dropped, any other byte (a number, a literal, a colon, a blanked run) a `0`. An empty container
#: is then `[]` in it, and every other opening bracket begins a container holding values.
_SHAPES = bytes(0x5B if b in b"[{" else 0x5D if b in b"]}" else 0x2C if b == 0x2C else 0x30 for b in range(256))
_JSON_WHITESPACE = b" \t\n\r"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
#: Objects' brackets as arrays': depth does not ask which kind a level is (mismatched kinds are
#: malformed, which the decoder reports).
_ONE_BRACKET_KIND = bytes.maketrans(b"{}", b"[]")
#: A bracket as the step it takes in depth, a signed byte: `[` +1, `]` -1.
_DEPTH_STEPS = bytes.maketrans(b"[]", b"\x01\xff")
_PAIR_PASSES = 8
"""Passes that remove innermost bracket pairs before the depth is summed up: a few empty the
brackets of most texts (a large tool output's many shallow objects), at C speed."""


def check_depth(text: str | bytes, what: str = "JSON", max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON text nested deeper than `max_depth` (MAX_JSON_DEPTH unless the text wraps the
    values measured in levels of its own), before any decoder recurses into it.

    Counting brackets is enough when there are few of them (the common case, C-speed counts).
    Otherwise strings are blanked, everything but brackets deleted and objects' brackets made
    arrays' (C-speed passes). Up to `_PAIR_PASSES` passes then remove every innermost pair, each
    pass one level of a well-formed text, and the depth of what remains is the highest running
    sum of its steps (`itertools.accumulate`, linear). Removing pairs alone took as many passes
    as levels, each over the whole text: a text of many 256-deep nests cost about a second per
    megabyte on the event loop, nearly a minute for one event of 64 MiB. Text that is not well formed
    may measure deeper than it is; it is refused either way.
    """
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    _check_nesting(data, data.count(b"[") + data.count(b"{"), what, max_depth=max_depth)


def _check_nesting(
    data: bytes,
    opening: int,
    what: str,
    max_containers: int | None = None,
    max_values: int | None = None,
    max_depth: int = MAX_JSON_DEPTH,
) -> None:
    """`check_depth` of `data`, given how many opening brackets it holds (`loads` counts them in
    its byte classes): with no more of them than `max_depth` there is nothing to measure. With
    `max_containers`, also refuse (JSON_TOO_MANY_CONTAINERS) text holding more objects and arrays
    than that, outside its strings; that is counted only when the text holds more opening
    brackets than the limit, inside strings or out. With `max_values`, also refuse
    (JSON_TOO_MANY_VALUES) text whose arrays and objects hold more values than that, outside its
    strings.

    Values are counted only when two upper bounds pass the limit. Every value in an array or
    object starts with a byte of its own and is followed by one that starts no value (a comma,
    its container's closing bracket, white space), so a text of n bytes holds at most n / 2
    values: a text of up to twice the limit (1 MB by default; a harness's 2 KB events) costs
    nothing more. Every value also follows a comma or its container's opening bracket, so the
    commas and the opening brackets together bound them too (commas alone do not: `[[1],[2]]`
    holds four values and one comma): one `bytes.count`, at C speed. Only past both is the text
    counted exactly, blanked once for the depth, the containers and the values together.

    Blanking the strings takes at most one regex match more than the brackets left outside them
    (`_STRING_RUNS`), or than the values (`_VALUE_RUNS`), so it stops after `limit + 2` matches:
    by then more than the limit are outside strings, and the text is refused without being
    scanned further."""
    containers_over = max_containers is not None and opening > max_containers
    values_over = max_values is not None and len(data) // 2 > max_values and opening + data.count(b",") > max_values
    if opening <= max_depth and not containers_over and not values_over:
        return
    if max_values is not None and values_over:
        shape = _count_values(data, what, max_values, max_containers if containers_over else None)
        if opening <= max_depth:
            return
        brackets = shape.translate(None, b",0")
    else:
        cap = max_containers + 2 if max_containers is not None and containers_over else 0  # 0: no cap
        outside, runs = _STRING_RUNS.subn(b"", data, count=cap)
        brackets = outside.translate(_ONE_BRACKET_KIND, _NOT_BRACKETS)
        if max_containers is not None and containers_over:
            _check_containers(brackets.count(b"["), max_containers, what, counted_all=runs < cap)
        if opening <= max_depth:
            return
    removed = 0
    while brackets and removed < _PAIR_PASSES:
        inner = brackets.replace(b"[]", b"")
        if len(inner) == len(brackets):
            break  # unbalanced (malformed): summed up as it is
        brackets, removed = inner, removed + 1
    if brackets and removed + max(accumulate(array("b", brackets.translate(_DEPTH_STEPS)))) > max_depth:
        _refuse_depth(what, max_depth)


def kind(value: Any) -> str:
    """What a decoded JSON value is, as an error names it: `an object`, `an array`, `a string`,
    `null`, `a boolean`, `a number`."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def _refuse_depth(what: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """JSON_TOO_DEEP: `what` nests past `max_depth`."""
    raise ValidationError(
        "JSON_TOO_DEEP",
        f"{what} is nested more than {max_depth} levels deep",
        limit=max_depth,
    )


def _count_values(data: bytes, what: str, max_values: int, max_containers: int | None) -> bytes:
    """Refuse (JSON_TOO_MANY_VALUES) text whose arrays and objects hold more than `max_values`
    values outside its strings, and, given `max_containers`, (JSON_TOO_MANY_CONTAINERS) text
    holding more objects and arrays than that; return the text's shape (`_SHAPES`), whose
    brackets are those `_check_nesting` measures the depth of.

    A container holds its commas plus one values, unless it is empty: in the shape (strings
    blanked, white space dropped) the values are the commas, plus the opening brackets, less the
    empty containers (`[]`)."""
    cap = max_values + 2
    outside, runs = _VALUE_RUNS.subn(_BLANKED, data, count=cap)
    if runs >= cap:
        _check_values(max_values + 1, max_values, what, counted_all=False)
    shape = outside.translate(_SHAPES, _JSON_WHITESPACE)
    containers = shape.count(b"[")
    if max_containers is not None:
        _check_containers(containers, max_containers, what, counted_all=True)
    _check_values(shape.count(b",") + containers - shape.count(b"[]"), max_values, what, counted_all=True)
    return shape


def _check_containers(count: int, limit: int, what: str, *, counted_all: bool) -> None:
    """Refuse `count` objects and arrays over `limit`; a count cut short (`counted_all` false)
    is already over it."""
    if count > limit:
        raise ValidationError(
            "JSON_TOO_MANY_CONTAINERS",
            _over_limit(what, "objects and arrays", count, limit, counted_all),
            limit=limit,
            count=count if counted_all else None,
        )


def _check_values(count: int, limit: int, what: str, *, counted_all: bool) -> None:
    """Refuse `count` values in arrays and objects over `limit`; a count cut short (`counted_all`
    false) is already over it."""
    if count > limit:
        raise ValidationError(
            "JSON_TOO_MANY_VALUES",
            _over_limit(what, "values in its arrays and objects", count, limit, counted_all),
            limit=limit,
            count=count if counted_all else None,
        )


def _over_limit(what: str, counted: str, count: int, limit: int, counted_all: bool) -> str:
    """The message of a count over its limit: the count, or, cut short, that it passed the limit."""
    how_many = str(count) if counted_all else f"more than {limit}"
    return f"{what} holds {how_many} {counted}, over the limit of {limit}"


INEXACT = -1
"""`decoded_depth` of a value holding a float of `_ROUNDED_INTEGERS` or more."""
_ROUNDED_INTEGERS = 2.0**63
"""Where orjson's floats for integers begin: it turns an integer outside [-2**63, 2**64) into
the nearest float, whose magnitude is at least this."""


def decoded_depth(value: Any) -> int:
    """How deeply a decoded value nests, or INEXACT when it holds a float whose magnitude is
    2**63 or more (one that may stand for an integer orjson rounded). Iterative, so any depth is
    measured without recursion; only containers are put on its stack."""
    if not isinstance(value, (dict, list)):
        return INEXACT if isinstance(value, float) and abs(value) >= _ROUNDED_INTEGERS else 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        deepest = max(deepest, depth)
        for item in container.values() if isinstance(container, dict) else container:
            if isinstance(item, (dict, list)):
                stack.append((item, depth + 1))
            elif isinstance(item, float) and abs(item) >= _ROUNDED_INTEGERS:
                return INEXACT
    return deepest


class _Raw:
    """Literal JSON text in the canonical serialiser's work stack (punctuation, keys).

    A wrapper, not a `str` subclass: a string in the stack is a value still to be escaped, and
    mypyc compiles no subclass of a builtin type (setup.py).
    """

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


_JCS_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Written as regex escapes, not literal surrogates: mypyc compiles no string literal holding one.
_JCS_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\ud800-\udfff]')
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _JCS_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def _canonical_string(text: str) -> str:
    return '"' + _JCS_NEEDS_ESCAPE.sub(_escape_char, text) + '"'


def _utf16_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def es_number(value: float) -> str:
    """A double as ECMAScript's Number::toString writes it (RFC 8785 §3.2.2.3)."""
    if math.isnan(value) or math.isinf(value):
        raise ValidationError("NOT_CANONICALIZABLE", f"{value!r} has no JSON form")
    if value == 0:
        return "0"
    if value < 0:
        return "-" + es_number(-value)
    _, digit_tuple, exponent = Decimal(repr(value)).as_tuple()  # repr: the shortest round trip
    digits = "".join(map(str, digit_tuple))
    stripped = digits.rstrip("0")
    exponent = int(exponent) + len(digits) - len(stripped)
    digits = stripped.lstrip("0") or "0"
    k = len(digits)
    n = exponent + k  # value = 0.digits × 10^n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"


def digest_form(value: Any) -> bytes:
    """Deterministic bytes of a value, for digests the service compares with each other (never
    sent, never compared with another implementation's): orjson with sorted keys, ~20x faster
    than `canonical`; a value orjson cannot write (an integer beyond 64 bits, a lone surrogate)
    falls back to `canonical`. The same value always gives the same bytes."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError: what it cannot write, canonical can
        return canonical(value)


def canonical(value: Any) -> bytes:
    """RFC 8785 (JCS) canonical bytes, used for request hashes; iterative, so any depth the
    door accepts is served.

    Two values JCS leaves out are written losslessly instead of refused, so that whatever the
    door accepts can be served (docs/projections.md): an integer beyond ±(2^53 − 1) is written
    with its exact digits (JCS would first round it to a double), and a lone UTF-16 surrogate
    as a lowercase `\\uXXXX` escape (I-JSON excludes them; ECMAScript's JSON.stringify writes
    them the same way).
    """
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if type(item) is _Raw:
            out.append(item.text)
        elif item is None:
            out.append("null")
        elif item is True:
            out.append("true")
        elif item is False:
            out.append("false")
        elif isinstance(item, str):
            out.append(_canonical_string(item))
        elif isinstance(item, int):
            out.append(str(item))
        elif isinstance(item, float):
            out.append(es_number(item))
        elif isinstance(item, dict):
            parts: list[Any] = [_Raw("{")]
            for index, key in enumerate(sorted(item, key=_canonical_key)):
                parts.append(_Raw(("," if index else "") + _canonical_string(key) + ":"))
                parts.append(item[key])
            parts.append(_Raw("}"))
            stack.extend(reversed(parts))
        elif isinstance(item, (list, tuple)):
            parts = [_Raw("[")]
            for index, element in enumerate(item):
                if index:
                    parts.append(_Raw(","))
                parts.append(element)
            parts.append(_Raw("]"))
            stack.extend(reversed(parts))
        else:
            raise ValidationError("NOT_CANONICALIZABLE", f"value cannot be canonicalised: {type(item).__name__}")
    return "".join(out).encode("utf-8")


def _canonical_key(key: Any) -> bytes:
    if not isinstance(key, str):
        raise ValidationError("NOT_CANONICALIZABLE", f"object key {key!r} is not a string")
    return _utf16_order(key)


def escape_lone_surrogates(text: str) -> str:
    """JSON text with each lone surrogate written as its `\\uXXXX` escape (valid UTF-8 again).

    A lone surrogate can only stand inside a JSON string, where the escape means the same.
    """
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def strings_in(value: Any) -> Iterator[str]:
    """Every string and object key anywhere in a decoded value (iteratively: any depth)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def has_lone_surrogate(text: str) -> bool:
    """True if `text` holds a lone UTF-16 surrogate (which UTF-8 cannot carry)."""
    return _LONE_SURROGATE.search(text) is not None
