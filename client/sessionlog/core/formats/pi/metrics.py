"""The replay metrics of a Pi session branch (SPEC §11, seed 000), folded from the file alone.

Metrics are derived data (SPEC §1.6): a wrong number is a code fix here, then `recompute`, never a
re-run of the experiment. What each one means, for the branch from the root to the leaf:

| key | value |
|---|---|
| `sessionFormat` | `"v1"`, `"v2"` or `"v3"`: the version the file was written in |
| `eventsInFile` | JSON lines in the file, header included |
| `eventsOnBranch` | entries on the path root → leaf |
| `eventsOffBranch` | the other entries (other branches; with `--at`, also what came later) |
| `model`, `provider` | `modelId` and `provider` of Pi's context model (None when not known) |
| `thinkingLevel` | Pi's context thinking level (`"off"` by default) |
| `messages` | messages in the context Pi builds for the leaf (`buildSessionContext`) |
| `turns` | runs of the agent loop: `turn/start` events of the branch as the importer maps it (as an export) |
| `modelCalls` | assistant messages on the branch (model calls), aborted and errored ones included |
| `toolCalls` | `toolCall` blocks of those assistant messages |
| `compactions` | `compaction` entries on the branch |
| `inputTokens`, `cacheReadTokens`, `cacheWriteTokens`, `outputTokens`, `totalTokens` | summed usage |
| `costUsd` | summed `usage.cost.total` |
| `unpricedEvents` | entries whose usage has tokens but no cost (no pricing for the model): `costUsd` is a lower bound |
| `compactionCostUsd` | the part of `costUsd` spent on compaction summaries (None if none carried usage) |

Usage is summed over **every** entry on the branch that carries one, not only assistant messages:
any message's `usage` (assistant, and 1.x tool results), `compaction.usage`,
`branch_summary.usage` and `usage` entries (1.x). A missing `totalTokens` counts as
`input + output + cacheRead + cacheWrite` (Pi's own rule); a missing `cost.total` as the sum of the
cost parts. Non-numbers count as 0. A number below zero is refused, as the import of the file
refuses the event the entry becomes (`NEGATIVE_USAGE`, naming the entry's line, id and field, such
as `message.usage.cost.total`): summed, it would lower the cost and tokens reported. These rules,
and the exact cost sum rounded to 12 decimals, are `sessionlog.core.usage`'s (the refusal,
`validate.check_usage_at`, is the service's door's), shared with the stats of a sessionlog log.
Entries off the branch (abandoned branches) are not counted, nor checked: the metrics describe
the branch, like Pi's own context.
"""

from __future__ import annotations

from typing import Any

from sessionlog.core import validate
from sessionlog.core.errors import SessionLogError
from sessionlog.core.formats.pi.context import build_context
from sessionlog.core.formats.pi.entries import (
    BRANCH_SUMMARY,
    COMPACTION,
    MESSAGE,
    USAGE,
    JsonObject,
    PiFile,
)
from sessionlog.core.formats.pi.importer import map_path
from sessionlog.core.formats.pi.tree import PiTree
from sessionlog.core.usage import CostSum, is_unpriced, number, usage_cost, usage_total_tokens
from sessionlog.core.vocabulary import TURN_START


def entry_usage(entry: JsonObject) -> JsonObject | None:
    """The usage an entry carries: a message's, a compaction's, a branch summary's, a usage entry's."""
    kind = entry.get("type")
    if kind == MESSAGE:
        usage = entry["message"].get("usage")
    elif kind in (COMPACTION, BRANCH_SUMMARY, USAGE):
        usage = entry.get("usage")
    else:
        return None
    return usage if isinstance(usage, dict) else None


def branch_metrics(pi_file: PiFile, tree: PiTree, leaf_id: str | None) -> dict[str, Any]:
    """All metrics for the branch ending at `leaf_id` (None: Pi's default leaf, the last entry)."""
    leaf = leaf_id if leaf_id is not None else tree.default_leaf()
    path = tree.path(leaf) if leaf is not None else []
    context = build_context(path)
    model_calls = tool_calls = compactions = unpriced = 0
    tokens: dict[str, int | float] = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
    total_tokens: int | float = 0
    cost = CostSum()
    compaction_cost: CostSum | None = None
    for entry in path:
        kind = entry.get("type")
        if kind == MESSAGE:
            message = entry["message"]
            if message.get("role") == "assistant":
                model_calls += 1
                content = message.get("content")
                if isinstance(content, list):
                    tool_calls += sum(1 for b in content if isinstance(b, dict) and b.get("type") == "toolCall")
        elif kind == COMPACTION:
            compactions += 1
        usage = entry_usage(entry)
        if usage is None:
            continue
        _check_usage(pi_file, entry, usage)
        for key in tokens:
            tokens[key] += number(usage.get(key))
        total_tokens += usage_total_tokens(usage)
        cost.add(usage_cost(usage))
        unpriced += is_unpriced(usage)
        if kind == COMPACTION:
            compaction_cost = compaction_cost or CostSum()
            compaction_cost.add(usage_cost(usage))
    return {
        "sessionFormat": f"v{pi_file.source_version}",
        "eventsInFile": pi_file.objects_in_file,
        "eventsOnBranch": len(path),
        "eventsOffBranch": len(pi_file.entries) - len(path),
        "model": _route(context.get("model"), "modelId"),
        "provider": _route(context.get("model"), "provider"),
        "thinkingLevel": context.get("thinkingLevel"),
        "messages": len(context["messages"]),
        "turns": sum(1 for event in map_path(pi_file.header, path) if event.type == TURN_START),
        "modelCalls": model_calls,
        "toolCalls": tool_calls,
        "compactions": compactions,
        "inputTokens": tokens["input"],
        "cacheReadTokens": tokens["cacheRead"],
        "cacheWriteTokens": tokens["cacheWrite"],
        "outputTokens": tokens["output"],
        "costUsd": cost.value(),
        "unpricedEvents": unpriced,
        "totalTokens": total_tokens,
        "compactionCostUsd": compaction_cost.value() if compaction_cost is not None else None,
    }


def _check_usage(pi_file: PiFile, entry: JsonObject, usage: JsonObject) -> None:
    """Refuse an entry's usage holding a negative number (`validate.check_usage_at`, the door's
    rule and words), located as the importer locates a refusal: the file's line and the entry id.
    The field is the entry's own (`message.usage`, or `usage` of a compaction, branch summary or
    usage entry), where the file is fixed; the import says the event's (`data.message.usage`,
    `data.usage`)."""
    kind = entry.get("type")
    try:
        validate.check_usage_at(usage, "message.usage" if kind == MESSAGE else "usage", str(kind))
    except SessionLogError as exc:
        line = next(n for e, n in zip(pi_file.entries, pi_file.entry_lines, strict=True) if e is entry)
        entry_id = entry.get("id")
        raise exc.located(f"line {line}: Pi entry {entry_id}", line=line, entry=entry_id) from None


def _route(model: Any, key: str) -> str | None:
    """`modelId` or `provider` of Pi's context model, as text (None when it is not known)."""
    value = model.get(key) if isinstance(model, dict) else None
    return str(value) if value is not None else None


def pi_metrics(pi_file: PiFile, at: str | None = None) -> dict[str, Any]:
    """Metrics of a loaded Pi file at entry `at` (default: the leaf Pi opens, the last entry)."""
    return branch_metrics(pi_file, PiTree(pi_file.entries), at)
