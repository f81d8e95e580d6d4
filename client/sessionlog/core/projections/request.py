"""The request projection (SPEC §5): the exact model request of any log prefix, and its hash.

`{...header.config, "messages": model history, "tools": header.tools}` (tools omitted when the
header has none; no header means an empty config), serialised as RFC 8785 canonical JSON; the
sha256 is over those bytes. Two reads of the same prefix give the same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from sessionlog.core import jsonvalue
from sessionlog.core.events import Event, JsonObject
from sessionlog.core.headers import HeaderState, fold_headers
from sessionlog.core.projections.model_history import model_history


def build_request(header: JsonObject | None, messages: list[JsonObject]) -> JsonObject:
    """Assemble the request object from a header (or None) and the model history."""
    config = header.get("config") if header is not None else None
    request: JsonObject = dict(config) if isinstance(config, dict) else {}
    request["messages"] = messages
    tools = header.get("tools") if header is not None else None
    if tools:
        request["tools"] = tools
    else:
        request.pop("tools", None)
    return request


def encode_request(request: JsonObject) -> tuple[bytes, str]:
    """The canonical bytes of a request and their sha256 (hex)."""
    body = jsonvalue.canonical(request)
    return body, hashlib.sha256(body).hexdigest()


def request_view(latest: HeaderState | None, messages: list[JsonObject]) -> dict[str, Any]:
    """`{"request", "sha256", "headerSeq"}` for a header state and model history."""
    body = build_request(latest.header if latest is not None else None, messages)
    _, digest = encode_request(body)
    return {"request": body, "sha256": digest, "headerSeq": latest.seq if latest is not None else None}


def request(events: Sequence[Event]) -> dict[str, Any]:
    """The request of a log prefix: the latest header at or before its end plus its model history.

    Returns `{"request": {...}, "sha256": hex, "headerSeq": seq or None}`.
    """
    return request_view(fold_headers(events), model_history(events))
