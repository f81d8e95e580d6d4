"""What a harness that forks one session per candidate plan can count on (docs/repair.md#fork):
where each fork came from, what its stats count, and what reaches a subscription to it."""

from __future__ import annotations

from typing import Any

from sessionlog.client import SessionLogClient
from sessionlog.core.events import Event
from tests.support.events import assistant, step_end, step_start, system, turn_end, turn_start, user


def _usage(cost: float) -> dict[str, Any]:
    return {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15, "cost": {"total": cost}}


def _turn(turn: int, cost: float) -> list[dict[str, Any]]:
    return [
        user(f"turn {turn}"),
        turn_start(turn),
        step_start(turn, 1),
        assistant(turn, 1, "done", usage=_usage(cost)),
        step_end(turn, 1),
        turn_end(turn),
    ]


def test_a_forks_own_spend_is_its_stats_less_its_sources_at_the_cut(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid, cwd="/home/dev/repo", metadata={"task": 7})
    with client.writer(sid) as writer:
        writer.append([system("s"), *_turn(1, 0.1)]).result()
    cut = client.get_session(sid).next_seq - 1
    plans = [client.fork(sid, cut, f"{sid}-plan{n}") for n in (1, 2)]
    for n, plan in enumerate(plans, start=1):
        with client.writer(plan.id) as writer:
            writer.append(_turn(2, 0.2 * n)).result()
    with client.writer(sid) as writer:  # the source goes on too
        writer.append(_turn(2, 1.0)).result()
    grandchild = client.fork(plans[0].id, plans[0].next_seq, f"{sid}-plan1-a")

    assert [(p.cwd, p.metadata) for p in plans] == [("/home/dev/repo", {"task": 7})] * 2
    assert [s.id for s in client.list_sessions(parent_session_id=sid)] == [p.id for p in plans]
    assert [s.id for s in client.list_sessions(parent_session_id=plans[0].id)] == [grandchild.id]
    inherited = client.stats(sid, at_seq=cut)
    assert client.stats(sid)["costUsd"] == 1.1  # the source never counts its forks
    for n, plan in enumerate(plans, start=1):
        stats = client.stats(plan.id)
        assert stats["costUsd"] == round(inherited["costUsd"] + 0.2 * n, 12)
        own_events = stats["events"] - inherited["events"]
        assert own_events == 1 + len(_turn(2, 0))  # its seed and its turn


def test_a_subscription_to_a_fork_gets_none_of_the_sources_later_events(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([system("s"), user("go")]).result()
    fork = client.fork(sid, 1, f"{sid}-plan")
    subscription = client.subscribe(fork.id)
    seen: list[Event] = []
    try:
        with client.writer(sid) as writer:
            writer.append([user("source only")]).result()
        with client.writer(fork.id) as writer:
            writer.append([user("fork only")]).result()
        for item in subscription:
            if isinstance(item, Event):
                seen.append(item)
            if len(seen) == 4:
                break
    finally:
        subscription.cancel()
    assert [e.seq for e in seen] == [0, 1, 2, 3]
    assert [e.type for e in seen[2:]] == ["session/end-seed", "user/message"]
    assert seen[3].data["message"]["content"] == "fork only"
