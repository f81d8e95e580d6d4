"""Request headers (SPEC §6): the canonical form, the service's logging decision, and the fold.

A harness reports the header it is about to use; `decide_header` (a port of dsh's three
branches in `agent.ts`) decides whether and why the service logs it, so a wrong reason can
never be written. `check_header_event` re-checks a logged `request/header` against the log, so
a hand-built event with a reason that contradicts the log is refused as well.

Headers are compared by RFC 8785 canonical JSON. A header is a full snapshot
`{config, adapterDefaults?, tools?}`; non-canonical forms (a `system` key, `tools: []`,
`adapterDefaults: {}`, unknown keys) are refused, not normalised, as in dsh v3.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sessionlog.core import jsonvalue
from sessionlog.core.errors import ValidationError
from sessionlog.core.events import Event, JsonObject, Replace
from sessionlog.core.vocabulary import REQUEST_HEADER

HEADER_KEYS: frozenset[str] = frozenset({"config", "adapterDefaults", "tools"})
HEADER_REASONS: tuple[str, ...] = ("initial", "resume", "change", "series")
HEADER_EVENT_KEYS: frozenset[str] = frozenset({"header", "reason", "startsSeries"})
NOT_SENT_KEYS: frozenset[str] = frozenset({"adapterDefaults"})
"""Header keys the request (SPEC §5, `{...config, messages, tools}`) does not carry."""
RESERVED_CONFIG_KEYS: tuple[str, ...] = ("messages", "tools")
"""Keys the request (SPEC §5, `{...config, messages, tools}`) sets itself, so a config may not hold them."""


@dataclass(frozen=True, slots=True)
class HeaderState:
    """The latest logged header: its seq, the header, and the surface generation at that time."""

    seq: int
    header: JsonObject
    generation: int
    reason: str = "initial"
    starts_series: bool = False
    canonical: bytes = field(default=b"", repr=False, compare=False)

    def canonical_bytes(self) -> bytes:
        """The header's canonical JSON (cached when built by `header_state`)."""
        return self.canonical or jsonvalue.canonical(self.header)


@dataclass(frozen=True, slots=True)
class HeaderDecision:
    """What the service does with a reported header.

    `reason` is None when nothing is appended (the latest header's seq is returned).
    `starts_series` is true when the surface generation moved since the latest header
    (so for `series` too, and for `initial/resume/change` it is written as
    `startsSeries: true`). `changed_fields` names what differs from the latest header:
    top-level config keys, `"adapterDefaults"`, `"tools"` (empty when there is none).
    `data_to_append` is the `request/header` event data, or None.
    """

    reason: str | None
    starts_series: bool
    changed_fields: list[str]
    data_to_append: JsonObject | None


def check_header(header: Any) -> None:
    """A header is `{config, adapterDefaults?, tools?}` in canonical form."""
    if not isinstance(header, dict):
        raise ValidationError("HEADER_NOT_OBJECT", "request header must be a JSON object", field="header")
    if "system" in header:
        raise ValidationError(
            "HEADER_SYSTEM_FORBIDDEN",
            "request header: the system prompt is not part of the header; it is surface node 0",
            field="header.system",
        )
    unknown = sorted(set(header) - HEADER_KEYS)
    if unknown:
        raise ValidationError(
            "HEADER_UNKNOWN_KEY",
            f"request header: unknown keys {unknown}; a header is {{config, adapterDefaults?, tools?}}",
            field="header",
        )
    if not isinstance(header.get("config"), dict):
        raise ValidationError(
            "HEADER_CONFIG_MISSING", "request header: config must be a JSON object", field="header.config"
        )
    check_header_config_keys(header["config"])
    check_header_tools(header)
    check_header_adapter_defaults(header)


def check_header_config_keys(config: JsonObject) -> None:
    """`config` holds no key the request sets itself: the request is `{...config, messages,
    tools}`, so a `config.tools` (an OpenAI-style config) would be dropped or overwritten and a
    `config.messages` replaced by the model history, and the request view and its sha256 would
    not show what the harness sent, while the header log still reported the change."""
    for key in RESERVED_CONFIG_KEYS:
        if key in config:
            raise ValidationError(
                "HEADER_CONFIG_RESERVED_KEY",
                f"request header: config may not hold {key!r}: the request sets it "
                "(tool schemas go in the header's tools, messages are the session's surface)",
                field=f"header.config.{key}",
            )


def check_header_tools(header: JsonObject) -> None:
    """`tools`, when present, is a non-empty list (absent means no tools)."""
    if "tools" not in header:
        return
    tools = header["tools"]
    if not isinstance(tools, list):
        raise ValidationError("HEADER_BAD_TOOLS", "request header: tools must be a list", field="header.tools")
    if not tools:
        raise ValidationError(
            "HEADER_EMPTY_TOOLS",
            "request header: tools: [] is not canonical; leave tools out when there are none",
            field="header.tools",
        )


def check_header_adapter_defaults(header: JsonObject) -> None:
    """`adapterDefaults`, when present, is a non-empty object."""
    if "adapterDefaults" not in header:
        return
    defaults = header["adapterDefaults"]
    if not isinstance(defaults, dict):
        raise ValidationError(
            "HEADER_BAD_ADAPTER_DEFAULTS",
            "request header: adapterDefaults must be a JSON object",
            field="header.adapterDefaults",
        )
    if not defaults:
        raise ValidationError(
            "HEADER_EMPTY_ADAPTER_DEFAULTS",
            "request header: adapterDefaults: {} is not canonical; leave it out when empty",
            field="header.adapterDefaults",
        )


def _canon(value: Any) -> bytes:
    return jsonvalue.canonical(value)


def changed_fields(previous: JsonObject, header: JsonObject) -> list[str]:
    """Top-level config keys (sorted), then `adapterDefaults`, then `tools`, that differ."""
    old_config: JsonObject = previous.get("config") or {}
    new_config: JsonObject = header.get("config") or {}
    changed = [
        key
        for key in sorted(set(old_config) | set(new_config))
        if key not in old_config or key not in new_config or _canon(old_config[key]) != _canon(new_config[key])
    ]
    for key in ("adapterDefaults", "tools"):
        if _canon(previous.get(key)) != _canon(header.get(key)):
            changed.append(key)
    return changed


def request_changed_fields(previous: JsonObject, header: JsonObject) -> list[str]:
    """`changed_fields` the request carries: what a header change changes in the request's
    bytes. A change of `adapterDefaults` alone is logged, but the request stays byte for byte
    the same, so a prompt cache cannot miss because of it."""
    return [name for name in changed_fields(previous, header) if name not in NOT_SENT_KEYS]


def decide_header(
    latest: HeaderState | None, header: JsonObject, *, first_of_lease: bool, generation: int
) -> HeaderDecision:
    """Whether and why to log a reported header (SPEC §6; dsh's three branches).

    1. The first header of a writer lease is always logged: `initial` on a session without a
       header, else `resume` (an instance boundary cannot be derived from the values).
    2. Otherwise a header that differs from the latest is a `change` (`initial` if none).
    3. Otherwise, if `replaceGeneration` moved since the latest header, a `series` begins.
    4. Otherwise nothing is appended.
    """
    check_header(header)
    moved = latest is not None and generation != latest.generation
    differs = latest is None or _canon(header) != latest.canonical_bytes()
    fields = changed_fields(latest.header, header) if latest is not None and differs else []
    reason: str | None
    if first_of_lease or latest is None:
        reason = "initial" if latest is None else "resume"
    elif differs:
        reason = "change"
    elif moved:
        reason = "series"
    else:
        return HeaderDecision(None, False, [], None)
    data: JsonObject = {"header": header, "reason": reason}
    if moved and reason != "series":
        data["startsSeries"] = True
    return HeaderDecision(reason, moved, fields, data)


def check_header_event(latest: HeaderState | None, event: Event, *, generation: int) -> None:
    """A logged `request/header` has a canonical header and the reason the log implies.

    The lease boundary is not in the log, so `resume` is accepted whenever a header exists;
    every other reason is fully determined by the latest header and the surface generation.
    """
    data = event.data
    unknown = sorted(set(data) - HEADER_EVENT_KEYS)
    if unknown:
        raise ValidationError(
            "HEADER_EVENT_UNKNOWN_KEY",
            f"request/header at seq {event.seq}: unknown data keys {unknown}",
            field="data",
            seq=event.seq,
        )
    header = data.get("header")
    check_header(header)
    assert isinstance(header, dict)
    reason = data.get("reason")
    if reason not in HEADER_REASONS:
        raise ValidationError(
            "HEADER_REASON_UNKNOWN",
            f"request/header at seq {event.seq}: reason must be one of {list(HEADER_REASONS)}, got {reason!r}",
            field="data.reason",
            seq=event.seq,
        )
    check_header_reason(latest, event, header, str(reason), generation)
    check_starts_series(latest, event, str(reason), generation)


def check_header_reason(
    latest: HeaderState | None, event: Event, header: JsonObject, reason: str, generation: int
) -> None:
    """`initial` iff no header yet; `change` differs; `series` is equal with a moved generation."""
    if latest is None:
        ok, why = reason == "initial", "the session has no header yet, so the reason is initial"
    elif reason == "initial":
        ok, why = False, f"the session already has a header (seq {latest.seq})"
    elif reason == "change":
        ok, why = (
            _canon(header) != latest.canonical_bytes(),
            f"it equals the latest header (seq {latest.seq})",
        )
    elif reason == "series":
        ok = _canon(header) == latest.canonical_bytes() and generation != latest.generation
        why = f"series needs an unchanged header and a moved replaceGeneration (seq {latest.seq})"
    else:
        ok, why = True, ""
    if not ok:
        raise ValidationError(
            "HEADER_REASON_WRONG",
            f"request/header at seq {event.seq}: reason {reason!r} is wrong: {why}",
            field="data.reason",
            seq=event.seq,
            header_reason=reason,
        )


def check_starts_series(latest: HeaderState | None, event: Event, reason: str, generation: int) -> None:
    """`startsSeries: true` is present exactly when an initial/resume/change header also
    begins a series (the generation moved since the latest header); never on `series`."""
    value = event.data.get("startsSeries")
    moved = latest is not None and generation != latest.generation
    expected = moved and reason != "series"
    if (value is not None and value is not True) or (value is True) != expected:
        raise ValidationError(
            "HEADER_STARTS_SERIES_WRONG",
            f"request/header at seq {event.seq}: startsSeries must be "
            f"{'true' if expected else 'absent'} for reason {reason!r} "
            f"({_generations(latest, generation)})",
            field="data.startsSeries",
            seq=event.seq,
        )


def _generations(latest: HeaderState | None, generation: int) -> str:
    """What decides `startsSeries`, in words: the surface's replace generation now and at the
    latest header, that header named by its seq (a bare number after "the latest header" read
    as its seq)."""
    if latest is None:
        return f"the surface's replaceGeneration is {generation}, and no header was logged before"
    moved = "it moved since" if generation != latest.generation else "it has not moved since"
    return (
        f"the surface's replaceGeneration is {generation}, and was {latest.generation} at the latest "
        f"header, seq {latest.seq}: {moved}"
    )


def header_state(event: Event, *, generation: int) -> HeaderState:
    """The `HeaderState` a `request/header` event establishes."""
    header = event.data.get("header")
    header = header if isinstance(header, dict) else {}
    return HeaderState(
        seq=event.seq,
        header=header,
        generation=generation,
        reason=str(event.data.get("reason", "")),
        starts_series=event.data.get("startsSeries") is True,
        canonical=jsonvalue.canonical(header),
    )


def header_state_from_parts(seq: int, header: JsonObject, generation: int, reason: str, starts: bool) -> HeaderState:
    """A `HeaderState` rebuilt from its stored parts (a fold snapshot), canonical form included."""
    return HeaderState(seq, header, generation, reason, starts, jsonvalue.canonical(header))


def fold_headers(events: Iterable[Event]) -> HeaderState | None:
    """The latest header of a log prefix (pure); the generation is the count of replaces before it."""
    latest: HeaderState | None = None
    generation = 0
    for event in events:
        if isinstance(event.surface_op, Replace):
            generation += 1
        elif event.type == REQUEST_HEADER:
            latest = header_state(event, generation=generation)
    return latest
