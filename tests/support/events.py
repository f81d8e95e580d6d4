"""Small builders of valid SPEC §3 events for tests."""

from __future__ import annotations

from typing import Any


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "user/message",
        "data": {"message": {"role": "user", "content": text}},
        "surfaceOp": "append",
        **extra,
    }


def system(text: str) -> dict[str, Any]:
    return {"type": "system/message", "data": {"message": {"role": "system", "content": text}}, "surfaceOp": "append"}


def note(n: int, **extra: Any) -> dict[str, Any]:
    """An ignorable harness event (no structure rules), handy for bulk appends."""
    return {"type": "test/note", "data": {"n": n}, "ignorable": True, **extra}


def turn_start(turn: int) -> dict[str, Any]:
    return {"type": "turn/start", "data": {"turn": turn}}


def turn_end(turn: int, kind: str = "completed") -> dict[str, Any]:
    return {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": kind}}}


def step_start(turn: int, step: int) -> dict[str, Any]:
    return {"type": "step/start", "data": {"turn": turn, "step": step}}


def step_end(turn: int, step: int) -> dict[str, Any]:
    return {"type": "step/end", "data": {"turn": turn, "step": step}}


def assistant(
    turn: int, step: int, text: str = "", calls: tuple[tuple[str, str], ...] = (), usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "toolCall", "id": cid, "name": name, "arguments": {}} for cid, name in calls]
    data: dict[str, Any] = {"turn": turn, "step": step, "message": {"role": "assistant", "content": content}}
    if usage is not None:
        data["usage"] = usage
    return {"type": "assistant/message", "data": data, "surfaceOp": "append"}


def tool_call(turn: int, step: int, call_id: str, name: str) -> dict[str, Any]:
    return {
        "type": "tool/call",
        "data": {"turn": turn, "step": step, "callId": call_id, "name": name, "arguments": "{}"},
    }


def tool_result(turn: int, step: int, call_id: str, text: str, is_error: bool = False) -> dict[str, Any]:
    message = {
        "role": "toolResult",
        "toolCallId": call_id,
        "content": [{"type": "text", "text": text}],
        "isError": is_error,
    }
    return {"type": "tool/result", "data": {"turn": turn, "step": step, "message": message}, "surfaceOp": "append"}


UNPRICED_USAGE: dict[str, Any] = {"input": 40, "output": 4, "cacheRead": 0, "cacheWrite": 0}
"""Usage with tokens and no cost: the harness had no pricing for its model (`unpricedEvents`)."""


def priced_and_unpriced() -> list[dict[str, Any]]:
    """One turn of two model calls: the first priced at 0.25 USD, the second with `UNPRICED_USAGE`."""
    priced = {**UNPRICED_USAGE, "cost": {"total": 0.25}}
    return [
        system("sys"),
        user("go"),
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, "one", usage=priced),
        step_end(1, 1),
        step_start(1, 2),
        assistant(1, 2, "two", usage=UNPRICED_USAGE),
        step_end(1, 2),
        turn_end(1),
    ]


def open_turn_log() -> list[dict[str, Any]]:
    """A session's events up to a crash mid-turn: the turn and its step open, the assistant
    message asking for two tool calls (`a`, `b`), the first of them started, neither answered."""
    return [
        system("sys"),
        user("go"),
        turn_start(1),
        step_start(1, 1),
        assistant(1, 1, "", calls=(("a", "ls"), ("b", "rm"))),
        tool_call(1, 1, "a", "ls"),
    ]
