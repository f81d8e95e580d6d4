"""JSON text as JavaScript's `JSON.stringify` writes it, so an exported Pi file matches Pi's bytes.

Python and JavaScript agree on strings (with `ensure_ascii=False`: `"`, `\\` and control
characters escaped, lowercase `\\u00xx`, everything else raw, U+2028/U+2029 included), but for a
lone UTF-16 surrogate, which JavaScript writes as its lowercase escape (`\\ud83d`, ES2019) and
Python leaves raw (text no UTF-8 file can hold); and on the shortest digits that round-trip a
double. They differ in how numbers are laid out:

- JavaScript writes a double in plain decimal when its decimal exponent is in [-7, 21)
  (`0.000009`, `100000000000000000000`) and in exponent form otherwise (`1e-7`, `1.5e+21`);
  Python's `repr` switches earlier (`9e-06`, `1e+16`).
- A double with an integral value has no fraction in JavaScript (`5`, not `5.0`), and `-0` is `0`.

`stringify` applies JavaScript's Number::toString rule to the digits Python's `repr` finds.
"""

from __future__ import annotations

from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any

from sessionlog.core.jsonvalue import escape_lone_surrogates, has_lone_surrogate


def js_number(value: float) -> str:
    """`String(value)` in JavaScript, for a finite double (ECMAScript Number::toString)."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # the shortest round-trip digits (the same in both languages), as value = 0.digits * 10**point
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    size = len(digits)
    point = size + exponent
    if size <= point <= 21:
        return sign + digits + "0" * (point - size)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * (-point) + digits
    power = point - 1
    exp_text = ("+" if power >= 0 else "-") + str(abs(power))
    if size == 1:
        return sign + digits + "e" + exp_text
    return sign + digits[0] + "." + digits[1:] + "e" + exp_text


def stringify(value: Any) -> str:
    """Compact JSON text of a JSON value, byte for byte as `JSON.stringify(value)`."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_string(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(js_number(value))
    elif isinstance(value, dict):
        out.append("{")
        first = True
        for key, item in value.items():
            if not first:
                out.append(",")
            first = False
            out.append(_string(str(key)))
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"not a JSON value: {type(value).__name__}")


def _string(text: str) -> str:
    """A JSON string as JSON.stringify writes it: a lone surrogate as its escape, as Pi's files
    hold it (a model's broken emoji), the rest as `encode_basestring` writes it."""
    encoded = encode_basestring(text)
    return escape_lone_surrogates(encoded) if has_lone_surrogate(text) else encoded
