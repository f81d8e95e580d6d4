"""Synthetic agent sessions: one seeded event sequence shared by sessionlog and every peer.

Each turn looks like a coding agent's: `turn/start`, a user message (2-5 KB, pasted code or
a request), a first step whose assistant message opens 1-3 tool calls (with arguments and
usage), one `tool/result` of 1-8 KB per call, then a second step with the final assistant
message, and `turn/end`. Sessions open with a system prompt. The sizes are tuned so the mean
serialised `data` is about 2 KB over all events, structural ones included (the README and the
JSON report state the measured mean). Every event obeys the structure rules the service checks
(turns, steps and tool-call pairing), so sessionlog does its full validation work.

Events are built before any timing starts, so generating text is never measured; what is
measured is what each system does with a ready event (serialise, send, validate, commit).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from sessionlog.core.events import NewEvent

WORDS = [
    "the", "build", "fails", "because", "parse", "returns", "early", "when", "header", "has", "no",
    "version", "field", "so", "we", "read", "config", "again", "and", "check", "every", "path",
    "before", "writing", "patch", "to", "disk", "then", "run", "tests", "with", "coverage",
    "compare", "output", "against", "expected", "snapshot", "def", "class", "return", "import",
    "async", "await", "self", "None", "True", "False", "修复", "分页", "评论", "😀",
]  # fmt: skip

USAGE_KEYS = ("input", "output", "cacheRead", "cacheWrite")


class TextSource:
    """Slices of one seeded corpus of words: cheap text of any length."""

    def __init__(self, seed: int, size: int = 96 * 1024) -> None:
        rng = random.Random(seed)
        words: list[str] = []
        length = 0
        while length < size:
            word = rng.choice(WORDS)
            words.append(word)
            length += len(word) + 1
        self._corpus = " ".join(words)
        self._rng = rng

    def text(self, low: int, high: int) -> str:
        """A text of `low` to `high` characters."""
        n = self._rng.randint(low, high)
        start = self._rng.randrange(0, len(self._corpus) - n - 1)
        return self._corpus[start : start + n]

    def randint(self, low: int, high: int) -> int:
        return self._rng.randint(low, high)


def _usage(src: TextSource) -> dict[str, Any]:
    tokens = {key: src.randint(0, 40_000) for key in USAGE_KEYS}
    cost = {key: tokens[key] * 3 / 1_000_000 for key in USAGE_KEYS}
    cost["total"] = sum(cost.values())
    return {**tokens, "totalTokens": sum(tokens.values()), "cost": cost}


def system_prompt(src: TextSource) -> dict[str, Any]:
    """The first event of every session: the system prompt (node 0 of the surface)."""
    return {
        "type": "system/message",
        "data": {"message": {"role": "system", "content": src.text(1500, 2500)}},
        "surfaceOp": "append",
    }


def turn_events(src: TextSource, turn: int, scale: float = 1.0) -> list[dict[str, Any]]:
    """One complete agent turn (10-12 events); `scale` multiplies every text length (1.0: the
    ~2 KB mean events of the main workload)."""

    def say(low: int, high: int) -> str:
        return src.text(max(1, int(low * scale)), max(2, int(high * scale)))

    calls = [(f"call_{turn}_{i}", src.randint(0, 3)) for i in range(src.randint(1, 3))]
    names = ("read_file", "edit_file", "bash", "grep")
    content: list[dict[str, Any]] = [{"type": "text", "text": say(200, 600)}]
    content += [
        {
            "type": "toolCall",
            "id": call_id,
            "name": names[kind],
            "arguments": {"path": f"src/module_{turn}.py", "content": say(600, 2400)},
        }
        for call_id, kind in calls
    ]
    events: list[dict[str, Any]] = [
        {"type": "turn/start", "data": {"turn": turn}},
        {
            "type": "user/message",
            "data": {"message": {"role": "user", "content": say(2000, 5000)}},
            "surfaceOp": "append",
        },
        {"type": "step/start", "data": {"turn": turn, "step": 1}},
        {
            "type": "assistant/message",
            "data": {
                "turn": turn,
                "step": 1,
                "message": {"role": "assistant", "content": content},
                "usage": _usage(src),
            },
            "surfaceOp": "append",
        },
    ]
    for call_id, _kind in calls:
        message = {
            "role": "toolResult",
            "toolCallId": call_id,
            "content": [{"type": "text", "text": say(1024, 8192)}],
            "isError": False,
        }
        events.append(
            {"type": "tool/result", "data": {"turn": turn, "step": 1, "message": message}, "surfaceOp": "append"}
        )
    events += [
        {"type": "step/end", "data": {"turn": turn, "step": 1}},
        {"type": "step/start", "data": {"turn": turn, "step": 2}},
        {
            "type": "assistant/message",
            "data": {
                "turn": turn,
                "step": 2,
                "message": {"role": "assistant", "content": [{"type": "text", "text": say(2500, 6500)}]},
                "usage": _usage(src),
            },
            "surfaceOp": "append",
        },
        {"type": "step/end", "data": {"turn": turn, "step": 2}},
        {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}},
    ]
    return events


def iter_session(seed: int) -> Iterator[dict[str, Any]]:
    """An endless session: the system prompt, then turns 1, 2, ... (callers bound it)."""
    src = TextSource(seed)
    yield system_prompt(src)
    turn = 0
    while True:
        turn += 1
        yield from turn_events(src, turn)


def session_events(n: int, seed: int = 7, *, whole_turns: bool = False) -> list[dict[str, Any]]:
    """The first `n` events of a session; with `whole_turns`, continued to the end of the turn
    (so the log has no open turn that a restarted server would repair)."""
    out: list[dict[str, Any]] = []
    for event in iter_session(seed):
        if len(out) >= n and (not whole_turns or out[-1]["type"] == "turn/end"):
            break
        out.append(event)
    return out


def user_message(text: str) -> dict[str, Any]:
    """A user message outside any turn: one more surface node (the 'one more append')."""
    return {"type": "user/message", "data": {"message": {"role": "user", "content": text}}, "surfaceOp": "append"}


def as_new_events(events: list[dict[str, Any]], prefix: str) -> list[NewEvent]:
    """Parsed envelopes with fixed eventIds (`prefix-i`), ready to send.

    eventIds only need to be unique within a session, so one list can be sent to many
    sessions; fixing them up front keeps uuid generation out of the timed loop.
    """
    return [replace(NewEvent.from_json(e), event_id=f"{prefix}-{i}") for i, e in enumerate(events)]


def mean_data_bytes(events: list[dict[str, Any]]) -> float:
    """Mean size of the serialised `data` of the events (compact JSON, UTF-8)."""
    sizes = [len(json.dumps(e["data"], ensure_ascii=False, separators=(",", ":")).encode()) for e in events]
    return sum(sizes) / max(len(sizes), 1)
