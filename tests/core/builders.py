"""Small builders for hand-written logs in the core tests."""

from __future__ import annotations

from typing import Any

import pytest

from sessionlog.core.errors import ValidationError
from sessionlog.core.events import APPEND, Event, Replace, SurfaceOp
from sessionlog.core.fold import SessionFold


def system(content: Any = "") -> dict[str, Any]:
    return {"message": {"role": "system", "content": content}}


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"message": {"role": "user", "content": text}, **extra}


def assistant(turn: int, step: int, *calls: tuple[str, str], text: str = "ok", **extra: Any) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += [{"type": "toolCall", "id": cid, "name": name, "arguments": {}} for cid, name in calls]
    return {"turn": turn, "step": step, "message": {"role": "assistant", "content": content}, **extra}


def result(
    turn: int, step: int, call_id: str, text: str = "out", *, is_error: bool = False, **extra: Any
) -> dict[str, Any]:
    message = {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "tool",
        "content": [{"type": "text", "text": text}],
        "isError": is_error,
    }
    return {"turn": turn, "step": step, "message": message, **extra}


class Log:
    """A log under construction: events get seq = position and increasing times."""

    def __init__(self) -> None:
        self.fold = SessionFold()
        self.events: list[Event] = []

    def make(
        self,
        type: str,
        data: dict[str, Any] | None = None,
        *,
        op: SurfaceOp | None = None,
        sources: tuple[int, ...] = (),
        ignorable: bool = False,
        seq: int | None = None,
        time: int | None = None,
    ) -> Event:
        n = len(self.events)
        return Event(
            seq=n if seq is None else seq,
            time=1000 + n if time is None else time,
            type=type,
            data={} if data is None else data,
            ignorable=ignorable,
            surface_op=op,
            source_event_seqs=sources,
        )

    def add(self, type: str, data: dict[str, Any] | None = None, **kw: Any) -> Event:
        event = self.make(type, data, **kw)
        self.fold.apply(event)
        self.events.append(event)
        return event

    def reject(self, reason: str, type: str, data: dict[str, Any] | None = None, **kw: Any) -> ValidationError:
        """Assert that the event is refused with `reason` and that the fold did not change."""
        event = self.make(type, data, **kw)
        before = (self.fold.next_seq, self.fold.surface_view(), self.fold.stats(), self.fold.open_turn)
        with pytest.raises(ValidationError) as info:
            self.fold.check(event)
        assert info.value.reason == reason, info.value.message
        with pytest.raises(ValidationError):
            self.fold.apply(event)
        assert (self.fold.next_seq, self.fold.surface_view(), self.fold.stats(), self.fold.open_turn) == before
        return info.value

    # common prefixes ------------------------------------------------------

    def head(self, content: Any = "") -> Event:
        return self.add("system/message", system(content), op=APPEND)

    def say(self, text: str = "hi", **extra: Any) -> Event:
        return self.add("user/message", user(text, **extra), op=APPEND)

    def turn(self, n: int = 1) -> Event:
        return self.add("turn/start", {"turn": n})

    def step(self, turn: int = 1, step: int = 1) -> Event:
        return self.add("step/start", {"turn": turn, "step": step})

    def end_step(self, turn: int = 1, step: int = 1) -> Event:
        return self.add("step/end", {"turn": turn, "step": step})

    def end_turn(self, turn: int = 1, kind: str = "completed") -> Event:
        return self.add("turn/end", {"turn": turn, "reason": {"kind": kind}})

    def reply(self, turn: int, step: int, *calls: tuple[str, str], **extra: Any) -> Event:
        return self.add("assistant/message", assistant(turn, step, *calls, **extra), op=APPEND)

    def call(self, turn: int, step: int, call_id: str, name: str = "tool") -> Event:
        return self.add("tool/call", {"turn": turn, "step": step, "callId": call_id, "name": name, "arguments": "{}"})

    def result(self, turn: int, step: int, call_id: str, text: str = "out", **kw: Any) -> Event:
        return self.add("tool/result", result(turn, step, call_id, text, **kw), op=APPEND)

    def in_step(self, *calls: tuple[str, str]) -> None:
        """head, prompt, turn 1, step 1, an assistant message opening `calls`."""
        self.head()
        self.say()
        self.turn(1)
        self.step(1, 1)
        self.reply(1, 1, *calls)


def replace(start: int, end: int) -> Replace:
    return Replace(start, end)


def fold_state(fold: SessionFold) -> tuple[Any, ...]:
    """Everything a fold answers, to compare two folds (replay vs incremental, before vs after
    a rollback) as a whole."""
    return (
        fold.next_seq,
        fold.last_time,
        fold.model_history(),
        fold.stats(),
        fold.surface_view(),
        fold.open_turn,
        fold.open_step,
        fold.pending_calls,
        fold.latest_header,
        fold.has_system_head,
        fold.request(),
    )
