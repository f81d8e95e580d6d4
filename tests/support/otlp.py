"""Reading an OTLP/JSON traces document in tests: its spans, their times and attributes."""

from __future__ import annotations

from typing import Any


def spans_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The spans of a document holding one resource and one scope (what the export writes)."""
    spans: list[dict[str, Any]] = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    return spans


def span_ms(span: dict[str, Any]) -> tuple[int, int]:
    """A span's start and end in epoch ms (OTLP/JSON writes nanoseconds as decimal strings)."""
    return int(span["startTimeUnixNano"]) // 1_000_000, int(span["endTimeUnixNano"]) // 1_000_000


def span_attr(span: dict[str, Any], key: str) -> Any:
    """The value of attribute `key` (None when absent); an OTLP/JSON intValue as an int."""
    value = next((item["value"] for item in span["attributes"] if item["key"] == key), None)
    if value is None:
        return None
    return int(value["intValue"]) if "intValue" in value else next(iter(value.values()))
