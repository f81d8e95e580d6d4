"""Where a Pi entry lives in the events of an imported session: the layout import and export share.

Every Pi entry on a branch becomes exactly one **primary event**, which carries the entry so that
export can rebuild it exactly (id, parentId, timestamp, unknown fields and all):

- a few fields are **lifted** to the top of `data`, where the service and people read them
  (`provider`/`modelId` of a model change, which the stats fold reads; the `summary` of a
  compaction, which SPEC §3 puts on `compaction/summary`; a label's `targetId`/`label`; …);
- fields that the event's model message already holds are **not stored twice**: a `message`
  entry's `message` is `data.message`; a custom message's `customType`/`content`/`display`/
  `details` and a branch summary's `summary`/`fromId` are read back from the message Pi's context
  builds from them (built field by field, so a field is in the message exactly when it is in the
  entry);
- **everything else**, the base fields `type`, `id`, `parentId`, `timestamp` included, is
  `data.pi`.

Rebuilding is `{**data.pi, **lifted fields present in data, **fields read back from the message}`,
keys put in the order Pi writes them (`ENTRY_KEY_ORDER`; unknown keys after, in stored order). A
PostgreSQL JSONB column does not keep key order, which is why the order of entries and of the
header is restored by rule; objects nested inside them (messages, content blocks) come back in the
order the storage gives, so an export from PostgreSQL equals Pi's file as JSON, not byte for byte.

Other events the importer writes (turn and step brackets, compaction landings, model-only copies)
carry no `data.pi`, so "the events that carry `data.pi`, in seq order" is the branch, entry by
entry. The session header is the `data.pi` of one ignorable `pi/session` event.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sessionlog.core.formats.pi.entries import (
    BRANCH_SUMMARY,
    COMPACTION,
    CONTEXT_EDIT,
    CUSTOM,
    CUSTOM_MESSAGE,
    LABEL,
    MESSAGE,
    MODEL_CHANGE,
    SESSION_INFO,
    THINKING_LEVEL_CHANGE,
    USAGE,
    JsonObject,
)

PI_KEY = "pi"
"""`data.pi`: the entry (or header) fields that are not stored elsewhere in the event."""

PI_SESSION = "pi/session"
"""The ignorable event whose `data.pi` is the session header."""

BASE_KEYS: tuple[str, ...] = ("type", "id", "parentId", "timestamp")

LIFTED_KEYS: dict[str, tuple[str, ...]] = {
    MODEL_CHANGE: ("provider", "modelId"),
    THINKING_LEVEL_CHANGE: ("thinkingLevel",),
    COMPACTION: ("summary", "firstKeptEntryId", "tokensBefore", "usage"),
    BRANCH_SUMMARY: ("fromId", "summary", "usage"),
    LABEL: ("targetId", "label"),
    SESSION_INFO: ("name",),
    CUSTOM: ("customType", "data"),
    USAGE: ("kind", "provider", "model", "usage", "note"),
    CONTEXT_EDIT: ("targetId", "replacement"),
}
"""Entry fields stored at the top of the primary event's `data` (when present in the entry)."""

MESSAGE_KEYS: dict[str, tuple[str, ...]] = {
    CUSTOM_MESSAGE: ("customType", "content", "display", "details"),
    BRANCH_SUMMARY: ("summary", "fromId"),
}
"""Entry fields read back from the model message a surface primary event carries."""

ENTRY_KEY_ORDER: dict[str, tuple[str, ...]] = {
    MESSAGE: (*BASE_KEYS, "message"),
    MODEL_CHANGE: (*BASE_KEYS, "provider", "modelId"),
    THINKING_LEVEL_CHANGE: (*BASE_KEYS, "thinkingLevel"),
    COMPACTION: (*BASE_KEYS, "summary", "firstKeptEntryId", "tokensBefore", "details", "fromHook", "usage"),
    BRANCH_SUMMARY: (*BASE_KEYS, "fromId", "summary", "details", "fromHook", "usage"),
    CUSTOM: ("type", "customType", "data", "id", "parentId", "timestamp"),
    CUSTOM_MESSAGE: ("type", "customType", "content", "display", "details", "id", "parentId", "timestamp"),
    LABEL: (*BASE_KEYS, "targetId", "label"),
    SESSION_INFO: (*BASE_KEYS, "name"),
}
"""The key order of each entry type as Pi 0.73 writes it (observed in files Pi wrote)."""

HEADER_KEY_ORDER: tuple[str, ...] = ("type", "version", "id", "timestamp", "cwd", "parentSession")
"""The key order of the session header as Pi writes it."""


def split_entry(entry: JsonObject, *, in_message: Iterable[str] = ()) -> tuple[JsonObject, JsonObject]:
    """`(lifted, pi)`: the fields to put at the top of `data`, and the rest for `data.pi`.

    `in_message` names fields the event's model message already holds (left out of both).
    For a `message` entry pass `in_message=("message",)`.
    """
    kind = entry.get("type")
    lifted_names = LIFTED_KEYS.get(kind, ()) if isinstance(kind, str) else ()
    skip = set(in_message)
    lifted: JsonObject = {}
    pi: JsonObject = {}
    for key, value in entry.items():
        if key in skip:
            continue
        if key in lifted_names:
            lifted[key] = value
        else:
            pi[key] = value
    return lifted, pi


def rebuild_entry(data: JsonObject) -> JsonObject:
    """The Pi entry a primary event's `data` stands for (see the module docstring)."""
    pi = data[PI_KEY]
    kind = pi.get("type")
    entry: JsonObject = dict(pi)
    if kind == MESSAGE:
        entry["message"] = data.get("message")
    if isinstance(kind, str):
        for key in LIFTED_KEYS.get(kind, ()):
            if key in data:
                entry[key] = data[key]
        message = data.get("message")
        if isinstance(message, dict):
            for key in MESSAGE_KEYS.get(kind, ()):
                if key in message:
                    entry[key] = message[key]
    return order_entry(entry)


def order_entry(entry: JsonObject) -> JsonObject:
    """The entry's keys in the order Pi writes them; unknown keys after, in their given order."""
    kind = entry.get("type")
    order = ENTRY_KEY_ORDER.get(kind, BASE_KEYS) if isinstance(kind, str) else BASE_KEYS
    return _ordered(entry, order)


def order_header(header: JsonObject) -> JsonObject:
    """The header's keys in the order Pi writes them; others (v1 extras, newer fields) after."""
    return _ordered(header, HEADER_KEY_ORDER)


def _ordered(obj: JsonObject, order: tuple[str, ...]) -> JsonObject:
    out: JsonObject = {key: obj[key] for key in order if key in obj}
    for key, value in obj.items():
        if key not in out:
            out[key] = value
    return out


def entry_of(data: JsonObject) -> Any:
    """`data.pi` when it is an entry (an object with a string `type`), else None."""
    pi = data.get(PI_KEY)
    if isinstance(pi, dict) and isinstance(pi.get("type"), str):
        return pi
    return None
