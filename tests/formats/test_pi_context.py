"""Pi session files: parsing, migration, the tree, and `buildSessionContext` against Pi's oracle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sessionlog.core.errors import ValidationError
from sessionlog.core.formats.pi.context import build_context, js_date_ms, ms_to_iso, session_context
from sessionlog.core.formats.pi.load import load_pi_bytes, load_pi_file
from sessionlog.core.formats.pi.migrate import migrate
from sessionlog.core.formats.pi.tree import PiTree
from tests.support.fixtures import RESUMED_SESSION, fixture, pi_generated_sessions, pi_leaf_cases
from tests.support.fixtures import oracle as _oracle

SESSIONS = pi_generated_sessions()


_TREES: dict[Path, PiTree] = {}


def _tree(session: Path) -> PiTree:
    if session not in _TREES:
        _TREES[session] = PiTree(load_pi_file(session).entries)
    return _TREES[session]


# --- the oracle ----------------------------------------------------------------------------


def test_fixtures_are_present() -> None:
    assert len(SESSIONS) == 10


@pytest.mark.parametrize(("session", "leaf"), pi_leaf_cases())
def test_context_equals_pi_for_every_leaf(session: Path, leaf: str) -> None:
    oracle = _oracle(session)
    if leaf == oracle["defaultLeafId"]:
        expected, path = oracle["defaultContext"], oracle["defaultPath"]
    else:
        other = next(o for o in oracle["otherLeaves"] if o["leafId"] == leaf)
        expected, path = other["context"], other["path"]
    tree = _tree(session)
    assert tree.path_ids(leaf) == path
    assert session_context(tree, leaf) == expected


@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.stem[:24])
def test_tree_shape_matches_pi(session: Path) -> None:
    oracle = _oracle(session)
    pi_file = load_pi_file(session)
    tree = PiTree(pi_file.entries)
    assert len(pi_file.entries) == oracle["entryCount"]
    assert pi_file.header["id"] == oracle["sessionId"]
    assert pi_file.source_version == oracle["headerVersion"] == 3
    assert tree.default_leaf() == oracle["defaultLeafId"]
    assert session_context(tree) == oracle["defaultContext"]
    assert len(tree.roots()) == oracle["rootCount"]
    assert set(tree.leaves()) == {oracle["defaultLeafId"]} | {o["leafId"] for o in oracle["otherLeaves"]}
    assert len(tree.leaves()) == oracle["leafCount"]


def test_oracle_covers_a_latest_compaction_that_keeps_entries_before_an_earlier_cut() -> None:
    session = next(s for s in SESSIONS if s.name.startswith("2025-09-23"))
    tree = _tree(session)
    path = tree.path(tree.default_leaf() or "")
    compactions = [i for i, e in enumerate(path) if e["type"] == "compaction"]
    assert len(compactions) == 2
    kept_at = [e["id"] for e in path].index(path[compactions[-1]]["firstKeptEntryId"])
    assert kept_at < compactions[0]
    messages = session_context(tree)["messages"]
    assert [m["role"] for m in messages].count("compactionSummary") == 1
    assert messages[0]["summary"] == path[compactions[-1]]["summary"]


def test_raw_u2028_survives_in_the_session_name() -> None:
    session = next(s for s in SESSIONS if s.name.startswith("2025-09-19"))
    infos = [e for e in load_pi_file(session).entries if e["type"] == "session_info"]
    assert any("\u2028" in e.get("name", "") for e in infos)


# --- hand-made paths: each rule of buildSessionContext ---------------------------------------

T0 = "2026-01-02T03:04:05.678Z"


def chain(*entries: dict[str, Any]) -> list[dict[str, Any]]:
    """Give hand-made entries ids e1, e2, … chained in order."""
    out = []
    for index, entry in enumerate(entries, 1):
        out.append({"id": f"e{index}", "parentId": f"e{index - 1}" if index > 1 else None, "timestamp": T0, **entry})
    return out


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "message": {"role": "user", "content": text, "timestamp": 1}}


def assistant(text: str, **extra: Any) -> dict[str, Any]:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "provider": "p",
        "model": "m",
    }
    return {"type": "message", "message": {**message, **extra}}


def compaction(first_kept: str, summary: str = "sum") -> dict[str, Any]:
    return {"type": "compaction", "summary": summary, "firstKeptEntryId": first_kept, "tokensBefore": 10}


def texts(context: dict[str, Any]) -> list[str]:
    out = []
    for m in context["messages"]:
        if m["role"] == "user":
            out.append(m["content"])
        elif m["role"] == "assistant":
            out.append(m["content"][0]["text"])
        else:
            out.append(m["role"] + ":" + m.get("summary", ""))
    return out


def test_empty_path_gives_pis_empty_context() -> None:
    assert build_context([]) == {"messages": [], "thinkingLevel": "off", "model": None}
    assert session_context(PiTree([])) == {"messages": [], "thinkingLevel": "off", "model": None}


def test_only_the_latest_compaction_counts_and_may_keep_entries_an_earlier_one_cut() -> None:
    path = chain(
        user("u1"),
        assistant("a1"),
        user("u2"),
        compaction("e3", "first"),
        user("u3"),
        assistant("a3"),
        compaction("e1", "second"),
        user("u4"),
    )
    assert texts(build_context(path)) == [
        "compactionSummary:second",
        "u1",
        "a1",
        "u2",
        "u3",
        "a3",
        "u4",
    ]


def test_first_kept_id_not_before_the_compaction_keeps_nothing_before_it() -> None:
    path = chain(user("u1"), assistant("a1"), compaction("nope"), user("u2"))
    assert texts(build_context(path)) == ["compactionSummary:sum", "u2"]
    path = chain(user("u1"), compaction("e2"), user("u2"))  # retain-none: its own id
    assert texts(build_context(path)) == ["compactionSummary:sum", "u2"]


def test_compaction_summary_message_shape() -> None:
    (message,) = build_context(chain(user("u1"), compaction("x")))["messages"]
    assert message == {
        "role": "compactionSummary",
        "summary": "sum",
        "tokensBefore": 10,
        "timestamp": 1767323045678,
    }


def test_model_and_thinking_come_from_the_whole_path() -> None:
    path = chain(
        {"type": "model_change", "provider": "openai", "modelId": "gpt"},
        {"type": "thinking_level_change", "thinkingLevel": "high"},
        user("u1"),
        assistant("a1", provider="anthropic", model="claude"),
        compaction("e99"),
        user("u2"),
    )
    context = build_context(path)
    assert context["model"] == {"provider": "anthropic", "modelId": "claude"}
    assert context["thinkingLevel"] == "high"
    # a later model_change wins over the assistant message
    later = chain(user("u"), assistant("a"), {"type": "model_change", "provider": "x", "modelId": "y"})
    assert build_context(later)["model"] == {"provider": "x", "modelId": "y"}


def test_aborted_and_errored_assistant_messages_stay() -> None:
    path = chain(user("u1"), assistant("half", stopReason="aborted"), assistant("bad", stopReason="error"))
    assert texts(build_context(path)) == ["u1", "half", "bad"]


def test_custom_message_and_branch_summary_roles() -> None:
    path = chain(
        {"type": "custom_message", "customType": "ci", "content": "red", "display": False},
        {"type": "branch_summary", "fromId": "e1", "summary": "went elsewhere"},
        {"type": "branch_summary", "fromId": "e1", "summary": ""},
        {"type": "custom", "customType": "state", "data": {"x": 1}},
        {"type": "label", "targetId": "e1", "label": "here"},
        {"type": "session_info", "name": "n"},
        {"type": "usage", "kind": "cache_warm", "usage": {}},
        {"type": "future_thing", "payload": 1},
    )
    messages = build_context(path)["messages"]
    assert messages == [
        {
            "role": "custom",
            "customType": "ci",
            "content": "red",
            "display": False,
            "timestamp": 1767323045678,
        },
        {"role": "branchSummary", "summary": "went elsewhere", "fromId": "e1", "timestamp": 1767323045678},
    ]


def test_stored_messages_are_passed_through_untouched() -> None:
    odd = {"role": "bashExecution", "command": "ls", "output": "", "exitCode": 0, "extra": [1]}
    path = chain({"type": "message", "message": odd})
    assert build_context(path)["messages"] == [odd]
    assert build_context(path)["messages"][0] is odd


def test_missing_fields_are_left_out_like_json_stringify() -> None:
    path = chain({"type": "thinking_level_change"}, {"type": "model_change", "modelId": "m"})
    assert build_context(path) == {"messages": [], "model": {"modelId": "m"}}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-02T03:04:05.678Z", 1767323045678),
        ("2026-01-02T03:04:05Z", 1767323045000),
        ("2026-01-02T03:04:05.6789Z", 1767323045678),
        ("2026-01-02T03:04:05.6Z", 1767323045600),
        ("2026-01-02T04:04:05.678+01:00", 1767323045678),
        ("2026-01-02", 1767312000000),
        ("1969-12-31T23:59:59.999Z", -1),
        ("2026-02-30T00:00:00Z", None),
        ("yesterday", None),
        (1767323045678, 1767323045678),
        (None, 0),
    ],
)
def test_js_date_parsing(value: Any, expected: Any) -> None:
    assert js_date_ms(value) == expected


def test_ms_to_iso_round_trips() -> None:
    assert ms_to_iso(1767323045678) == "2026-01-02T03:04:05.678Z"
    assert js_date_ms(ms_to_iso(1757948522748)) == 1757948522748


# --- the tree ------------------------------------------------------------------------------


def test_roots_orphans_self_parents_and_leaves() -> None:
    entries = [
        {"type": "x", "id": "a", "parentId": None, "timestamp": "2"},
        {"type": "x", "id": "b", "parentId": "a", "timestamp": "3"},
        {"type": "x", "id": "c", "parentId": "a", "timestamp": "1"},
        {"type": "x", "id": "d", "parentId": "gone"},
        {"type": "x", "id": "e", "parentId": "e"},
    ]
    tree = PiTree(entries)
    assert tree.roots() == ["a", "d", "e"]
    assert tree.leaves() == ["b", "c", "d", "e"]
    assert tree.children_of("a") == ["c", "b"]  # by timestamp
    assert tree.default_leaf() == "e"
    assert tree.path_ids("b") == ["a", "b"]
    assert tree.path_ids("e") == ["e"]


def test_parent_cycle_and_unknown_leaf_are_errors() -> None:
    tree = PiTree([{"type": "x", "id": "a", "parentId": "b"}, {"type": "x", "id": "b", "parentId": "a"}])
    with pytest.raises(ValidationError) as caught:
        tree.path_ids("a")
    assert caught.value.reason == "PARENT_CYCLE"
    with pytest.raises(ValidationError) as caught:
        tree.path_ids("zz")
    assert caught.value.reason == "UNKNOWN_ENTRY"


# --- parsing -------------------------------------------------------------------------------


def lines(*objs: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(o, ensure_ascii=False).encode() + b"\n" for o in objs)


HEADER = {"type": "session", "version": 3, "id": "s1", "timestamp": T0, "cwd": "/w"}


def test_unknown_fields_and_entry_types_are_kept() -> None:
    entry = {"type": "future", "id": "a", "parentId": None, "timestamp": T0, "new": {"x": [1]}}
    pi_file = load_pi_bytes(lines({**HEADER, "extra": True}, entry))
    assert pi_file.header["extra"] is True
    assert pi_file.entries == [entry]
    assert pi_file.objects_in_file == 2


@pytest.mark.parametrize(
    ("objs", "reason", "line"),
    [
        ([{"type": "message", "id": "a"}], "NOT_A_PI_SESSION", "1"),
        ([{**HEADER, "id": 5}], "NOT_A_PI_SESSION", "1"),
        ([HEADER, {"id": "a", "parentId": None}], "BAD_PI_ENTRY", "2"),
        ([HEADER, {"type": "label", "parentId": None}], "BAD_PI_ENTRY", "2"),
        ([HEADER, {"type": "label", "id": "a", "parentId": 3}], "BAD_PI_ENTRY", "2"),
        ([HEADER, {"type": "message", "id": "a", "parentId": None, "message": "hi"}], "BAD_PI_ENTRY", "2"),
        ([HEADER, {"type": "label", "id": "a"}, {"type": "label", "id": "a"}], "DUPLICATE_ENTRY_ID", "3"),
    ],
)
def test_malformed_sessions_are_refused_naming_the_line(objs: list[dict[str, Any]], reason: str, line: str) -> None:
    with pytest.raises(ValidationError) as caught:
        load_pi_bytes(lines(*objs))
    assert caught.value.reason == reason
    assert caught.value.metadata.get("line") == line


def test_empty_file_is_empty_session_file() -> None:
    with pytest.raises(ValidationError) as caught:
        load_pi_bytes(b"")
    assert caught.value.reason == "EMPTY_SESSION_FILE"


def test_truncated_last_line_strict_and_lenient() -> None:
    data = lines(HEADER, {"type": "label", "id": "a", "parentId": None}) + b'{"type":"mess'
    with pytest.raises(ValidationError) as caught:
        load_pi_bytes(data)
    assert caught.value.reason == "TRUNCATED_LAST_LINE"
    pi_file = load_pi_bytes(data, lenient=True)
    assert [e["id"] for e in pi_file.entries] == ["a"]
    assert pi_file.warnings[0].dropped_bytes == 13


def test_a_duplicate_header_line_is_not_an_entry() -> None:
    pi_file = load_pi_bytes(lines(HEADER, {"type": "label", "id": "a", "parentId": None}, HEADER))
    assert [e["id"] for e in pi_file.entries] == ["a"]
    assert pi_file.extra_headers == [(3, HEADER)]
    assert pi_file.objects_in_file == 3


# --- migration -----------------------------------------------------------------------------

V1_HEADER = {
    "type": "session",
    "id": "v1-session",
    "timestamp": T0,
    "cwd": "/w",
    "provider": "anthropic",
    "modelId": "claude",
    "thinkingLevel": "low",
}
V1_ENTRIES: list[dict[str, Any]] = [
    {"type": "message", "timestamp": T0, "message": {"role": "user", "content": "one", "timestamp": 1}},
    {
        "type": "message",
        "timestamp": T0,
        "message": {
            "role": "assistant",
            "content": [],
            "provider": "anthropic",
            "model": "claude",
            "usage": {"input": 1, "output": 2},
        },
    },
    {
        "type": "message",
        "timestamp": T0,
        "message": {
            "role": "hookMessage",
            "customType": "h",
            "content": "x",
            "display": True,
            "timestamp": 2,
        },
    },
    {"type": "message", "timestamp": T0, "message": {"role": "user", "content": "two", "timestamp": 3}},
    {"type": "compaction", "timestamp": T0, "summary": "S", "firstKeptEntryIndex": 4, "tokensBefore": 9},
    {"type": "compaction", "timestamp": T0, "summary": "S0", "firstKeptEntryIndex": 0, "tokensBefore": 9},
    {"type": "message", "timestamp": T0, "message": {"role": "user", "content": "three", "timestamp": 4}},
]


def test_v1_to_v3_migration_on_a_hand_made_file() -> None:
    raw = lines(V1_HEADER, *V1_ENTRIES)
    pi_file = load_pi_bytes(raw)
    assert pi_file.source_version == 1
    assert pi_file.version == 3
    header = pi_file.header
    assert header == {**V1_HEADER, "version": 3}  # v1 extras kept, not renamed
    entries = pi_file.entries
    ids = [e["id"] for e in entries]
    assert len(set(ids)) == len(ids) and all(len(i) == 8 and int(i, 16) >= 0 for i in ids)
    assert [e["parentId"] for e in entries] == [None, *ids[:-1]]  # a linear chain in file order
    assert entries[2]["message"]["role"] == "custom"  # hookMessage renamed
    assert entries[4]["firstKeptEntryId"] == ids[3]  # index 4 counts the header as 0
    assert "firstKeptEntryIndex" not in entries[4]
    assert "firstKeptEntryId" not in entries[5] and "firstKeptEntryIndex" not in entries[5]  # the header
    # the input objects were not modified, and the ids are stable across loads
    assert load_pi_bytes(raw).entries == entries
    tree = PiTree(entries)
    context = session_context(tree)
    # the latest compaction (S0) found no kept entry before it: summary, then "three"
    assert [m["role"] for m in context["messages"]] == ["compactionSummary", "user"]
    assert context["messages"][0]["summary"] == "S0"
    # at the first compaction, its kept entry "two" follows the summary
    first = session_context(tree, ids[4])
    assert [m.get("content") for m in first["messages"][1:]] == ["two"]
    assert first["model"] == {"provider": "anthropic", "modelId": "claude"}
    assert first["thinkingLevel"] == "off"  # header thinkingLevel is not a thinking_level_change


def test_v2_file_only_renames_hook_messages() -> None:
    header = {**V1_HEADER, "version": 2}
    entry = {
        "type": "message",
        "id": "abc",
        "parentId": None,
        "timestamp": T0,
        "message": {"role": "hookMessage", "customType": "h", "content": "x", "display": True},
    }
    pi_file = load_pi_bytes(lines(header, entry))
    assert pi_file.source_version == 2
    assert pi_file.entries == [{**entry, "message": {**entry["message"], "role": "custom"}}]
    assert entry["message"]["role"] == "hookMessage"


def test_custom_id_factory() -> None:
    pi_file = load_pi_bytes(lines(V1_HEADER, *V1_ENTRIES[:2]), new_id=lambda pos, taken: f"id{pos}")
    assert [(e["id"], e["parentId"]) for e in pi_file.entries] == [("id0", None), ("id1", "id0")]


def test_v3_file_is_returned_unchanged_by_migration() -> None:
    pi_file = load_pi_file(fixture(RESUMED_SESSION))
    assert migrate(pi_file) is pi_file


def test_resumed_session_fixture() -> None:
    path = fixture(RESUMED_SESSION)
    pi_file = load_pi_file(path)
    assert pi_file.source_version == 3
    assert pi_file.objects_in_file == 7
    tree = PiTree(pi_file.entries)
    assert tree.leaves() == ["df79f975"]
    context = session_context(tree)
    assert context["model"] == {"provider": "openai-codex", "modelId": "gpt-5.5"}
    assert context["thinkingLevel"] == "medium"
    assert [m["role"] for m in context["messages"]] == ["user", "assistant", "user", "assistant"]
    raw = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    assert context["messages"] == [e["message"] for e in raw if e["type"] == "message"]
