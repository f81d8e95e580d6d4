"""Property tests of the fold over random VALID logs.

`build_log` drives a small simulated harness from a list of random actions: turns, steps,
assistant messages with tool calls, tool/call, tool/result (some errors), prompts inside and
outside turns, compactions (summary + replace), tool-result trims, prompt changes of node 0,
model-only copies, request/header reports (with the service's reason), usage on many event
types. Every action is interpreted so that the result is valid; the naive folds below are
written independently of the code under test and are the oracle.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionlog.core import jsonvalue
from sessionlog.core.errors import ValidationError
from sessionlog.core.events import APPEND, Event, Replace
from sessionlog.core.fold import SessionFold
from sessionlog.core.projections.model_history import model_history
from sessionlog.core.projections.request import request
from sessionlog.core.projections.stats import stats
from sessionlog.core.projections.transcript import transcript
from sessionlog.core.repair import commit_closers, open_turn_closers
from tests.core.builders import fold_state

HEADERS: list[dict[str, Any]] = [
    {"config": {"model": "m1", "provider": "p1"}},
    {"config": {"model": "m2", "provider": "p1", "thinkingLevel": "high"}, "tools": [{"name": "read"}]},
    {
        "config": {"provider": "p1", "thinkingLevel": "high", "model": "m2"},
        "tools": [{"name": "read"}],
        "adapterDefaults": {"maxTokens": True},
    },
]
TOOLS = ["read", "write", "ls"]
END_KINDS = ["completed", "aborted", "blocked", "error", "max-tokens"]


def usage(n: int) -> dict[str, Any]:
    """Usage with `n` input tokens; one in eleven has no price (a model the harness has no pricing for)."""
    tokens = {"input": n, "output": n % 7, "cacheRead": n % 5, "cacheWrite": n % 3, "totalTokens": n + n % 7}
    return tokens if n % 11 == 4 else {**tokens, "cost": {"input": n / 1000, "total": n / 997}}


# ------------------------------------------------------------------ the simulated harness


@dataclass
class Builder:
    """Builds a valid log from actions; keeps just enough naive state to stay valid."""

    events: list[Event] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    gen: int = 0
    turn: int | None = None
    last_turn: int = 0
    step: int | None = None
    last_step: int = 0
    calls: dict[str, list[Any]] = field(default_factory=dict)  # id -> [name, called, resulted, carriers, on]
    call_counter: int = 0
    time: int = 1000
    header: dict[str, Any] | None = None
    header_gen: int = 0

    def emit(
        self,
        type: str,
        data: dict[str, Any],
        op: Any = None,
        sources: tuple[int, ...] = (),
        ignorable: bool = False,
        dt: int = 1,
    ) -> Event:
        if op is not None and not self.nodes and type != "system/message":
            self.emit("system/message", {"message": {"role": "system", "content": ""}}, APPEND)
        self.time += dt
        seq = len(self.events)
        event = Event(seq, self.time, type, data, None, ignorable, op, sources)
        self.events.append(event)
        if op == APPEND:
            self.nodes.append(seq)
        elif isinstance(op, Replace):
            i, j = self.nodes.index(op.start_seq), self.nodes.index(op.end_seq)
            self.restate(event, self.nodes[i : j + 1])
            self.nodes[i : j + 1] = [seq]
            self.gen += 1
        if op == APPEND and data.get("source", {}).get("kind") == "copy":
            self.restate(event, [])
        return event

    def restate(self, event: Event, shadowed: list[int]) -> None:
        """A replace (or copy) takes the nodes it shadows off each call's carriers and adds its
        own node to the calls it restates: a result answers only a call whose block some node
        the model still sees carries (TOOL_RESULT_CALL_DROPPED)."""
        content = event.data.get("message", {}).get("content")
        kept = {b.get("id") for b in content if isinstance(b, dict)} if isinstance(content, list) else set()
        for call_id, call in self.calls.items():
            call[3] = [seq for seq in call[3] if seq not in shadowed] + ([event.seq] if call_id in kept else [])
            call[4] = bool(call[3])

    def pos(self, x: int) -> dict[str, Any]:
        """Optional turn/step fields for a prompt: none, the turn, or turn and step."""
        if self.turn is None or x % 3 == 0:
            return {}
        if x % 3 == 2 and self.step is not None:
            return {"turn": self.turn, "step": self.step}
        return {"turn": self.turn}

    def act(self, kind: int, x: int, y: int) -> None:
        getattr(self, f"a{kind}")(x, y)

    def a0(self, x: int, y: int) -> None:  # a prompt
        self.emit("user/message", {"message": {"role": "user", "content": f"u{y}"}, **self.pos(x)}, APPEND)

    def a1(self, x: int, y: int) -> None:  # close what is open, or open a turn
        if self.turn is None:
            self.open_turn()
        elif self.step is not None:
            self.emit("step/end", {"turn": self.turn, "step": self.step})
            self.step, self.calls = None, {}
        else:
            kind = END_KINDS[x % len(END_KINDS)]
            self.emit("turn/end", {"turn": self.turn, "reason": {"kind": kind}})
            self.turn = None

    def open_turn(self) -> None:
        self.last_turn += 1
        self.turn, self.last_step, self.step = self.last_turn, 0, None
        self.emit("turn/start", {"turn": self.turn})

    def a2(self, x: int, y: int) -> None:  # open a step (and a turn if needed)
        if self.turn is None:
            self.open_turn()
        if self.step is None:
            self.last_step += 1
            self.step, self.calls = self.last_step, {}
            self.emit("step/start", {"turn": self.turn, "step": self.step})

    def a3(self, x: int, y: int) -> None:  # assistant message with tool calls
        if self.step is None:
            self.a2(x, y)
        content: list[dict[str, Any]] = [{"type": "text", "text": f"a{y}"}]
        opened: list[tuple[str, str]] = []
        for _ in range(x % 4):
            self.call_counter += 1
            call_id, name = f"call{self.call_counter}", TOOLS[(x + self.call_counter) % 3]
            content.append({"type": "toolCall", "id": call_id, "name": name, "arguments": {"n": y}})
            opened.append((call_id, name))
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if y % 3 == 0:
            message.update(provider="pa", model=f"ma{y % 2}")
        data: dict[str, Any] = {"turn": self.turn, "step": self.step, "message": message}
        if y % 2 == 0:
            data["usage"] = usage(y % 101)
        seq = self.emit("assistant/message", data, APPEND).seq
        for call_id, name in opened:
            self.calls[call_id] = [name, False, False, [seq], True]

    def pick(self, x: int, *, called: bool | None = None, on_surface: bool = False) -> str | None:
        open_calls = [c for c, (_, _, done, _, on) in self.calls.items() if not done and (on or not on_surface)]
        if called is not None:
            open_calls = [c for c in open_calls if self.calls[c][1] == called]
        return open_calls[x % len(open_calls)] if open_calls else None

    def a4(self, x: int, y: int) -> None:  # tool/call
        call_id = self.pick(x, called=False)
        if call_id is None:
            return self.a3(x, y)
        self.calls[call_id][1] = True
        name = self.calls[call_id][0]
        self.emit(
            "tool/call", {"turn": self.turn, "step": self.step, "callId": call_id, "name": name, "arguments": "{}"}
        )

    def a5(self, x: int, y: int) -> None:  # tool/result
        call_id = self.pick(x, on_surface=True)
        if call_id is None:
            return self.a3(x, y)
        self.calls[call_id][2] = True
        is_error = y % 3 == 0
        message = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": self.calls[call_id][0],
            "content": [{"type": "text", "text": "x" * (y % 40)}],
            "isError": is_error,
        }
        data: dict[str, Any] = {"turn": self.turn, "step": self.step, "message": message}
        if is_error and y % 2:
            data["error"] = {"code": "TOOL_FAILED"}
        if y % 5 == 0:
            message["usage"] = usage(y % 13)
        self.emit("tool/result", data, APPEND)

    def a6(self, x: int, y: int) -> None:  # compaction: summary event, then a replace
        if len(self.nodes) < 2:
            return
        i = 1 + x % (len(self.nodes) - 1)
        j = i + y % (len(self.nodes) - i)
        if self.orphans(i, j):  # REPLACE_ORPHANS/DROPS_TOOL_RESULT: take the rest, or the whole body
            i, j = (i, len(self.nodes) - 1) if not self.orphans(i, len(self.nodes) - 1) else (1, len(self.nodes) - 1)
        shadowed = tuple(self.nodes[i : j + 1])
        if y % 2 == 0:
            self.emit(
                "compaction/summary", {"summary": f"s{y}", "provider": "ps", "model": "ms", "usage": usage(y % 50)}
            )
        extra = (0,) if x % 3 == 0 else ()
        data = {"message": {"role": "user", "content": f"summary {y}"}, "source": {"kind": "compaction"}}
        self.emit("user/message", data, Replace(shadowed[0], shadowed[-1]), shadowed + extra)

    def orphans(self, i: int, j: int) -> bool:
        """Whether a summary replacing nodes i..j would leave a tool result on the surface whose
        call's block the replaced assistant messages carried and no node left before it does,
        or take off the only results of a call whose block stays (call ids are unique in these
        logs, but a model-only copy of a message repeats its ids, before or after its result)."""

        def ids(seq: int) -> set[str]:
            event = self.events[seq]
            if event.type != "assistant/message":
                return set()
            return {b["id"] for b in event.data["message"]["content"] if b.get("type") == "toolCall"}

        def answers(seqs: list[int]) -> set[str]:
            return {self.events[s].data["message"]["toolCallId"] for s in seqs if self.events[s].type == "tool/result"}

        covered, left = self.nodes[i : j + 1], self.nodes[:i] + self.nodes[j + 1 :]
        kept = set().union(*(ids(s) for s in left))
        taken = set().union(*(ids(s) for s in covered))
        before: set[str] = set()  # the ids of the blocks left before each node, in surface order
        for seq in left:
            if answers([seq]) & (taken - before):
                return True
            before |= ids(seq)
        return bool((answers(covered) - answers(left)) & kept)

    def a7(self, x: int, y: int) -> None:  # trim a tool result on the surface
        results = [s for s in self.nodes if self.events[s].type == "tool/result"]
        if not results:
            return
        original = self.events[results[x % len(results)]]
        message = dict(original.data["message"], content=[{"type": "text", "text": f"[trimmed {y}]"}])
        self.emit(
            "tool/result", dict(original.data, message=message), Replace(original.seq, original.seq), (original.seq,)
        )

    def a8(self, x: int, y: int) -> None:  # set or change the system prompt
        content: Any = ["", [], f"prompt {y}", [{"type": "text", "text": f"p{y}"}]][x % 4]
        data = {"message": {"role": "system", "content": content}}
        if not self.nodes:
            self.emit("system/message", data, APPEND)
        else:
            self.emit("system/message", data, Replace(self.nodes[0], self.nodes[0]), (self.nodes[0],))

    def a9(self, x: int, y: int) -> None:  # a header report, logged with the service's reason
        header = HEADERS[x % len(HEADERS)]
        first_of_lease = y % 2 == 0
        moved = self.header is not None and self.gen != self.header_gen
        if self.header is None:
            reason: str | None = "initial"
        elif first_of_lease:
            reason = "resume"
        elif jsonvalue.canonical(header) != jsonvalue.canonical(self.header):
            reason = "change"
        elif moved:
            reason = "series"
        else:
            reason = None
        if reason is None:
            return
        data: dict[str, Any] = {"header": header, "reason": reason}
        if moved and reason != "series":
            data["startsSeries"] = True
        self.emit("request/header", data)
        self.header, self.header_gen = header, self.gen

    def a10(self, x: int, y: int) -> None:  # route metadata
        self.emit("request/context", {"provider": f"p{x % 2}", "model": f"m{y % 3}"})

    def a11(self, x: int, y: int) -> None:  # plugin events, some with usage
        if x % 2:
            self.emit("pi/usage", {"usage": usage(y % 31)}, ignorable=True)
        else:
            self.emit("pi/thinking_level_change", {"thinkingLevel": ["low", "high"][y % 2]}, ignorable=True)

    def a12(self, x: int, y: int) -> None:  # a failed model attempt keeps its usage
        if self.step is not None:
            self.emit("assistant/attempt", {"turn": self.turn, "step": self.step, "usage": usage(y % 17)})

    def a13(self, x: int, y: int) -> None:  # a model-only copy of a shadowed message
        on_surface = set(self.nodes)
        shadowed = [
            e.seq
            for e in self.events
            if e.surface_op == APPEND and e.seq not in on_surface and e.type != "system/message"
        ]
        if not shadowed:
            return
        original = self.events[shadowed[x % len(shadowed)]]
        data = dict(copy.deepcopy(original.data), source={"kind": "copy"})
        self.emit(original.type, data, APPEND, (original.seq,))

    def a14(self, x: int, y: int) -> None:
        self.emit("session/end-seed", {}, dt=0)

    def a15(self, x: int, y: int) -> None:  # an in-history system message
        if self.nodes:
            self.emit("system/message", {"message": {"role": "system", "content": f"note {y}"}}, APPEND)


KINDS = st.sampled_from([0, 0, 1, 1, 1, 2, 3, 3, 3, 4, 4, 5, 5, 5, 5, 6, 6, 7, 8, 9, 9, 10, 11, 12, 13, 14, 15])
ACTIONS = st.lists(st.tuples(KINDS, st.integers(0, 1000), st.integers(0, 1000)), min_size=15, max_size=50)


def build_log(actions: list[tuple[int, int, int]]) -> list[Event]:
    builder = Builder()
    for kind, x, y in actions:
        builder.act(kind, x, y)
    return builder.events


logs = ACTIONS.map(build_log)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ the naive oracle


def naive_nodes(events: list[Event]) -> tuple[list[int], dict[int, int]]:
    """Surface nodes and, for each shadowed seq, the replace that shadowed it."""
    nodes: list[int] = []
    shadowed_by: dict[int, int] = {}
    for e in events:
        if e.surface_op == "append":
            nodes.append(e.seq)
        elif isinstance(e.surface_op, Replace):
            i, j = nodes.index(e.surface_op.start_seq), nodes.index(e.surface_op.end_seq)
            for s in nodes[i : j + 1]:
                shadowed_by[s] = e.seq
            nodes[i : j + 1] = [e.seq]
    return nodes, shadowed_by


def naive_history(events: list[Event]) -> list[dict[str, Any]]:
    out = []
    for s in naive_nodes(events)[0]:
        e = events[s]
        if e.type == "system/message" and e.data["message"]["content"] in ("", []):
            continue
        out.append(e.data["message"])
    return out


def naive_stats(events: list[Event]) -> dict[str, Any]:
    def restated(e: Event) -> bool:
        return isinstance(e.surface_op, Replace) or (
            e.surface_op is not None and e.data.get("source", {}).get("kind") == "copy"
        )

    model = provider = thinking = None
    tokens = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
    costs: list[float] = []
    unpriced = 0
    for e in events:
        d = e.data
        if e.type == "request/context":
            provider, model = d["provider"], d["model"]
        if e.type == "request/header":
            config = d["header"]["config"]
            model = config.get("model", model)
            provider = config.get("provider", provider)
            thinking = config.get("thinkingLevel", thinking)
        if e.type == "pi/thinking_level_change":
            thinking = d["thinkingLevel"]
        if e.type == "assistant/message" and not restated(e):
            model = d["message"].get("model", model)
            provider = d["message"].get("provider", provider)
        if restated(e):
            continue
        u = d.get("usage") or (d.get("message") or {}).get("usage")
        if u:
            for k in tokens:
                tokens[k] += u.get(k, 0)
            if "cost" in u:
                costs.append(u["cost"]["total"])
            else:
                unpriced += 1
    fresh = [e for e in events if not restated(e)]
    return {
        "events": len(events),
        "model": model,
        "provider": provider,
        "thinkingLevel": thinking,
        "messages": len(naive_history(events)),
        "turns": sum(e.type == "turn/start" for e in events),
        "modelCalls": sum(e.type == "assistant/attempt" for e in events)
        + sum(e.surface_op is not None and e.data["message"].get("role") == "assistant" for e in fresh),
        "steps": sum(e.type == "step/start" for e in events),
        "toolCalls": sum(
            sum(b.get("type") == "toolCall" for b in e.data["message"]["content"])
            for e in fresh
            if e.type == "assistant/message"
        ),
        "toolErrors": sum(e.type == "tool/result" and e.data["message"]["isError"] for e in fresh),
        "compactions": max(
            sum(e.type == "compaction/summary" for e in events),
            sum(
                isinstance(e.surface_op, Replace) and e.data.get("source", {}).get("kind") == "compaction"
                for e in events
            ),
        ),
        "replaces": sum(isinstance(e.surface_op, Replace) for e in events),
        "inputTokens": tokens["input"],
        "outputTokens": tokens["output"],
        "cacheReadTokens": tokens["cacheRead"],
        "cacheWriteTokens": tokens["cacheWrite"],
        "costUsd": round(math.fsum(costs), 12),
        "unpricedEvents": unpriced,
    }


def naive_transcript_seqs(events: list[Event]) -> list[tuple[int, str, int | None]]:
    """(seq, kind, replacedBy) of each transcript row."""
    _, shadowed_by = naive_nodes(events)
    rows = []
    for e in events:
        if e.surface_op is None:
            rows.append((e.seq, "event", None))
        elif e.type == "system/message" or (
            e.data.get("source", {}).get("kind") == "copy" and e.surface_op == "append"
        ):
            continue
        elif isinstance(e.surface_op, Replace):
            rows.append((e.seq, "replace", shadowed_by.get(e.seq)))
        else:
            rows.append((e.seq, "message", shadowed_by.get(e.seq)))
    return rows


# ------------------------------------------------------------------ properties


@SETTINGS
@given(logs)
def test_every_prefix_matches_the_naive_fold(events: list[Event]) -> None:
    fold = SessionFold()
    for k, event in enumerate(events):
        fold.apply(event)
        prefix = events[: k + 1]
        history = naive_history(prefix)
        assert fold.model_history() == history == model_history(prefix)
        assert fold.stats() == naive_stats(prefix) == stats(prefix)
        assert fold.surface_view()["nodes"] == naive_nodes(prefix)[0]
        view = request(prefix)
        assert view == fold.request() == request(prefix)  # deterministic
        assert view["request"]["messages"] == history
        rows = transcript(prefix)
        assert [(r["seq"], r["kind"], r["replacedBy"]) for r in rows] == naive_transcript_seqs(prefix)
        assert transcript(prefix) == rows


@SETTINGS
@given(logs)
def test_replay_equals_incremental(events: list[Event]) -> None:
    incremental = SessionFold()
    for event in events:
        incremental.check(event)
        incremental.apply(event)
    assert fold_state(SessionFold.replay(events)) == fold_state(incremental)
    assert fold_state(SessionFold.replay(events, validate=False)) == fold_state(incremental)


@SETTINGS
@given(logs)
def test_requests_extend_while_no_replace_or_header_change(events: list[Event]) -> None:
    fold = SessionFold()
    previous: list[dict[str, Any]] | None = None
    for event in events:
        fold.apply(event)
        messages = fold.request()["request"]["messages"]
        if previous is not None and not isinstance(event.surface_op, Replace) and event.type != "request/header":
            assert messages[: len(previous)] == previous
        previous = messages


@SETTINGS
@given(logs)
def test_replaced_events_leave_the_history_but_stay_in_the_transcript(events: list[Event]) -> None:
    fold = SessionFold.replay(events)
    nodes = set(fold.surface_view()["nodes"])
    rows = {r["seq"]: r for r in transcript(events)}
    for e in events:
        if e.surface_op == APPEND and e.type != "system/message" and e.data.get("source", {}).get("kind") != "copy":
            assert rows[e.seq]["kind"] == "message"
            assert (rows[e.seq]["replacedBy"] is None) == (e.seq in nodes)
            if e.seq not in nodes:
                assert all(m is not e.data["message"] for m in fold.model_history())


@SETTINGS
@given(logs, st.integers(0, 3))
def test_node_zero_is_only_replaced_by_a_system_message(events: list[Event], width: int) -> None:
    fold = SessionFold.replay(events)
    nodes = fold.surface_view()["nodes"]
    if not nodes:
        return
    assert fold.has_system_head and events[nodes[0]].type == "system/message"
    end = nodes[min(width, len(nodes) - 1)]
    sources = tuple(nodes[: min(width, len(nodes) - 1) + 1])
    summary = Event(
        fold.next_seq,
        fold.last_time,
        "user/message",
        {"message": {"role": "user", "content": "s"}},
        None,
        False,
        Replace(nodes[0], end),
        sources,
    )
    prompt = Event(
        fold.next_seq,
        fold.last_time,
        "system/message",
        {"message": {"role": "system", "content": "p"}},
        None,
        False,
        Replace(nodes[0], end),
        sources,
    )
    for bad in [summary] + ([prompt] if end != nodes[0] else []):
        try:
            fold.check(bad)
        except ValidationError as exc:
            assert exc.reason == "SYSTEM_HEAD_PROTECTED"
        else:
            raise AssertionError("a replace of node 0 by a non-system or wider range was accepted")
    if end == nodes[0]:
        fold.apply(prompt)
        assert fold.model_history()[0] == {"role": "system", "content": "p"}


@SETTINGS
@given(logs, st.integers(0, 1000), st.integers(0, 1000))
def test_checkpoint_rollback_restores_the_prior_state(events: list[Event], a: int, b: int) -> None:
    k = a % (len(events) + 1)
    m = k + b % (len(events) - k + 1)
    fold = SessionFold.replay(events[:k])
    at_k = fold_state(fold)
    outer = fold.checkpoint()
    for event in events[k:m]:
        fold.apply(event)
    at_m = fold_state(fold)
    inner = fold.checkpoint()
    for event in events[m:]:
        fold.apply(event)
    assert fold_state(fold) == fold_state(SessionFold.replay(events))
    fold.rollback(inner)
    assert fold_state(fold) == at_m == fold_state(SessionFold.replay(events[:m]))
    fold.rollback(outer)
    assert fold_state(fold) == at_k
    for event in events[k:]:  # the fold is fully usable after a rollback
        fold.apply(event)
    assert fold_state(fold) == fold_state(SessionFold.replay(events))


@SETTINGS
@given(logs, st.integers(0, 1000), st.sampled_from(["interrupted", "forked"]))
def test_repair_of_any_prefix_closes_the_turn(events: list[Event], a: int, cause: Any) -> None:
    prefix = events[: a % (len(events) + 1)]
    fold = SessionFold.replay(prefix, validate=False)
    closers = fold.closers(cause)
    assert closers == open_turn_closers(prefix, cause) == SessionFold.replay(prefix).closers(cause)
    if fold.open_turn is None:
        assert closers == []
        return
    committed = commit_closers(closers, fold.next_seq, fold.repair_time)
    for event in committed:
        fold.apply(event)
    assert fold.open_turn is None and fold.open_step is None
    assert fold.closers(cause) == []
    assert fold.last_time == (prefix[-1].time if prefix else 0)
    ids = [e.event_id for e in closers]
    assert len(set(ids)) == len(ids) and all(i is not None and len(i) <= 128 for i in ids)
