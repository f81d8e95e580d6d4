"""JSON text for the session page and its windows: compact, and UTF-8 whatever the log holds.

The service takes a string holding a lone UTF-16 surrogate (JSON's `"\\ud83d"`, which Python
reads as a str no UTF-8 encoder takes), and the transcript, export and OTLP carry it. Written
raw into the page, the page could not be encoded: `view` failed naming the whole page as an
argument that is not UTF-8, the served page ended "internal error", and its JSON windows too.
JSON carries such a character as a `\\u` escape, as it came in; a browser's JSON.parse reads it
back as the same UTF-16 unit.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_text(value: Any) -> str:
    """Compact JSON text of `value` (orjson; the standard library for what orjson refuses, such
    as an integer past 64 bits or a lone surrogate, which is then written as its escape)."""
    try:
        return orjson.dumps(value).decode("utf-8")
    except (orjson.JSONEncodeError, TypeError):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _SURROGATE.sub(_escaped, text)


__all__ = ["json_text"]
