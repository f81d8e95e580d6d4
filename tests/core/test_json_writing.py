"""`dumps`: orjson where it writes what the standard encoder would, the standard encoder where
only it can (big integers, lone surrogates, non-string keys, NaN to refuse); the same values
accepted, refused and written whichever path a value takes."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionlog.core.errors import ValidationError
from sessionlog.core.jsonvalue import dumps, dumps_bytes, dumps_bytes_fast, loads

FLOATS = st.floats(allow_nan=False, allow_infinity=False)
TEXT = st.text()  # lone surrogates included: the standard path's to write
LEAVES = st.none() | st.booleans() | FLOATS | st.integers() | TEXT
VALUES = st.recursive(
    LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=25
)


class Colour(enum.Enum):
    RED = "red"


@settings(max_examples=500)
@given(VALUES)
def test_every_path_writes_the_value_back_unchanged(value: Any) -> None:
    written = dumps_bytes(value)
    assert loads(written) == value
    assert dumps(value).encode("utf-8") == written
    assert loads(dumps_bytes_fast(value)) == loads(written)


@pytest.mark.parametrize("number", [-(2**63) - 1, -(10**19) + 1, -(10**20), 2**64, -(2**63), 2**64 - 1, 10**19 - 1])
def test_integers_past_64_bits_come_back_exact(number: int) -> None:
    # orjson reads an integer outside [-2**63, 2**64) as a float; a 19-digit negative one once
    # slipped past the check that sends such texts to the exact decoder.
    for text in (str(number), f'{{"n":[1,{number}]}}'):
        value = loads(text.encode())
        found = value if isinstance(value, int) else value["n"][1]
        assert type(found) is int and found == number


@pytest.mark.parametrize("non_finite", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("beside", [{}, {"other": None}])
def test_non_finite_numbers_are_refused_with_or_without_a_null_beside_them(
    non_finite: float, beside: dict[str, Any]
) -> None:
    """orjson writes NaN and the infinities as `null`: they must not get through as nulls."""
    for write in (dumps, dumps_bytes):
        with pytest.raises(ValidationError, match="not lossless JSON"):
            write({"x": non_finite, **beside})


@pytest.mark.parametrize("beside", [{}, {"other": None}, {1: "an int key"}])
def test_enum_members_and_uuids_are_written_alike_on_both_paths(beside: dict[Any, Any]) -> None:
    """A null or an int key sends a value to the standard encoder; it must accept what orjson
    accepts, the same way."""
    token = uuid.UUID("12345678-1234-5678-1234-567812345678")
    written = json.loads(dumps_bytes({"colour": Colour.RED, "id": token, **beside}))
    assert written["colour"] == "red" and written["id"] == str(token)


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize("value", [datetime.datetime(2026, 1, 1), datetime.date(2026, 1, 1), Point(1), object()])
def test_values_the_standard_encoder_refuses_stay_refused(value: object) -> None:
    """orjson would write a datetime or a dataclass; the product never has."""
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_bytes({"v": value})


def test_what_only_the_standard_encoder_writes_comes_out_exact() -> None:
    assert dumps_bytes({"n": 2**70}) == b'{"n":1180591620717411303424}'
    assert dumps_bytes({"s": "\ud83d"}) == b'{"s":"\\ud83d"}'
    assert dumps_bytes({1: True}) == b'{"1":true}'
    deep: list[Any] = []
    for _ in range(300):  # past orjson's 255 levels
        deep = [deep]
    assert dumps_bytes(deep) == b"[" * 301 + b"]" * 301
