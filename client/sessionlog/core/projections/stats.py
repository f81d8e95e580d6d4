"""Derived metrics (SPEC §5 Stats): counts, tokens and cost, recomputable from the log.

`StatsAccumulator.add(event)` is the one per-event rule; `stats(events)` (the reference for
`at_seq` reads) and `SessionFold` (incremental) both fold it, so they cannot disagree.

Choices, each recomputable if it proves wrong (SPEC §1.6):

- **usage** is summed over every event that carries one: `data.usage`, or, when absent,
  `data.message.usage` (Pi keeps an assistant message's usage inside the message, and a tool
  result's nested model work too). Not counted: surface *replace* events and appended model-only
  *copies* (`data.source.kind == "copy"`): they restate another event's data, and counting them
  would bill the same call twice. Usage is read and cost summed by `sessionlog.core.usage`
  (the rule the Pi and export replays use too): exact sums, reported to 12 decimals.
- **unpricedEvents**: events whose usage has tokens but no cost (`usage.is_unpriced`: the
  harness had no pricing for the model). `costUsd` leaves them out, so it is a lower bound
  whenever this is not 0; a cost of 0 (a free model) is a price and is not counted here.
- **model / provider**: the latest by seq of `request/context` `{provider, model}`, a
  `request/header`'s `config.{provider, model}`, an appended assistant message's
  `message.{provider, model}`, and Pi's ignorable `pi/model_change {provider, modelId}`.
- **thinkingLevel**: the latest of a `request/header`'s `config.thinkingLevel` (else
  `config.reasoningEffort`) and Pi's ignorable `pi/thinking_level_change {thinkingLevel}`.
- **turns** vs **modelCalls**: a turn is one run of the agent loop (`turn/start`); a model call
  is one assistant message (an appended surface event whose message has role `assistant`,
  whatever its type) or one `assistant/attempt`. A turn usually makes several model calls.
- **toolCalls**: `toolCall` blocks of appended assistant messages (what the model asked for;
  Pi logs have no `tool/call` events), `tool_call_count`, which the session page's timeline
  counts by too. **toolErrors**: appended tool results with
  `message.isError` true (repair's synthetic errors included), whether or not the call they
  answer was seen open (`is_tool_error`, which the session page's timeline counts by too).
  Copies and replaces excluded.
  An assistant message or tool result is one by its event type or by its message's role, so the
  importers' fallback `user/message`s (`vocabulary.KEPT_AS_SEEN`) count as what they carry.
- **compactions**: `max(compaction/summary events, compaction landings)`, where a landing is
  a replace event with `data.source.kind == "compaction"`. dsh writes both for one compaction,
  an importer may write only one of them; either way each compaction counts once.
- **replaces**: replace events. **messages**: messages on the surface now (model history).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sessionlog.core.events import Event, JsonObject
from sessionlog.core.messages import (
    COMPACTION_SOURCE_KIND,
    is_copy,
    is_replace,
    message_of,
    message_tool_calls,
    source_kind,
)
from sessionlog.core.projections.model_history import model_history
from sessionlog.core.usage import CostSum, is_unpriced, number, usage_cost
from sessionlog.core.vocabulary import (
    ASSISTANT_ATTEMPT,
    ASSISTANT_MESSAGE,
    COMPACTION_SUMMARY,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    STEP_START,
    TOOL_RESULT,
    TURN_START,
)

PI_MODEL_CHANGE = "pi/model_change"
PI_THINKING_LEVEL_CHANGE = "pi/thinking_level_change"

STATS_KEYS: tuple[str, ...] = (
    "events",
    "model",
    "provider",
    "thinkingLevel",
    "messages",
    "turns",
    "modelCalls",
    "steps",
    "toolCalls",
    "toolErrors",
    "compactions",
    "replaces",
    "inputTokens",
    "outputTokens",
    "cacheReadTokens",
    "cacheWriteTokens",
    "costUsd",
    "unpricedEvents",
)
"""The stats read model's keys, in order: the name of each figure in every output that shows
it (`replay --json`, the session page's data), a figure of another meaning never reusing one."""

LABEL_EXCEPTIONS: dict[str, str] = {"thinkingLevel": "thinking"}
"""Labels that are not the key's words: SPEC §11 names the thinking level's line "thinking"."""


def figure_label(key: str) -> str:
    """The label a person reads for the figure `key` (`cacheReadTokens` -> "cache read tokens",
    `costUsd` -> "cost usd"), the same in `sessionlog replay`'s table and on the session page."""
    return LABEL_EXCEPTIONS.get(key) or re.sub(r"(?<!^)([A-Z])", r" \1", key).lower()


def name_text(value: Any) -> str | None:
    """`value` if it is a non-empty string (a model, provider or level name), else None."""
    return value if isinstance(value, str) and value else None


def usage_of(event: Event) -> JsonObject | None:
    """The usage an event carries: `data.usage`, else `data.message.usage`; None for replaces
    and copies (they restate another event)."""
    return _usage_of(event, is_replace(event), is_copy(event), message_of(event))


def _usage_of(event: Event, replace: bool, copy: bool, message: JsonObject | None) -> JsonObject | None:
    """`usage_of`, given the event's facts (`StatsAccumulator.add` derives them once)."""
    if replace or copy:
        return None
    usage = event.data.get("usage")
    if isinstance(usage, dict):
        return usage
    usage = message.get("usage") if message is not None else None
    return usage if isinstance(usage, dict) else None


def is_model_call(event: Event) -> bool:
    """One model call (see `modelCalls` above): an `assistant/attempt`, or an appended surface
    event (not a copy) whose message has role `assistant`. The timeline's requests are these."""
    return _is_model_call(event, is_replace(event), is_copy(event), message_of(event))


def _is_model_call(event: Event, replace: bool, copy: bool, message: JsonObject | None) -> bool:
    """`is_model_call`, given the event's facts (`StatsAccumulator.add` derives them once)."""
    if event.type == ASSISTANT_ATTEMPT:
        return True
    if event.surface_op is None or replace or copy:
        return False
    return message is not None and message.get("role") == "assistant"


def tool_call_count(event: Event) -> int:
    """The tool calls an event adds (see `toolCalls` above): the `toolCall` blocks of an appended
    assistant message (not a copy or replace), whatever event carries it. The one rule for the
    figure: `stats` and the timeline's `counts` (the session page) both count by it."""
    return _tool_call_count(event, is_replace(event), is_copy(event), message_of(event))


def _tool_call_count(event: Event, replace: bool, copy: bool, message: JsonObject | None) -> int:
    """`tool_call_count`, given the event's facts (`StatsAccumulator.add` derives them once).

    An assistant message by its event type or by its message's role (as `modelCalls` counts it):
    an importer's fallback `user/message` keeps a Pi assistant message unchanged
    (`vocabulary.KEPT_AS_SEEN`, `pi-unstructured` when its calls lack ids or repeat one), and its
    tool calls are the model's as much as those of an `assistant/message`."""
    if event.surface_op is None or replace or copy or message is None:
        return 0
    if event.type == ASSISTANT_MESSAGE or message.get("role") == "assistant":
        return len(message_tool_calls(message))
    return 0


def is_tool_error(event: Event) -> bool:
    """One tool error (see `toolErrors` above): an appended tool result (not a copy or replace)
    whose message has `isError` true, whether or not the call it answers was seen open. The one
    rule for the figure: `stats` and the timeline's `counts` (the session page) both count it."""
    return _is_tool_error(event, is_replace(event), is_copy(event), message_of(event))


def _is_tool_error(event: Event, replace: bool, copy: bool, message: JsonObject | None) -> bool:
    """`is_tool_error`, given the event's facts (`StatsAccumulator.add` derives them once).

    A tool result by its event type or by its message's role: an importer's fallback
    `user/message` keeps a Pi tool result unchanged (`vocabulary.KEPT_AS_SEEN`), and its error
    is the tool's as much as that of a `tool/result` event."""
    if event.surface_op is None or replace or copy or message is None:
        return False
    is_result = event.type == TOOL_RESULT or message.get("role") == "toolResult"
    return is_result and message.get("isError") is True


@dataclass(slots=True)
class StatsAccumulator:
    """Running totals of the per-event stats (not the surface-derived ones)."""

    model: str | None = None
    provider: str | None = None
    thinking_level: str | None = None
    turns: int = 0
    model_calls: int = 0
    steps: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    summaries: int = 0
    landings: int = 0
    replaces: int = 0
    input_tokens: int | float = 0
    output_tokens: int | float = 0
    cache_read_tokens: int | float = 0
    cache_write_tokens: int | float = 0
    cost_partials: list[float] = field(default_factory=list)
    """The exact running cost (`usage.CostSum`'s partials: plain data, so snapshots store it)."""
    unpriced_events: int = 0
    """Events whose usage has tokens but no price (`usage.is_unpriced`): their cost is unknown,
    not 0, and `costUsd` leaves it out."""

    def copy(self) -> StatsAccumulator:
        """A snapshot to restore on rollback (sums restored exactly, never subtracted)."""
        return StatsAccumulator(
            self.model,
            self.provider,
            self.thinking_level,
            self.turns,
            self.model_calls,
            self.steps,
            self.tool_calls,
            self.tool_errors,
            self.summaries,
            self.landings,
            self.replaces,
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            list(self.cost_partials),
            self.unpriced_events,
        )

    def add(self, event: Event) -> None:
        """Fold one event into the totals."""
        kind = event.type
        data = event.data
        if kind == TURN_START:
            self.turns += 1
        elif kind == STEP_START:
            self.steps += 1
        elif kind == COMPACTION_SUMMARY:
            self.summaries += 1
        elif kind in (REQUEST_CONTEXT, PI_MODEL_CHANGE):
            self._route(data.get("provider"), data.get("model") or data.get("modelId"))
        elif kind == REQUEST_HEADER:
            self._header(data)
        elif kind == PI_THINKING_LEVEL_CHANGE:
            self.thinking_level = name_text(data.get("thinkingLevel")) or self.thinking_level
        # The event's facts, derived once for the rules below.
        replace = is_replace(event)
        copy = is_copy(event)
        message = message_of(event)
        if _is_model_call(event, replace, copy, message):
            self.model_calls += 1
        self.tool_calls += _tool_call_count(event, replace, copy, message)
        if _is_tool_error(event, replace, copy, message):
            self.tool_errors += 1
        if replace:
            self.replaces += 1
            if source_kind(event) == COMPACTION_SOURCE_KIND:
                self.landings += 1
        elif not copy:
            self._appended(event, message)
        usage = _usage_of(event, replace, copy, message)
        if usage is not None:
            self._usage(usage)

    def _route(self, provider: Any, model: Any) -> None:
        self.provider = name_text(provider) or self.provider
        self.model = name_text(model) or self.model

    def _header(self, data: JsonObject) -> None:
        header = data.get("header")
        config = header.get("config") if isinstance(header, dict) else None
        if not isinstance(config, dict):
            return
        self._route(config.get("provider"), config.get("model"))
        level = name_text(config.get("thinkingLevel")) or name_text(config.get("reasoningEffort"))
        self.thinking_level = level or self.thinking_level

    def _appended(self, event: Event, message: JsonObject | None) -> None:
        """The route of an appended surface event (not a copy); its tool calls are
        `_tool_call_count`'s, its tool errors `_is_tool_error`'s.

        An event is an assistant message by its type or by its message's role (as `modelCalls`
        counts it): an importer's fallback `user/message` keeps a Pi assistant message unchanged
        (`vocabulary.KEPT_AS_SEEN`), and its provider and model are the model's as much as those
        of the structured events."""
        if event.surface_op is None or message is None:
            return
        if event.type == ASSISTANT_MESSAGE or message.get("role") == "assistant":
            self._route(message.get("provider"), message.get("model"))

    def _usage(self, usage: JsonObject) -> None:
        self.input_tokens += number(usage.get("input"))
        self.output_tokens += number(usage.get("output"))
        self.cache_read_tokens += number(usage.get("cacheRead"))
        self.cache_write_tokens += number(usage.get("cacheWrite"))
        CostSum(self.cost_partials).add(usage_cost(usage))
        if is_unpriced(usage):
            self.unpriced_events += 1

    def cost_usd(self) -> float:
        """The cost so far, as every output reports it (exact sum, 12 decimals)."""
        return CostSum(self.cost_partials).value()

    def as_dict(self, *, events: int, messages: int) -> dict[str, Any]:
        """The SPEC's stats read model, with the two counts that come from outside the sums."""
        return {
            "events": events,
            "model": self.model,
            "provider": self.provider,
            "thinkingLevel": self.thinking_level,
            "messages": messages,
            "turns": self.turns,
            "modelCalls": self.model_calls,
            "steps": self.steps,
            "toolCalls": self.tool_calls,
            "toolErrors": self.tool_errors,
            "compactions": max(self.summaries, self.landings),
            "replaces": self.replaces,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "cacheReadTokens": self.cache_read_tokens,
            "cacheWriteTokens": self.cache_write_tokens,
            "costUsd": self.cost_usd(),
            "unpricedEvents": self.unpriced_events,
        }


def stats(events: Sequence[Event]) -> dict[str, Any]:
    """Stats of a log prefix (the reference for `at_seq` reads; blobs already resolved)."""
    accumulator = StatsAccumulator()
    for event in events:
        accumulator.add(event)
    return accumulator.as_dict(events=len(events), messages=len(model_history(events)))
