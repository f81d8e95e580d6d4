"""Pi import and export without a server: the mapped events fold to the context Pi builds.

The judge is Pi itself: `fixtures/pi-generated/oracle` holds `buildSessionContext` for every leaf
of every file Pi's SessionManager wrote. Each branch is mapped, committed at consecutive seqs
(the empty system head first, as the service would insert it) and folded with `SessionFold`; its
model history must equal Pi's messages and its stats Pi's model and thinking level. Forks are
checked as the service builds them: the main log up to the cut, the seed and closers, the child's
own events. Export must give back Pi's entries (byte for byte) and the same context.
"""

from __future__ import annotations

import io
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from sessionlog.core.events import Event, NewEvent, Replace
from sessionlog.core.fold import SessionFold
from sessionlog.core.formats.pi.context import ms_to_iso, session_context
from sessionlog.core.formats.pi.entries import PiFile
from sessionlog.core.formats.pi.exporter import export_pi
from sessionlog.core.formats.pi.importer import PiImport, branch_events, event_id, import_pi, map_path
from sessionlog.core.formats.pi.jsjson import js_number, stringify
from sessionlog.core.formats.pi.layout import rebuild_entry
from sessionlog.core.formats.pi.load import load_pi_bytes, load_pi_file
from sessionlog.core.formats.pi.tree import PiTree
from sessionlog.core.formats.sessionlog_file import parse_sessionlog_objects, sessionlog_lines, write_sessionlog
from sessionlog.core.messages import empty_system_head, is_copy, is_replace
from sessionlog.core.projections.timeline import timeline
from sessionlog.core.projections.transcript import transcript
from tests.support.fixtures import (
    FORKED_ANSWERED_CALLS,
    FORKED_PENDING_CALLS,
    RESUMED_SESSION,
    fixture,
    pi_generated_sessions,
    pi_leaf_cases,
)
from tests.support.fixtures import oracle as pi_oracle

SESSIONS = pi_generated_sessions()
T0 = "2025-01-01T00:00:00.000Z"
T0_MS = 1_735_689_600_000
"""T0 in epoch ms: the `recordedTime` of the events of an entry stamped T0."""


# --- helpers -------------------------------------------------------------------------------


def commit(events: list[NewEvent]) -> list[Event]:
    """Commit proposals at consecutive seqs, inserting the empty system head before the first
    surface event when the log has none, exactly as the service does."""
    fold = SessionFold()
    out: list[Event] = []
    for proposal in events:
        batch = [proposal]
        if fold.first_surface_needs_system_head(proposal):
            batch.insert(0, empty_system_head())
        for event in batch:
            committed = event.committed(fold.next_seq, 1_000 + fold.next_seq)
            fold.apply(committed)
            out.append(committed)
    return out


def fold_of(events: list[NewEvent]) -> SessionFold:
    return SessionFold.replay(commit(events))


def pi_model(stats: dict[str, Any]) -> dict[str, Any] | None:
    """The stats' model in the shape of Pi's context (`{provider, modelId}`)."""
    model = {k: v for k, v in (("provider", stats["provider"]), ("modelId", stats["model"])) if v is not None}
    return model or None


def assert_matches_pi(fold: SessionFold, context: dict[str, Any], *, thinking_default: str | None = None) -> None:
    assert fold.model_history() == context["messages"]
    stats = fold.stats()
    assert pi_model(stats) == context.get("model")
    assert (stats["thinkingLevel"] or thinking_default) == context["thinkingLevel"]
    assert fold.open_turn is None  # an imported branch is balanced: nothing for crash repair to do


def oracle(session: Path) -> dict[str, Any]:
    data = pi_oracle(session)
    return data


def oracle_context(session: Path, leaf: str) -> dict[str, Any]:
    data = oracle(session)
    if leaf == data["defaultLeafId"]:
        context: dict[str, Any] = data["defaultContext"]
        return context
    return next(o["context"] for o in data["otherLeaves"] if o["leafId"] == leaf)


@cache
def loaded(session: Path) -> PiFile:
    return load_pi_file(session)


@cache
def imported(session: Path) -> PiImport:
    return import_pi(loaded(session))


def fork_log(plan: PiImport, leaf: str | None) -> list[NewEvent]:
    """The whole log of a leaf's session as the service builds it (fork prefix shared)."""
    return plan.log(next(b for b in plan.branches if b.leaf_id == leaf))


def lines(*objs: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(o, ensure_ascii=False).encode() + b"\n" for o in objs)


def header(**extra: Any) -> dict[str, Any]:
    return {"type": "session", "version": 3, "id": "s-1", "timestamp": T0, "cwd": "/w", **extra}


def entry(entry_id: str, parent: str | None, entry_type: str = "message", **fields: Any) -> dict[str, Any]:
    return {"type": entry_type, "id": entry_id, "parentId": parent, "timestamp": T0, **fields}


def user(entry_id: str, parent: str | None, text: str = "hi") -> dict[str, Any]:
    return entry(entry_id, parent, message={"role": "user", "content": text, "timestamp": 1})


def assistant(
    entry_id: str, parent: str | None, *calls: str, stop: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "ok"}]
    content += [{"type": "toolCall", "id": c, "name": "bash", "arguments": {"command": "ls"}} for c in calls]
    message = {
        "role": "assistant",
        "content": content,
        "provider": "anthropic",
        "model": "claude",
        "stopReason": stop or ("toolUse" if calls else "stop"),
        "timestamp": 2,
    }
    if usage is not None:
        message["usage"] = usage
    return entry(entry_id, parent, message=message)


def result(entry_id: str, parent: str | None, call: str) -> dict[str, Any]:
    message = {"role": "toolResult", "toolCallId": call, "toolName": "bash", "content": [], "isError": False}
    return entry(entry_id, parent, message=message)


def pi_file(*entries: dict[str, Any], **header_extra: Any) -> PiFile:
    return load_pi_bytes(lines(header(**header_extra), *entries))


def check_every_leaf(pf: PiFile) -> PiImport:
    """Every leaf of a hand-made file, standalone and as a fork, against our port of Pi's builder."""
    tree = PiTree(pf.entries)
    plan = import_pi(pf)
    for leaf in tree.leaves():
        expected = session_context(tree, leaf)
        assert fold_of(branch_events(pf, leaf)).model_history() == expected["messages"]
        assert fold_of(fork_log(plan, leaf)).model_history() == expected["messages"]
    return plan


# --- conformance with Pi's own contexts ---------------------------------------------------


def test_fixtures_are_present() -> None:
    assert len(SESSIONS) == 10


@pytest.mark.parametrize(("session", "leaf"), pi_leaf_cases())
def test_branch_folds_to_pis_context(session: Path, leaf: str) -> None:
    events = branch_events(loaded(session), leaf)
    assert events[0].type == "system/message" and events[1].type == "pi/session"
    assert_matches_pi(fold_of(events), oracle_context(session, leaf))


@pytest.mark.parametrize(("session", "leaf"), pi_leaf_cases())
def test_fork_of_the_main_branch_folds_to_pis_context(session: Path, leaf: str) -> None:
    plan = imported(session)
    branch = next(b for b in plan.branches if b.leaf_id == leaf)
    log = fork_log(plan, leaf)
    assert len(log) - len(branch.events) == branch.first_seq
    assert_matches_pi(fold_of(log), oracle_context(session, leaf))
    if branch.fork_seq is not None:
        # the cut is right after the last entry shared with the branch it forks (no tool call is
        # pending at these cuts)
        parent_ids = next(b for b in plan.branches if b.leaf_id == branch.parent_leaf).path_ids
        shared = next(i for i, (a, b) in enumerate(zip(branch.path_ids, parent_ids, strict=False)) if a != b)
        assert branch.first_own_entry == shared


@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.stem[:24])
def test_main_branch_is_the_default_leaf_then_one_fork_per_other_leaf(session: Path) -> None:
    data = oracle(session)
    plan = imported(session)
    assert [b.leaf_id for b in plan.branches] == [data["defaultLeafId"]] + [o["leafId"] for o in data["otherLeaves"]]
    assert plan.main.path_ids == data["defaultPath"]
    for branch, other in zip(plan.branches[1:], data["otherLeaves"], strict=True):
        assert branch.path_ids == other["path"]


@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.stem[:24])
def test_every_entry_of_the_branch_is_kept_once(session: Path) -> None:
    plan = imported(session)
    carriers = [e for e in plan.main.events if "pi" in e.data and e.type != "pi/session"]
    assert [e.data["pi"]["id"] for e in carriers] == plan.main.path_ids
    tree = PiTree(loaded(session).entries)
    assert [rebuild_entry(e.data) for e in carriers] == tree.path(str(plan.main.leaf_id))


@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.stem[:24])
def test_event_ids_are_unique_and_deterministic(session: Path) -> None:
    plan = imported(session)
    for branch in plan.branches:
        log = fork_log(plan, branch.leaf_id)
        ids = [e.event_id for e in log if e not in branch.inherited]  # the service names its own events
        assert None not in ids and len(set(ids)) == len(ids)
    assert import_pi(load_pi_file(session)).main.events == plan.main.events


def test_a_latest_compaction_keeping_entries_an_earlier_one_cut_uses_cited_copies() -> None:
    session = next(s for s in SESSIONS if s.name.startswith("2025-09-23"))
    log = commit(imported(session).main.events)
    copies = [e for e in log if is_copy(e)]
    assert copies, "this file's second compaction keeps entries the first one replaced"
    by_seq = {e.seq: e for e in log}
    for copy in copies:
        (original,) = copy.source_event_seqs
        assert by_seq[original].data["message"] == copy.data["message"]
        assert by_seq[original].type == copy.type
        assert by_seq[original].data["pi"]["id"] == copy.data["source"]["entryId"]
    rows = [row for row in transcript(log) if row["kind"] == "message"]
    assert not {row["seq"] for row in rows} & {c.seq for c in copies}
    originals = [e.seq for e in log if "pi" in e.data and e.surface_op == "append"]
    assert [row["seq"] for row in rows] == originals  # one row per message entry, none per copy
    stats = SessionFold.replay(log).stats()
    assert stats["compactions"] == 2


def test_compaction_keeping_the_tail_replaces_only_what_came_before() -> None:
    session = next(s for s in SESSIONS if s.name.startswith("2025-09-17"))
    log = commit(imported(session).main.events)
    (landing,) = [e for e in log if is_replace(e)]
    assert landing.data["source"]["kind"] == "compaction"
    assert landing.data["message"]["role"] == "compactionSummary"
    assert not any(is_copy(e) for e in log)
    summary = next(e for e in log if e.type == "compaction/summary")
    assert summary.seq in landing.source_event_seqs
    assert set(landing.data) == {"message", "source", "recordedTime"}  # no data.pi: it stands for no entry
    assert landing.data["recordedTime"] == summary.data["recordedTime"]  # when Pi compacted


def test_compaction_keeping_entries_from_a_tool_result_imports_as_pi_builds_it() -> None:
    """A compaction whose kept entries start at a tool result (Pi does not cut there itself;
    an edited file may): replacing only what comes before them would take the result's call
    off the surface and leave the result behind, which the surface refuses
    (REPLACE_ORPHANS_TOOL_RESULT), so the import failed. The importer replaces everything and
    copies the kept entries instead, and the history is still the context Pi builds."""
    pf = pi_file(
        user("u1", None),
        assistant("a1", "u1", "c1"),
        result("r1", "a1", "c1"),
        assistant("a2", "r1"),
        entry("k1", "a2", "compaction", summary="S", firstKeptEntryId="r1", tokensBefore=9),
        user("u2", "k1", "more"),
    )
    plan = check_every_leaf(pf)
    log = commit(plan.main.events)
    assert any(is_copy(e) for e in log)  # the kept entries, copied after the summary


def test_model_and_thinking_events_carry_what_stats_read() -> None:
    events = imported(SESSIONS[0]).main.events
    model = next(e for e in events if e.type == "pi/model_change")
    thinking = next(e for e in events if e.type == "pi/thinking_level_change")
    assert model.ignorable and thinking.ignorable
    assert {"provider", "modelId", "pi", "recordedTime"} == set(model.data)
    assert {"thinkingLevel", "pi", "recordedTime"} == set(thinking.data)
    assert model.data["pi"] == {k: model.data["pi"][k] for k in ("type", "id", "parentId", "timestamp")}


# --- export ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("session", "leaf"), pi_leaf_cases())
def test_export_gives_back_pis_lines_and_context(session: Path, leaf: str) -> None:
    plan = imported(session)
    branch = next(b for b in plan.branches if b.leaf_id == leaf)
    exported = export_pi(commit(fork_log(plan, leaf)))
    text = exported.text()
    raw = session.read_text("utf-8").split("\n")
    by_id = {json.loads(line)["id"]: line + "\n" for line in raw[1:] if line}
    assert list(exported.lines()) == [raw[0] + "\n"] + [by_id[i] for i in branch.path_ids]
    reloaded = load_pi_bytes(text.encode("utf-8"))
    tree = PiTree(reloaded.entries)
    assert tree.default_leaf() == leaf
    assert session_context(tree) == oracle_context(session, leaf)
    assert branch_events(reloaded) == branch_events(loaded(session), leaf)


@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.stem[:24])
def test_import_export_import_is_import(session: Path) -> None:
    first = imported(session).main.events
    again = import_pi(load_pi_bytes(export_pi(commit(first)).text().encode("utf-8"))).main.events
    assert again == first


def test_export_of_a_session_not_imported_from_pi() -> None:
    log = commit(
        [
            NewEvent("user/message", {"message": {"role": "user", "content": "hi"}}, surface_op="append"),
            NewEvent("turn/start", {"turn": 1}),
            NewEvent("step/start", {"turn": 1, "step": 1}),
            NewEvent(
                "assistant/message",
                {"turn": 1, "step": 1, "message": {"role": "assistant", "content": [], "stopReason": "stop"}},
                surface_op="append",
            ),
            NewEvent("step/end", {"turn": 1, "step": 1}),
            NewEvent("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
        ]
    )
    exported = export_pi(log, session_id="live-1", cwd="/repo")
    assert exported.header == {
        "type": "session",
        "version": 3,
        "id": "live-1",
        "timestamp": "1970-01-01T00:00:01.000Z",
        "cwd": "/repo",
    }
    first, second = exported.entries
    assert first["parentId"] is None and second["parentId"] == first["id"]
    assert [e["message"]["role"] for e in exported.entries] == ["user", "assistant"]
    tree = PiTree(load_pi_bytes(exported.text().encode()).entries)
    assert session_context(tree)["messages"] == SessionFold.replay(log).model_history()


# --- migrated and real files -------------------------------------------------------------------

V1_ENTRIES: list[dict[str, Any]] = [
    {"type": "message", "timestamp": T0, "message": {"role": "user", "content": "one", "timestamp": 1}},
    {
        "type": "message",
        "timestamp": T0,
        "message": {
            "role": "assistant",
            "content": [{"type": "toolCall", "id": "c1", "name": "read", "arguments": {}}],
            "provider": "anthropic",
            "model": "claude",
            "stopReason": "toolUse",
            "usage": {"input": 1, "output": 2},
        },
    },
    {
        "type": "message",
        "timestamp": T0,
        "message": {"role": "toolResult", "toolCallId": "c1", "toolName": "read", "content": [], "isError": False},
    },
    {
        "type": "message",
        "timestamp": T0,
        "message": {"role": "hookMessage", "customType": "h", "content": "x", "display": True, "timestamp": 2},
    },
    {"type": "message", "timestamp": T0, "message": {"role": "user", "content": "two", "timestamp": 3}},
    {"type": "compaction", "timestamp": T0, "summary": "S", "firstKeptEntryIndex": 5, "tokensBefore": 9},
    {"type": "compaction", "timestamp": T0, "summary": "S0", "firstKeptEntryIndex": 2, "tokensBefore": 9},
    {"type": "message", "timestamp": T0, "message": {"role": "user", "content": "three", "timestamp": 4}},
]


def test_v1_file_every_prefix_matches_the_migrated_context() -> None:
    v1_header = {"type": "session", "id": "v1", "timestamp": T0, "cwd": "/w", "provider": "p", "modelId": "m"}
    pf = load_pi_bytes(lines(v1_header, *V1_ENTRIES))
    assert pf.source_version == 1
    tree = PiTree(pf.entries)
    for e in pf.entries:  # every entry as a leaf: the whole chain, one prefix at a time
        context = session_context(tree, e["id"])
        events = map_path(pf.header, tree.path(e["id"]))
        assert_matches_pi(fold_of(events), context, thinking_default="off")
    exported = export_pi(commit(branch_events(pf)))
    assert exported.header["version"] == 3 and exported.header["provider"] == "p"
    assert import_pi(load_pi_bytes(exported.text().encode())).main.events == branch_events(pf)


def test_v2_file_with_a_hook_message() -> None:
    entries = [
        user("a1", None),
        {**user("a2", "a1"), "message": {"role": "hookMessage", "customType": "h", "content": "x", "display": False}},
        assistant("a3", "a2"),
    ]
    pf = load_pi_bytes(lines(header(version=2), *entries))
    history = fold_of(branch_events(pf)).model_history()
    assert [m["role"] for m in history] == ["user", "custom", "assistant"]
    assert history == session_context(PiTree(pf.entries))["messages"]


def test_resumed_session_fixture() -> None:
    pf = load_pi_file(fixture(RESUMED_SESSION))
    context = session_context(PiTree(pf.entries))
    events = branch_events(pf)
    assert_matches_pi(fold_of(events), context)
    raw = (fixture(RESUMED_SESSION)).read_text("utf-8")
    assert export_pi(commit(events)).text() == raw
    turns = [e.data["reason"]["kind"] for e in events if e.type == "turn/end"]
    assert turns == ["completed", "completed"]


# --- the mapping's decisions, on small hand-made trees ------------------------------------------


def types(events: list[NewEvent]) -> list[str]:
    return [e.type for e in events[2:]]


def test_an_agent_run_is_one_turn_with_a_step_per_model_call() -> None:
    pf = pi_file(user("u1", None), assistant("a1", "u1", "c1", "c2"), result("r1", "a1", "c1"),
                 result("r2", "r1", "c2"), assistant("a2", "r2"))  # fmt: skip
    assert types(branch_events(pf)) == [
        "turn/start", "user/message",
        "step/start", "assistant/message", "tool/result", "tool/result", "step/end",
        "step/start", "assistant/message", "step/end", "turn/end",
    ]  # fmt: skip
    assert branch_events(pf)[-1].data == {"turn": 1, "reason": {"kind": "completed"}, "recordedTime": T0_MS}


@pytest.mark.parametrize(
    ("stop", "kind"),
    [("stop", "completed"), ("length", "max-tokens"), ("error", "error"), ("aborted", "aborted"),
     ("toolUse", "aborted"), ("deferred", "completed")],
)  # fmt: skip
def test_turn_end_kind_follows_the_last_stop_reason(stop: str, kind: str) -> None:
    calls = ("c1",) if stop == "toolUse" else ()
    events = branch_events(pi_file(user("u1", None), assistant("a1", "u1", *calls, stop=stop)))
    assert events[-1].type == "turn/end" and events[-1].data["reason"]["kind"] == kind


def test_a_branch_ending_mid_tool_leaves_the_call_unanswered_and_the_turn_closed() -> None:
    pf = pi_file(user("u1", None), assistant("a1", "u1", "c1", "c2"), result("r1", "a1", "c1"))
    events = branch_events(pf)
    fold = fold_of(events)
    assert fold.open_turn is None and fold.closers("interrupted") == []
    assert [m["role"] for m in fold.model_history()] == ["user", "assistant", "toolResult"]


def test_steering_message_between_a_call_and_its_result_stays_in_the_step() -> None:
    pf = pi_file(user("u1", None), assistant("a1", "u1", "c1"), user("u2", "a1", "steer"),
                 result("r1", "u2", "c1"), assistant("a2", "r1"))  # fmt: skip
    events = branch_events(pf)
    assert types(events)[:6] == ["turn/start", "user/message", "step/start", "assistant/message", "user/message",
                                 "tool/result"]  # fmt: skip
    check_every_leaf(pf)


def test_unpaired_results_and_unstructured_tool_calls_fall_back_to_user_messages() -> None:
    duplicate = assistant("a2", "r0", "c9", "c9")
    pf = pi_file(user("u1", None), result("r0", "u1", "nope"), duplicate, result("r9", "a2", "c9"))
    events = branch_events(pf)
    kinds = [e.data["source"]["kind"] for e in events if e.type == "user/message"]
    assert kinds == ["user", "pi-unpaired-tool-result", "pi-unstructured", "pi-unpaired-tool-result"]
    assert fold_of(events).model_history() == session_context(PiTree(pf.entries))["messages"]
    # The fallbacks keep their messages' roles (toolResult, assistant), which the envelope rules
    # allow a user/message of these source kinds only: import checks them as the service does.
    check_every_leaf(pf)
    assert import_pi(pf).main.events == events


def test_fork_at_a_pending_call_inherits_the_call_and_takes_the_forks_error_off() -> None:
    """A leaf that leaves the branch right after an assistant message whose call is pending there
    inherits the message (billed once, in the main session), where the cut moved back before it
    and the fork imported it again. The fork's error result for the call, which Pi's context does
    not hold, is taken off the surface with the message, which comes back in its place."""
    # main: u1 a1(c1) r1 a2 ; other: u1 a1(c1) u9 (the user branched away before the result)
    pf = pi_file(user("u1", None), assistant("a1", "u1", "c1"), user("u9", "a1", "elsewhere"),
                 result("r1", "a1", "c1"), assistant("a2", "r1"))  # fmt: skip
    plan = check_every_leaf(pf)
    fork = plan.branches[1]
    assert fork.leaf_id == "u9" and fork.first_own_entry == 2  # a1 is inherited, not re-imported
    main_ids = [e.event_id for e in plan.main.events]
    assert fork.fork_seq == max(i for i, event_id in enumerate(main_ids) if event_id.startswith("pi:a1:"))
    assert [e.type for e in fork.inherited] == ["session/end-seed", "tool/result", "step/end", "turn/end"]
    assert fork.inherited[-1].data["reason"] == {"kind": "forked"}
    error_seq = fork.fork_seq + 2
    taken = fork.events[0]
    assert (taken.type, taken.data["source"], taken.event_id) == (
        "user/message",
        {"kind": "pi-forked-call", "entryId": "a1"},
        "pi:fork:a1:0",
    )
    assert taken.data["message"] == pf.entries[1]["message"]
    assert taken.surface_op == Replace(fork.fork_seq, error_seq)
    assert taken.source_event_seqs == (fork.fork_seq, error_seq)
    child = fold_of(fork_log(plan, "u9"))
    assert not [m for m in child.model_history() if m.get("isError")]  # no synthetic tool error for the model
    carried = [e.data["pi"]["id"] for b in plan.branches for e in b.events if "pi" in e.data and e.type != "pi/session"]
    assert sorted(carried) == ["a1", "a2", "r1", "u1", "u9"]  # every entry imported once


def test_forks_cut_at_pending_calls_fold_to_pis_context_and_export_pis_lines() -> None:
    """The built file (tests/fixtures/README.md): a leaf parts from the main branch right after
    a1, whose call is pending there, and a third leaf parts from it right after a2, likewise. Each
    fork inherits the message, takes the fork's error result off with it, folds to Pi's context for
    its leaf and exports back to the file's lines for its branch."""
    path = fixture(FORKED_PENDING_CALLS)
    pf = load_pi_file(path)
    plan = check_every_leaf(pf)
    assert [(b.leaf_id, b.parent_leaf) for b in plan.branches[1:]] == [
        ("b7d8e9fa", "fb0c2d3e"),
        ("d9fa0b1c", "b7d8e9fa"),
    ]
    assert [b.events[0].data["source"]["entryId"] for b in plan.branches[1:]] == ["d3f4a5b6", "f5b6c7d8"]
    raw = path.read_text("utf-8").split("\n")
    by_id = {json.loads(line)["id"]: line + "\n" for line in raw[1:] if line}
    for branch in plan.branches:
        exported = export_pi(commit(plan.log(branch)))
        assert list(exported.lines()) == [raw[0] + "\n"] + [by_id[i] for i in branch.path_ids]
    carried = [e.data["pi"]["id"] for b in plan.branches for e in b.events if "pi" in e.data and e.type != "pi/session"]
    assert sorted(carried) == sorted(by_id)  # every entry imported once


def test_fork_after_results_of_a_pending_call_inherits_the_call_and_copies_the_results() -> None:
    """A leaf that leaves the branch after an assistant message and some of its results, while
    another of its calls is pending there, inherits the message and those results too (the
    message billed once), where the cut moved back before the message and the fork imported it
    again. The fork's error result for the pending call is taken off with the message and the
    results, which come back in their place: the message carried unchanged, the results as
    model-only copies (billed nothing, counted as no tool error)."""
    # main: u1 a1(c1 c2) r1 r2 a2 ; other: u1 a1(c1 c2) r1 r9 a9 (parts after r1, c2 pending)
    pf = pi_file(user("u1", None), assistant("a1", "u1", "c1", "c2"), result("r1", "a1", "c1"),
                 result("r9", "r1", "c2"), assistant("a9", "r9"),
                 result("r2", "r1", "c2"), assistant("a2", "r2"))  # fmt: skip
    plan = check_every_leaf(pf)
    fork = plan.branches[1]
    assert fork.leaf_id == "a9" and fork.first_own_entry == 3  # a1 and r1 are inherited
    main_ids = [e.event_id for e in plan.main.events]
    a1_seq, r1_seq = main_ids.index("pi:a1:1"), main_ids.index("pi:r1:0")  # a1: step/start, then the message
    assert fork.fork_seq == r1_seq
    assert [e.type for e in fork.inherited] == ["session/end-seed", "tool/result", "step/end", "turn/end"]
    error_seq = fork.fork_seq + 2
    taken, copied = fork.events[:2]
    assert (taken.type, taken.data["source"], taken.event_id) == (
        "user/message",
        {"kind": "pi-forked-call", "entryId": "a1"},
        "pi:fork:a1:0",
    )
    assert taken.data["message"] == pf.entries[1]["message"]
    assert taken.surface_op == Replace(a1_seq, error_seq)
    assert taken.source_event_seqs == (a1_seq, r1_seq, error_seq)
    assert (copied.type, copied.data["source"], copied.surface_op, copied.source_event_seqs) == (
        "tool/result",
        {"kind": "copy", "entryId": "r1"},
        "append",
        (r1_seq,),
    )
    assert copied.data["message"] == pf.entries[2]["message"]
    child = fold_of(fork_log(plan, "a9"))
    assert not [m for m in child.model_history() if m.get("isError")]  # no synthetic tool error for the model
    assert (child.stats()["modelCalls"], child.stats()["toolCalls"]) == (2, 2)  # a1 once, a9; c1 and c2 once
    carried = [e.data["pi"]["id"] for b in plan.branches for e in b.events if "pi" in e.data and e.type != "pi/session"]
    assert sorted(carried) == ["a1", "a2", "a9", "r1", "r2", "r9", "u1"]  # every entry imported once


def test_forks_cut_after_answered_calls_fold_to_pis_context_and_export_pis_lines() -> None:
    """The second built file (tests/fixtures/README.md): a leaf parts from the main branch after
    the first of three results of one assistant message, and a third leaf parts from it after the
    second. The first fork inherits the message and its first result; the third, cut where
    nothing is pending in its parent, the fork's own second result. Each folds to Pi's context
    for its leaf, exports back to the file's lines for its branch, and every entry is imported
    once."""
    path = fixture(FORKED_ANSWERED_CALLS)
    pf = load_pi_file(path)
    plan = check_every_leaf(pf)
    assert [(b.leaf_id, b.parent_leaf, b.first_own_entry) for b in plan.branches[1:]] == [
        ("b8c9d0e1", "a3b4c5d6", 5),
        ("d0e1f2a3", "b8c9d0e1", 6),
    ]
    first = plan.branches[1]
    assert [(e.data["source"]["kind"], e.data["source"]["entryId"]) for e in first.events[:2]] == [
        ("pi-forked-call", "d4e5f6a7"),
        ("copy", "e5f6a7b8"),
    ]
    raw = path.read_text("utf-8").split("\n")
    by_id = {json.loads(line)["id"]: line + "\n" for line in raw[1:] if line}
    for branch in plan.branches:
        exported = export_pi(commit(plan.log(branch)))
        assert list(exported.lines()) == [raw[0] + "\n"] + [by_id[i] for i in branch.path_ids]
    carried = [e.data["pi"]["id"] for b in plan.branches for e in b.events if "pi" in e.data and e.type != "pi/session"]
    assert sorted(carried) == sorted(by_id)  # every entry imported once


def test_leaves_that_leave_the_main_branch_together_share_their_entries_once() -> None:
    # main: u1 a1 u2 a2; a6: u1 a1 u5 a5(c5) r5 u6 a6; a7: u1 a1 u5 a5(c5) u7 a7 (branched before r5)
    pf = pi_file(user("u1", None), assistant("a1", "u1"), user("u5", "a1", "other"),
                 assistant("a5", "u5", "c5"), result("r5", "a5", "c5"), user("u6", "r5"), assistant("a6", "u6"),
                 user("u7", "a5", "third"), assistant("a7", "u7"), user("u2", "a1"), assistant("a2", "u2"))  # fmt: skip
    plan = check_every_leaf(pf)
    first, second = plan.branches[1:]
    assert (first.leaf_id, first.parent_leaf, first.first_own_entry) == ("a6", "a2", 2)
    # The second leaf forks the first one, not the main branch: u5 and a5 stay the first fork's
    # own. The cut is right after a5, whose call is pending there: the fork inherits a5.
    assert (second.leaf_id, second.parent_leaf, second.first_own_entry) == ("a7", "a6", 4)
    first_ids = [e.event_id for e in plan.log(first)]
    assert second.fork_seq == max(i for i, event_id in enumerate(first_ids) if (event_id or "").startswith("pi:a5:"))
    assert second.events[0].data["source"] == {"kind": "pi-forked-call", "entryId": "a5"}
    carried = [e.data["pi"]["id"] for b in plan.branches for e in b.events if "pi" in e.data and e.type != "pi/session"]
    assert sorted(carried) == sorted(["u1", "a1", "u2", "a2", "u5", "a5", "r5", "u6", "a6", "u7", "a7"])


def timed(entry: dict[str, Any], at: int | None, *, sent: int | None = None) -> dict[str, Any]:
    """`entry` stamped `at` ms after T0 (no `timestamp` at all when None); an assistant message's
    own `timestamp` (when Pi sent the request) `sent` ms after T0."""
    out = {key: value for key, value in entry.items() if key != "timestamp"}
    if at is not None:
        out["timestamp"] = ms_to_iso(T0_MS + at)
    if sent is not None:
        out["message"] = {**out["message"], "timestamp": T0_MS + sent}
    return out


def test_durations_are_pis_times_and_unknown_where_pi_recorded_none() -> None:
    """Turns, steps and tool calls are measured with the times Pi recorded (a model call from the
    time its request went out), not with commit times; where one end has no time Pi recorded (an
    entry without a timestamp, a turn a fork cut) the duration is unknown, not a gap between clocks."""
    pf = pi_file(
        timed(user("u1", None), 0),
        timed(assistant("a1", "u1", "c1"), 3_000, sent=1_000),
        timed(result("r1", "a1", "c1"), 3_500),
        timed(assistant("a2", "r1"), 5_000, sent=3_600),
        timed(user("u9", "r1", "elsewhere"), 4_000),  # another leaf: the user branched mid-run
        timed(user("u2", "a2"), None),  # Pi always stamps entries; an edited file may not
        timed(assistant("a3", "u2"), 9_000, sent=8_000),
    )
    plan = import_pi(pf)
    main = timeline(commit(plan.main.events))
    assert [t["durationMs"] for t in main["turns"]] == [5_000, None]
    assert [s["durationMs"] for s in main["steps"]] == [2_500, 1_400, 1_000]
    assert [(c["callId"], c["durationMs"]) for c in main["toolCalls"]] == [("c1", 500)]
    fork = timeline(commit(fork_log(plan, "u9")))
    assert fork["turns"][0]["endKind"] == "forked" and fork["turns"][0]["durationMs"] is None


def test_fork_after_a_finished_turn_inherits_no_repair() -> None:
    pf = pi_file(user("u1", None), assistant("a1", "u1"), user("u2", "a1"), assistant("a2", "u2"),
                 user("u3", "a1", "other"))  # fmt: skip
    plan = check_every_leaf(pf)
    fork = plan.branches[1]
    assert fork.first_own_entry == 2 and [e.type for e in fork.inherited] == ["session/end-seed"]
    assert fork.events[0].type == "turn/start" and fork.events[0].data == {"turn": 2, "recordedTime": T0_MS}


def test_several_roots_fork_after_the_header() -> None:
    pf = pi_file(user("u1", None), assistant("a1", "u1"), user("x1", None, "again"), assistant("x2", "x1"))
    plan = check_every_leaf(pf)
    (fork,) = plan.branches[1:]
    assert fork.fork_seq == 1 and fork.first_own_entry == 0


def test_entries_without_context_become_ignorable_events_and_come_back() -> None:
    entries = [
        user("u1", None),
        entry("e1", "u1", "label", targetId="u1", label="start"),
        entry("e2", "e1", "session_info", name="demo"),
        entry("e3", "e2", "custom", customType="ext", data={"k": [1, 2]}),
        entry("e4", "e3", "branch_summary", fromId="u1", summary=""),
        entry("e5", "e4", "mystery type!", payload={"x": 1}),
        entry("e6", "e5", "context_edit", targetId="u1", replacement=None),
        entry("e7", "e6", "future", extra=True),
        assistant("a1", "e7"),
    ]
    pf = pi_file(*entries)
    events = branch_events(pf)
    ignorable = [e for e in events if e.ignorable]
    assert [e.type for e in ignorable] == ["pi/session", "pi/label", "pi/session_info", "pi/custom",
                                           "pi/branch_summary", "pi/entry", "pi/context_edit", "pi/future"]  # fmt: skip
    assert ignorable[1].data["targetId"] == "u1" and ignorable[1].data["label"] == "start"
    exported = export_pi(commit(events))
    assert exported.entries == pf.entries
    check_every_leaf(pf)


def test_branch_summary_and_custom_message_are_user_messages_with_pis_roles() -> None:
    usage = {"input": 3, "output": 4, "cacheRead": 0, "cacheWrite": 0, "cost": {"total": 0.5}}
    entries = [
        user("u1", None),
        entry("b1", "u1", "branch_summary", fromId="u1", summary="went elsewhere", usage=usage, fromHook=False),
        entry("c1", "b1", "custom_message", customType="note", content=[{"type": "text", "text": "n"}], display=False),
        assistant("a1", "c1"),
    ]
    pf = pi_file(*entries)
    events = branch_events(pf)
    messages = [e for e in events if e.type == "user/message"]
    assert [(e.data["message"]["role"], e.data["source"]["kind"]) for e in messages] == [
        ("user", "user"), ("branchSummary", "branch-summary"), ("custom", "injection")]  # fmt: skip
    assert messages[1].data["usage"] == usage and "summary" not in messages[1].data["pi"]
    assert "content" not in messages[2].data["pi"]
    assert fold_of(events).stats()["costUsd"] == 0.5
    assert export_pi(commit(events)).entries == pf.entries
    check_every_leaf(pf)


def test_compaction_before_any_message_is_appended_and_usage_is_counted_once() -> None:
    usage = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "cost": {"total": 0.25}}
    entries = [
        entry("m1", None, "model_change", provider="p", modelId="m"),
        entry("k1", "m1", "compaction", summary="S", firstKeptEntryId="m1", tokensBefore=5, usage=usage),
        user("u1", "k1"),
        entry("k2", "u1", "compaction", summary="S2", firstKeptEntryId="u1", tokensBefore=7),
        assistant("a1", "k2"),
    ]
    pf = pi_file(*entries)
    events = branch_events(pf)
    fold = fold_of(events)
    stats = fold.stats()
    assert stats["compactions"] == 2 and stats["costUsd"] == 0.25 and stats["inputTokens"] == 10
    assert [m["role"] for m in fold.model_history()] == ["compactionSummary", "user", "assistant"]
    check_every_leaf(pf)


def test_compaction_keeping_nothing_replaces_everything_after_node_zero() -> None:
    pf = pi_file(user("u1", None), assistant("a1", "u1"),
                 entry("k1", "a1", "compaction", summary="S", firstKeptEntryId="k1", tokensBefore=1))  # fmt: skip
    log = commit(branch_events(pf))
    (landing,) = [e for e in log if is_replace(e)]
    user_seq, assistant_seq = (
        e.seq for e in log if e.type in ("user/message", "assistant/message") and e is not landing
    )
    assert landing.surface_op == Replace(user_seq, assistant_seq)
    check_every_leaf(pf)


def test_system_messages_and_usage_entries_of_newer_pi() -> None:
    usage = {"input": 1, "output": 0, "cacheRead": 100, "cacheWrite": 0, "cost": {"total": 0.01}}
    system = entry("s1", None, message={"role": "system", "content": "You are Pi.", "timestamp": 0})
    entries = [
        system,
        entry("w1", "s1", "usage", kind="cache_warm", provider="p", model="m", usage=usage),
        user("u1", "w1"),
        assistant("a1", "u1"),
    ]
    pf = pi_file(*entries)
    events = branch_events(pf)
    assert [e.type for e in events[2:4]] == ["system/message", "pi/usage"]
    stats = fold_of(events).stats()
    assert stats["cacheReadTokens"] == 100 and stats["model"] == "claude"
    assert export_pi(commit(events)).entries == pf.entries
    check_every_leaf(pf)


def test_long_entry_ids_are_hashed_into_event_ids() -> None:
    long_id = "x" * 200
    assert len(event_id(long_id, 3)) <= 128 and event_id(long_id, 3).endswith(":3")
    assert event_id(long_id, 3) != event_id("y" * 200, 3)
    pf = pi_file(user(long_id, None), assistant("a1", long_id))
    assert all(len(str(e.event_id)) <= 128 for e in branch_events(pf))


# --- JSON as JavaScript writes it, and the sessionlog file --------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [(9e-06, "0.000009"), (1e-7, "1e-7"), (1.5e21, "1.5e+21"), (1e21, "1e+21"), (1e20, "100000000000000000000"),
     (123.45, "123.45"), (1.0, "1"), (-0.0, "0"), (-2.5e-8, "-2.5e-8"), (0.1, "0.1"), (5e-324, "5e-324"),
     (1.7976931348623157e308, "1.7976931348623157e+308"), (0.0020700000000000002, "0.0020700000000000002")],
)  # fmt: skip
def test_numbers_are_laid_out_as_javascript_does(value: float, text: str) -> None:
    assert js_number(value) == text


def test_stringify_matches_json_stringify_for_strings_and_structure() -> None:
    value = {"a": ["\u2028", 'é\n"\\', "\x01", None, True, False, 3], "b": {}}
    assert stringify(value) == '{"a":["\u2028","é\\n\\"\\\\","\\u0001",null,true,false,3],"b":{}}'


def test_sessionlog_file_round_trip() -> None:
    log = commit(imported(SESSIONS[0]).main.events)
    session = {"id": "s", "createTime": 1, "cwd": "/w", "metadata": {}}
    out = io.StringIO()
    count = write_sessionlog(out, session, log)
    assert count == len(log) + 1
    records = [(n, json.loads(line)) for n, line in enumerate(out.getvalue().splitlines(), start=1)]
    parsed = parse_sessionlog_objects(records)
    assert parsed.session == session and parsed.events == log
    with pytest.raises(Exception, match="expected seq 0"):
        list(sessionlog_lines(session, log[1:]))
