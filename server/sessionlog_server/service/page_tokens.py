"""Page tokens (AIP-158): opaque to clients, and each continues only the request it came from.

A token is a JSON list, base64url-encoded. What it continues is tagged in it (`request_tag`: the
caller's namespace, and the session of a history or transcript page or the parent filter of a
session listing), so a token presented with another request, or by a caller of another
namespace, is refused (BAD_PAGE_TOKEN) instead of reading that request from the first one's
position. A token is opaque, not secret: it holds what the caller may see (its own session ids,
`access.public_id`), never the service's key (`namespace:id`), which is rebuilt from the caller's
namespace when the token comes back.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from sessionlog.core import jsonvalue
from sessionlog.core.errors import SessionLogError, ValidationError
from sessionlog_server.service import access


def encode_token(fields: list[Any]) -> str:
    """The token of `fields` (JSON values)."""
    return base64.urlsafe_b64encode(jsonvalue.dumps_bytes(fields)).decode("ascii")


def decode_token(token: str, length: int) -> list[Any]:
    """The `length` fields of a token `encode_token` made; anything else is BAD_PAGE_TOKEN."""
    try:
        value = jsonvalue.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (ValueError, TypeError, SessionLogError):
        raise unissued_token() from None
    if not isinstance(value, list) or len(value) != length:
        raise unissued_token()
    return value


def unissued_token() -> ValidationError:
    """BAD_PAGE_TOKEN for a token this service did not issue (or that a client altered)."""
    return ValidationError("BAD_PAGE_TOKEN", "page_token is not a token this service issued", field="page_token")


def request_tag(value: str | None) -> str:
    """What a token keeps of the request it continues (a session id, a listing's parent filter
    or None): enough to tell a token of another request apart, without carrying the id itself.
    The caller's namespace is part of the request: two tenants may each have a session `s1`,
    and a token handed to the other one read its `s1` (or its listing) from the first's place."""
    request = jsonvalue.dumps([access.current().namespace, value])
    return hashlib.sha256(request.encode("utf-8", "surrogatepass")).hexdigest()[:12]
