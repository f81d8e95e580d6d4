"""Content-addressed blobs: large payload strings are stored once and referenced (SPEC §2).

`externalize` takes a payload out of an event's data before it is stored: each string over the
threshold (and, where the database cannot hold it in JSON, each string with a NUL character)
is moved to a blob keyed by the sha256 of its UTF-8 bytes, and its place in the data is
recorded as a path. `internalize` puts the strings back on read, so projections see the
payload exactly as it was appended.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sessionlog.core.errors import ValidationError

Path = list[str | int]


@dataclass(frozen=True, slots=True)
class Externalized:
    """An event's data as stored: the data with blob strings nulled, their paths, their bytes."""

    data: dict[str, Any]
    refs: list[list[Any]]
    """`[path, sha256]` pairs; empty when nothing moved to a blob."""
    blobs: dict[str, bytes]
    """sha256 -> UTF-8 content."""


def externalize(data: dict[str, Any], threshold: int) -> Externalized:
    """Move strings longer than `threshold` characters to blobs."""
    refs: list[list[Any]] = []
    blobs: dict[str, bytes] = {}

    def wants_blob(text: str) -> bool:
        return len(text) > threshold

    def walk(value: Any, path: Path) -> Any:
        if isinstance(value, str):
            if not wants_blob(value):
                return value
            content = value.encode("utf-8", "surrogatepass")  # a lone surrogate comes back as it was
            digest = hashlib.sha256(content).hexdigest()
            blobs[digest] = content
            refs.append([list(path), digest])
            return None
        if isinstance(value, dict):
            changed = {}
            for key, item in value.items():
                new = walk(item, [*path, key])
                if new is not item:
                    changed[key] = new
            if not changed:
                return value
            return {**value, **changed}
        if isinstance(value, list):
            items = [walk(item, [*path, i]) for i, item in enumerate(value)]
            if all(a is b for a, b in zip(items, value, strict=True)):
                return value
            return items
        return value

    if not _may_need_blob(data, threshold):
        return Externalized(data, [], {})
    try:
        stored = walk(data, [])
    except RecursionError:
        raise ValidationError("JSON_TOO_DEEP", "event data is nested too deeply to store", field="data") from None
    return Externalized(stored, refs, blobs)


def _may_need_blob(data: dict[str, Any], threshold: int) -> bool:
    """A cheap pre-check: walk only when some string could qualify."""
    stack: list[Any] = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if len(value) > threshold:
                return True
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def internalize(
    data: dict[str, Any], refs: list[list[Any]], fetch: Callable[[str], bytes] | Mapping[str, bytes]
) -> dict[str, Any]:
    """Put blob strings back at their paths (copying only the containers on those paths)."""
    if not refs:
        return data
    lookup = fetch.__getitem__ if isinstance(fetch, Mapping) else fetch
    root: Any = _copy_container(data)
    for path, digest in refs:
        node = root
        for key in path[:-1]:
            child = _copy_container(node[key])
            node[key] = child
            node = child
        node[path[-1]] = lookup(digest).decode("utf-8", "surrogatepass")
    result: dict[str, Any] = root
    return result


def _copy_container(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value
