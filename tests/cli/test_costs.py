"""`sessionlog costs`: what sessions cost, each fork's own part apart from what it inherits, and a
total that counts every shared prefix once (docs/projections.md#costs), against a real server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sessionlog.client import SessionLogClient
from sessionlog.core.formats.pi.context import session_context
from sessionlog.core.formats.pi.load import load_pi_file
from sessionlog.core.formats.pi.tree import PiTree
from sessionlog.core.projections.stats import usage_of
from sessionlog.core.usage import total_cost, usage_cost
from tests.cli.test_cli import run
from tests.support.events import assistant, step_end, step_start, system, turn_end, turn_start, user
from tests.support.fixtures import FORKED_ANSWERED_CALLS, FORKED_PENDING_CALLS, fixture, pi_generated_sessions
from tests.support.servers import ServerThread


def _usage(cost: float | None) -> dict[str, Any]:
    """A model call's usage; None: no pricing for its model (no cost object)."""
    usage: dict[str, Any] = {"input": 100, "output": 10, "cacheRead": 50, "cacheWrite": 5, "totalTokens": 165}
    return usage if cost is None else {**usage, "cost": {"total": cost}}


def _turn(turn: int, *costs: float | None) -> list[dict[str, Any]]:
    """One turn of one step per model call, each call with the usage of its cost."""
    events = [user(f"turn {turn}"), turn_start(turn)]
    for step, cost in enumerate(costs, start=1):
        events += [step_start(turn, step), assistant(turn, step, "done", usage=_usage(cost)), step_end(turn, step)]
    return [*events, turn_end(turn)]


def _append(client: SessionLogClient, session_id: str, events: list[dict[str, Any]]) -> int:
    """Append `events`; the session's last seq after them."""
    with client.writer(session_id) as writer:
        writer.append(events).result()
    return client.get_session(session_id).next_seq - 1


def _family(client: SessionLogClient, sid: str) -> tuple[str, str]:
    """A parent, a fork of it and a fork of that fork, each going on with calls of its own (the
    last one with a call of a model that has no pricing); the forks' ids."""
    client.create_session(sid, cwd="/home/dev/project")
    cut = _append(client, sid, [system("s"), *_turn(1, 0.1)])
    first = client.fork(sid, cut, f"{sid}-a").id
    _append(client, sid, _turn(2, 1.0))  # the parent goes on after the fork
    cut = _append(client, first, _turn(2, 0.2, 0.03))
    second = client.fork(first, cut, f"{sid}-a-b").id
    _append(client, second, [*_turn(3, 0.4), *_turn(4, None)])
    return first, second


def _costs(server: ServerThread, *args: str) -> dict[str, Any]:
    done = run(server, "costs", *args)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_a_family_costs_each_event_once(server: ServerThread, client: SessionLogClient, sid: str) -> None:
    """Adding the stats of a session and its forks counted each inherited prefix again (the
    parent's first turn three times here); the report's rows give each fork's own part, and its
    total is what the distinct events cost."""
    first, second = _family(client, sid)
    report = _costs(server, "--family", sid)
    rows = {row["id"]: row for row in report["sessions"]}
    assert list(rows) == [sid, first, second]
    assert rows[first]["parent"]["sessionId"] == sid and rows[second]["parent"]["sessionId"] == first
    assert [rows[s]["own"]["costUsd"] for s in rows] == [1.1, 0.23, 0.4]
    assert [rows[s]["stats"]["costUsd"] for s in rows] == [client.stats(s)["costUsd"] for s in rows]
    assert rows[second]["own"]["modelCalls"] == 2 and rows[second]["own"]["inputTokens"] == 200
    assert [rows[s]["own"]["unpricedEvents"] for s in rows] == [0, 0, 1]  # kept visible, not a silent 0

    distinct = [e for e in client.read_events(sid)]
    for fork in (first, second):
        fork_seq = rows[fork]["parent"]["forkSeq"]
        distinct += [e for e in client.read_events(fork) if e.seq > fork_seq]
    usages = [usage for usage in map(usage_of, distinct) if usage is not None]
    total = report["total"]
    assert total["costUsd"] == total_cost([usage_cost(usage) for usage in usages]) == 1.73
    assert total["events"] == len(distinct) and total["modelCalls"] == len(usages) == 6
    assert total["inputTokens"] == 100 * len(usages) and total["unpricedEvents"] == 1
    assert total_cost([row["stats"]["costUsd"] for row in rows.values()]) > total["costUsd"]


def test_direct_forks_cost_only_their_own_events(server: ServerThread, client: SessionLogClient, sid: str) -> None:
    first, _ = _family(client, sid)
    report = _costs(server, "--parent", sid)
    assert [row["id"] for row in report["sessions"]] == [first]
    assert report["total"] == report["sessions"][0]["own"] and report["total"]["costUsd"] == 0.23


def test_the_table_marks_a_cost_that_leaves_unpriced_calls_out(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    _, second = _family(client, sid)
    done = run(server, "costs", "--family", sid, "--format", "table")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    header, *rows, total = done.stdout.splitlines()
    assert header.split()[:3] == ["session", "parent", "fork"]
    assert [row.split()[0] for row in rows] == [sid, f"{sid}-a", second]
    assert total.split()[0] == "total" and "≥1.730000" in total.split()
    assert "≥0.400000" in rows[2].split() and "≥" not in rows[0] + rows[1]


def test_many_forks_are_paged_through_and_their_prefix_counted_once(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """More forks than a page of ListSessions holds (100)."""
    client.create_session(sid)
    cut = _append(client, sid, [system("s"), *_turn(1, 0.5)])
    forks = [client.fork(sid, cut, f"{sid}-{n:03}").id for n in range(101)]
    report = _costs(server, "--family", sid)
    assert [row["id"] for row in report["sessions"]] == [sid, *forks]
    assert report["total"]["costUsd"] == 0.5 and report["total"]["modelCalls"] == 1


def test_a_missing_session_or_two_selections_are_refused(server: ServerThread, sid: str) -> None:
    missing = run(server, "costs", "--family", "no-such-" + sid)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith(f"sessionlog: error: SESSION_NOT_FOUND: session 'no-such-{sid}'")
    both = run(server, "costs", "--family", sid, "--parent", sid)
    assert (both.returncode, both.stdout) == (2, "")
    assert both.stderr == "sessionlog: error: give --family or --parent, not both\n"


def test_a_project_or_a_time_span_selects_the_sessions(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """`--cwd` (a project: forks share their source's) and `--since`/`--until` (a live session's
    creation time,
    ISO 8601, UTC unless it says otherwise) narrow the listing; a fork whose source is left out
    still counts only its own events."""
    first, second = _family(client, sid)
    project = _costs(server, "--cwd", "/home/dev/project", "--family", sid)
    assert [row["id"] for row in project["sessions"]] == [sid, first, second]
    assert _costs(server, "--cwd", "/home/dev/elsewhere", "--family", sid) == {
        "sessions": [],
        "total": dict.fromkeys(project["total"], 0),
    }
    created = datetime.fromtimestamp(client.get_session(first).create_time / 1000, UTC)
    later = _costs(server, "--family", sid, "--since", created.isoformat())
    assert [row["id"] for row in later["sessions"]] == [first, second]
    assert later["total"]["costUsd"] == 0.63
    earlier = _costs(server, "--family", sid, "--until", created.replace(tzinfo=None).isoformat())
    assert [row["id"] for row in earlier["sessions"]] == [sid]
    bad = run(server, "costs", "--since", "last week")
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.startswith("sessionlog: error: --since: 'last week' is no ISO 8601 date or time")
    # A span that holds no time is a mistake, not an empty report (exit 0: "nothing cost anything").
    backwards = run(server, "costs", "--since", "2025-09-27", "--until", "2025-09-26")
    assert (backwards.returncode, backwards.stdout) == (2, "")
    assert backwards.stderr.splitlines() == [
        "sessionlog: error: --until 2025-09-26 is not after --since 2025-09-27: no time is in between"
    ]


def test_an_imported_session_is_dated_by_its_file(server: ServerThread, client: SessionLogClient, sid: str) -> None:
    """`--since`/`--until` date an imported session, and its forks, by when its file began (the
    recorded time of its first event after the head), not by the import: a month of Pi
    sessions imported today is that month's spend. They were dated by their creation, so
    `--since 2025-09-01 --until 2025-10-01` over September's files reported nothing, total 0."""
    path = pi_generated_sessions()[0]  # Pi's header: 2025-09-15T14:28:41.570Z; one other leaf
    imported = run(server, "import", str(path), "--id", sid)
    assert imported.returncode == 0, imported.stderr
    family = [entry["id"] for entry in json.loads(imported.stdout)["sessions"]]
    assert len(family) == 2
    september = _costs(server, "--family", sid, "--since", "2025-09-15T14:28:41.570Z", "--until", "2025-10-01")
    assert [row["id"] for row in september["sessions"]] == family
    assert september["total"] == _costs(server, "--family", sid)["total"]
    assert _costs(server, "--family", sid, "--since", "2025-09-15T14:28:41.571Z")["sessions"] == []
    assert _costs(server, "--family", sid, "--until", "2025-09-15T14:28:41.570Z")["sessions"] == []


def test_an_imported_pi_tree_costs_what_its_entries_cost(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """A Pi file's family total is what its distinct entries cost. Two leaves that leave the main
    branch together and part later were both forked off the main session, so the entries they
    share were imported, and billed, twice: this file's family reported 131 model calls and
    0.7185018 USD for 125 calls and 0.6993207 USD. The later leaf now forks the earlier one."""
    path = next(p for p in pi_generated_sessions() if p.name.startswith("2025-09-19"))
    imported = run(server, "import", str(path), "--id", sid)
    assert imported.returncode == 0, imported.stderr
    family = [entry["id"] for entry in json.loads(imported.stdout)["sessions"]]
    assert family == [sid, f"{sid}.9f7b6cae", f"{sid}.993d83b9"]

    entries = load_pi_file(path).entries
    messages = [entry["message"] for entry in entries if entry.get("type") == "message"]
    usages = [message["usage"] for message in messages if isinstance(message.get("usage"), dict)]
    total = _costs(server, "--family", sid)["total"]
    assert total["modelCalls"] == sum(message["role"] == "assistant" for message in messages) == 125
    assert total["costUsd"] == total_cost([usage_cost(usage) for usage in usages]) == 0.6993207
    assert total["inputTokens"] == sum(usage["input"] for usage in usages)
    assert client.get_session(family[2]).parent_session_id == family[1]
    for leaf in family[1:]:  # each fork still folds to its whole branch, as Pi's replay of its leaf
        replayed = run(server, "replay", str(path), "--at", leaf.rsplit(".", 1)[1], "--json")
        assert json.loads(replayed.stdout)["costUsd"] == client.stats(leaf)["costUsd"]


def test_a_pi_call_pending_where_leaves_part_is_billed_once(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """Leaves that part right after an assistant message whose tool call is pending there (its
    results come on the branches): each fork cut before that message and imported it again, so
    the family billed it once per fork (0.04152225 USD and 7 model calls for 0.02402925 USD and
    5). Now each fork inherits the message, and its model still sees what Pi shows for its leaf:
    the call, then the branch's own result, without the fork's error result for the call."""
    path = fixture(FORKED_PENDING_CALLS)
    imported = run(server, "import", str(path), "--id", sid)
    assert imported.returncode == 0, imported.stderr
    family = [entry["id"] for entry in json.loads(imported.stdout)["sessions"]]
    assert family == [sid, f"{sid}.b7d8e9fa", f"{sid}.d9fa0b1c"]
    assert client.get_session(family[2]).parent_session_id == family[1]

    messages = [entry["message"] for entry in load_pi_file(path).entries if entry.get("type") == "message"]
    usages = [message["usage"] for message in messages if isinstance(message.get("usage"), dict)]
    total = _costs(server, "--family", sid)["total"]
    assert total["modelCalls"] == sum(message["role"] == "assistant" for message in messages) == 5
    assert total["costUsd"] == total_cost([usage_cost(usage) for usage in usages]) == 0.02402925
    for key, field in (("inputTokens", "input"), ("outputTokens", "output"), ("cacheReadTokens", "cacheRead")):
        assert total[key] == sum(usage[field] for usage in usages)
    tree = PiTree(load_pi_file(path).entries)
    for session in family:
        leaf = session.rsplit(".", 1)[1] if session != sid else str(tree.default_leaf())
        replayed = json.loads(run(server, "replay", str(path), "--at", leaf, "--json").stdout)
        assert replayed["costUsd"] == client.stats(session)["costUsd"]
        assert client.model_history(session) == session_context(tree, leaf)["messages"]  # Pi's context


def test_a_pi_call_answered_in_part_where_leaves_part_is_imported_once(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """A leaf that parts after the first of an assistant message's three results, the other two
    calls pending there (and a third leaf parting from it after the second): the fork's cut moved
    back to right after the message and imported the first result again, so that entry was in
    two sessions and the family counted its tool error twice (7 for 5). Now the fork inherits the
    message and that result; the family's figures add up to the file's entries, and each fork's
    model still sees what Pi shows for its leaf."""
    path = fixture(FORKED_ANSWERED_CALLS)
    imported = run(server, "import", str(path), "--id", sid)
    assert imported.returncode == 0, imported.stderr
    family = [entry["id"] for entry in json.loads(imported.stdout)["sessions"]]
    assert family == [sid, f"{sid}.b8c9d0e1", f"{sid}.d0e1f2a3"]
    assert client.get_session(family[2]).parent_session_id == family[1]

    entries = load_pi_file(path).entries
    messages = [entry["message"] for entry in entries if entry.get("type") == "message"]
    usages = [message["usage"] for message in messages if isinstance(message.get("usage"), dict)]
    total = _costs(server, "--family", sid)["total"]
    assert total["modelCalls"] == sum(message["role"] == "assistant" for message in messages) == 4
    assert total["costUsd"] == total_cost([usage_cost(usage) for usage in usages]) == 0.0242535
    for key, field in (("inputTokens", "input"), ("outputTokens", "output"), ("cacheReadTokens", "cacheRead")):
        assert total[key] == sum(usage[field] for usage in usages)

    imported_ids: list[str] = []
    tool_errors = 0
    for session in family:
        info = client.get_session(session)
        start = 0 if info.fork_seq is None else info.fork_seq + 1
        own = list(client.read_events(session, from_seq=start))
        imported_ids += [e.data["pi"]["id"] for e in own if "pi" in e.data and e.type != "pi/session"]
        inherited = (
            0
            if info.fork_seq is None
            else client.stats(str(info.parent_session_id), at_seq=info.fork_seq)["toolErrors"]
        )
        tool_errors += client.stats(session)["toolErrors"] - inherited
    assert sorted(imported_ids) == sorted(str(entry["id"]) for entry in entries)  # each entry once
    # The file's three error results, and the error results the first fork wrote for its two
    # pending calls (docs/formats.md: a fork cut where a call is pending counts them).
    assert sum(message.get("isError") is True for message in messages) == 3
    assert tool_errors == 3 + 2

    tree = PiTree(entries)
    for session in family:
        leaf = session.rsplit(".", 1)[1] if session != sid else str(tree.default_leaf())
        replayed = json.loads(run(server, "replay", str(path), "--at", leaf, "--json").stdout)
        assert replayed["costUsd"] == client.stats(session)["costUsd"]
        assert client.model_history(session) == session_context(tree, leaf)["messages"]  # Pi's context
