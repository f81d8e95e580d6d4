"""Lossless JSON (SPEC §2): parse strictly, serialise one way, hash canonically.

Payloads must survive a round trip unchanged: integers stay integers, and values JSON cannot
carry (NaN, Infinity, lone UTF-16 surrogates) are refused at the door instead of being
stored and failing later. `dumps` is the one storage/wire form; `canonical` is RFC 8785 for
hashing requests (SPEC §5).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import orjson
import rfc8785

from sessionlog.core.errors import ValidationError


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
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


#: orjson turns integers past 64 bits into floats; text with a run of 20 digits takes the slow
#: path. Mapping digits to b"1" and everything else to b"0" makes the check one C-speed search.
_DIGIT_MAP = bytes(0x31 if 0x30 <= i <= 0x39 else 0x30 for i in range(256))
_LONG_RUN = b"1" * 20


def loads(text: str | bytes, *, what: str = "JSON") -> Any:
    """Parse JSON text strictly: no NaN/Infinity, valid UTF-8, no lone surrogates.

    Bytes go through orjson first (it refuses everything this function refuses, several times
    faster); anything it refuses, and any text holding a number too long for 64 bits, is
    parsed by the standard library, which keeps big integers exact and names the problem.
    """
    if isinstance(text, bytes) and _LONG_RUN not in text.translate(_DIGIT_MAP):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass  # the strict path below says what is wrong (or accepts what orjson cannot)
    try:
        if isinstance(text, (bytes, bytearray, memoryview)):
            text = bytes(text).decode("utf-8")
        value = STRICT_DECODER.decode(text)
    except UnicodeDecodeError as exc:
        raise ValidationError("INVALID_UTF8", f"{what} is not valid UTF-8: {exc.reason}") from None
    except json.JSONDecodeError as exc:
        raise ValidationError("MALFORMED_JSON", f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValidationError("JSON_TOO_DEEP", f"{what} is nested too deeply") from None
    if "\\u" in text and has_lone_surrogate(value):
        raise ValidationError("INVALID_UTF8", f"{what} contains a lone UTF-16 surrogate escape")
    return value


def dumps(value: Any) -> str:
    """The compact storage and wire form (UTF-8 text, no ASCII escaping, no NaN)."""
    try:
        return _ENCODER.encode(value)
    except ValueError as exc:
        raise ValidationError("NON_FINITE_NUMBER", f"value is not lossless JSON: {exc}") from None
    except RecursionError:
        raise ValidationError("JSON_TOO_DEEP", "value is nested too deeply") from None


def dumps_bytes(value: Any) -> bytes:
    """`dumps` encoded as UTF-8; a lone surrogate in a string is refused here."""
    try:
        return dumps(value).encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError("INVALID_UTF8", "a string contains a lone UTF-16 surrogate") from None


def canonical(value: Any) -> bytes:
    """RFC 8785 (JCS) canonical bytes, used for request hashes."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, ValueError, TypeError) as exc:
        raise ValidationError("NOT_CANONICALIZABLE", f"value cannot be canonicalised: {exc}") from None


def has_lone_surrogate(value: Any) -> bool:
    """True if a string (or key) anywhere in `value` holds a lone UTF-16 surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
