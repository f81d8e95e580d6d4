"""Replay metrics (SPEC §11, seed 000) of Pi files and sessionlog exports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sessionlog.core.errors import ValidationError
from sessionlog.core.formats.pi.importer import branch_events, import_pi
from sessionlog.core.formats.pi.load import load_pi_bytes, load_pi_file
from sessionlog.core.formats.pi.metrics import pi_metrics
from sessionlog.core.formats.replay import (
    ALL_KEYS,
    METRIC_KEYS,
    Change,
    apply_changes,
    compare_recorded,
    missing_metrics,
    replay_file,
    snake_case,
    values_equal,
)
from sessionlog.core.formats.sessionlog_file import sessionlog_lines
from sessionlog.core.limits import DEFAULT_LIMITS
from sessionlog.core.usage import usage_total_tokens
from tests.support.fixtures import RESUMED_SESSION, fixture, leaves, pi_generated_sessions
from tests.support.fixtures import oracle as _oracle

SESSIONS = pi_generated_sessions()
T0 = "2026-01-02T03:04:05.678Z"


def usage(inp: int, out: int, cache: int = 0, cost: float = 0.0, total: int | None = None) -> dict[str, Any]:
    u: dict[str, Any] = {"input": inp, "output": out, "cacheRead": cache, "cacheWrite": 1}
    if total is not None:
        u["totalTokens"] = total
    u["cost"] = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": cost}
    return u


def entry(entry_id: str, parent: str | None, entry_type: str, **fields: Any) -> dict[str, Any]:
    return {"type": entry_type, "id": entry_id, "parentId": parent, "timestamp": T0, **fields}


def msg(role: str, **fields: Any) -> dict[str, Any]:
    return {"role": role, "timestamp": 1, **fields}


def tool_call(call_id: str) -> dict[str, Any]:
    return {"type": "toolCall", "id": call_id, "name": "bash", "arguments": {"command": "ls"}}


HEADER = {"type": "session", "version": 3, "id": "s", "timestamp": T0, "cwd": "/w"}
ENTRIES = [
    entry("a", None, "model_change", provider="openai", modelId="gpt"),
    entry("b", "a", "thinking_level_change", thinkingLevel="low"),
    entry("c", "b", "message", message=msg("user", content="go")),
    entry(
        "d",
        "c",
        "message",
        message=msg(
            "assistant",
            content=[{"type": "text", "text": "ok"}, tool_call("1"), tool_call("2")],
            provider="anthropic",
            model="claude",
            usage=usage(100, 10, 5, 0.25),  # no totalTokens: counts as 116
            stopReason="toolUse",
        ),
    ),
    entry("e", "d", "message", message=msg("toolResult", toolCallId="1", content=[], usage=usage(7, 3, cost=0.5))),
    # an abandoned branch: its usage is not on the branch
    entry(
        "x",
        "e",
        "message",
        message=msg("assistant", content=[tool_call("9")], provider="p", model="m", usage=usage(1000, 1000, cost=9)),
    ),
    entry(
        "f", "e", "compaction", summary="S", firstKeptEntryId="c", tokensBefore=9, usage=usage(50, 5, total=55, cost=1)
    ),
    entry("g", "f", "branch_summary", fromId="x", summary="went away", usage=usage(20, 2, total=22, cost=2)),
    entry("h", "g", "usage", kind="cache_warm", provider="openai", model="gpt", usage=usage(3, 0, total=3, cost=4)),
    entry(
        "i",
        "h",
        "message",
        message=msg("assistant", content=[], provider="openai", model="gpt", stopReason="aborted", usage=usage(1, 1)),
    ),
]


def handmade(*entries: dict[str, Any]) -> bytes:
    objs = [HEADER, *(entries or ENTRIES)]
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


def test_usage_on_every_entry_kind_counts_not_only_assistant_messages() -> None:
    metrics = pi_metrics(load_pi_bytes(handmade()))
    assert metrics == {
        "sessionFormat": "v3",
        "eventsInFile": 11,
        "eventsOnBranch": 9,
        "eventsOffBranch": 1,
        "model": "gpt",
        "provider": "openai",
        "thinkingLevel": "low",
        # summary, kept c d e, then branch summary and the aborted assistant
        "messages": 6,
        "turns": 1,  # one agent run: d's calls keep it open until the aborted i ends it
        "modelCalls": 2,
        "toolCalls": 2,
        "compactions": 1,
        "inputTokens": 100 + 7 + 50 + 20 + 3 + 1,
        "cacheReadTokens": 5,
        "outputTokens": 10 + 3 + 5 + 2 + 0 + 1,
        "costUsd": 0.25 + 0.5 + 1 + 2 + 4,
        "unpricedEvents": 0,  # every usage names its cost, i's a cost of 0
        "cacheWriteTokens": 6,
        "totalTokens": 116 + 11 + 55 + 22 + 3 + 3,
        "compactionCostUsd": 1.0,
    }


def test_at_an_entry_folds_the_branch_up_to_it() -> None:
    pi_file = load_pi_bytes(handmade())
    at_x = pi_metrics(pi_file, "x")
    assert (at_x["eventsOnBranch"], at_x["eventsOffBranch"], at_x["modelCalls"], at_x["toolCalls"]) == (6, 4, 2, 3)
    assert (at_x["provider"], at_x["model"]) == ("p", "m")
    assert at_x["compactionCostUsd"] is None
    assert at_x["costUsd"] == 9.75
    with pytest.raises(ValidationError) as caught:
        pi_metrics(pi_file, "nope")
    assert caught.value.reason == "UNKNOWN_ENTRY"


def test_missing_total_tokens_is_the_sum_of_the_counts() -> None:
    assert usage_total_tokens({"input": 1, "output": 2, "cacheRead": 3, "cacheWrite": 4}) == 10
    assert usage_total_tokens({"input": 1, "output": 2, "totalTokens": 0}) == 3
    assert usage_total_tokens({"input": 1, "totalTokens": 50}) == 50


def test_cost_sum_is_exact_and_order_free() -> None:
    entries = [entry("a", None, "message", message=msg("user", content="u"))]
    parent = "a"
    for i in range(10):
        entries.append(entry(f"m{i}", parent, "usage", kind="k", usage=usage(0, 0, cost=0.1)))
        parent = f"m{i}"
    assert pi_metrics(load_pi_bytes(handmade(*entries)))["costUsd"] == 1.0


def test_usage_without_a_price_is_counted_as_stats_count_it() -> None:
    """An entry whose usage has tokens but no cost (a model Pi had no pricing for) adds 0 to
    `costUsd` and 1 to `unpricedEvents`, as `sessionlog stats` counts it, so replay's cost is
    known to be a lower bound; a price of 0 and a usage of no tokens are not counted. Replay
    printed the cost alone, which could not be told from a free model's."""
    unpriced = usage(40, 4)
    del unpriced["cost"]
    entries = [
        entry("a", None, "message", message=msg("user", content="u")),
        entry("b", "a", "message", message=msg("assistant", content=[], usage=unpriced, stopReason="stop")),
        entry("c", "b", "message", message=msg("assistant", content=[], usage=usage(1, 1), stopReason="stop")),
        entry("d", "c", "usage", kind="k", usage={"input": 0, "output": 0}),
        entry("e", "d", "message", message=msg("assistant", content=[], usage=usage(2, 2, cost=0.5))),
    ]
    metrics = pi_metrics(load_pi_bytes(handmade(*entries)))
    assert (metrics["costUsd"], metrics["unpricedEvents"]) == (0.5, 1)
    assert (metrics["inputTokens"], metrics["outputTokens"]) == (43, 7)


def test_empty_session_has_zero_metrics() -> None:
    metrics = pi_metrics(load_pi_bytes(handmade(*[])[:0] + json.dumps(HEADER).encode() + b"\n"))
    assert metrics["eventsInFile"] == 1
    assert metrics["eventsOnBranch"] == 0
    assert metrics["messages"] == 0
    assert metrics["model"] is None and metrics["provider"] is None
    assert metrics["thinkingLevel"] == "off"
    assert metrics["costUsd"] == 0


@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.stem[:24])
def test_metrics_agree_with_pis_context_on_every_leaf(session: Path) -> None:
    oracle = _oracle(session)
    pi_file = load_pi_file(session)
    by_id = {e["id"]: e for e in pi_file.entries}
    leaves = [(oracle["defaultLeafId"], oracle["defaultPath"], oracle["defaultContext"])]
    leaves += [(o["leafId"], o["path"], o["context"]) for o in oracle["otherLeaves"]]
    for leaf, path, context in leaves:
        metrics = pi_metrics(pi_file, leaf)
        assert metrics["eventsInFile"] == oracle["entryCount"] + 1
        assert metrics["eventsOnBranch"] == len(path)
        assert metrics["eventsOffBranch"] == oracle["entryCount"] - len(path)
        assert metrics["messages"] == len(context["messages"])
        model = context["model"]
        route = (model["provider"], model["modelId"]) if model else (None, None)
        assert (metrics["provider"], metrics["model"]) == route
        assert metrics["thinkingLevel"] == context["thinkingLevel"]
        assistants = [by_id[i]["message"] for i in path if by_id[i]["type"] == "message"]
        assistants = [m for m in assistants if m["role"] == "assistant"]
        assert metrics["modelCalls"] == len(assistants)
        calls = sum(1 for m in assistants for b in m["content"] if b["type"] == "toolCall")
        assert metrics["toolCalls"] == calls
        assert metrics["compactions"] == sum(1 for i in path if by_id[i]["type"] == "compaction")
        assert metrics["outputTokens"] == sum(m["usage"]["output"] for m in assistants)


def test_default_leaf_replay_of_the_real_fixture() -> None:
    result = replay_file(fixture(RESUMED_SESSION))
    assert result.format == "pi"
    assert result.table_metrics() == {
        "sessionFormat": "v3",
        "eventsInFile": 7,
        "eventsOnBranch": 6,
        "eventsOffBranch": 0,
        "model": "gpt-5.5",
        "provider": "openai-codex",
        "thinkingLevel": "medium",
        "messages": 4,
        "turns": 2,
        "modelCalls": 2,
        "toolCalls": 0,
        "compactions": 0,
        "inputTokens": 3012,
        "cacheReadTokens": 0,
        "cacheWriteTokens": 0,
        "outputTokens": 15,
        "costUsd": 0.01551,
        "unpricedEvents": 0,
    }
    assert list(result.table_metrics()) == list(METRIC_KEYS)


def test_v1_file_reports_its_source_version(tmp_path: Path) -> None:
    path = tmp_path / "v1.jsonl"
    header = {"type": "session", "id": "old", "timestamp": T0, "cwd": "/w"}
    user = {"type": "message", "timestamp": T0, "message": {"role": "user", "content": "x", "timestamp": 1}}
    path.write_text(json.dumps(header) + "\n" + json.dumps(user) + "\n")
    assert replay_file(path).metrics["sessionFormat"] == "v1"
    assert replay_file(path).metrics["messages"] == 1


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"type":"other"}\n')
    with pytest.raises(ValidationError) as caught:
        replay_file(path)
    assert caught.value.reason == "UNKNOWN_SESSION_FORMAT"
    path.write_text("")
    with pytest.raises(ValidationError) as caught:
        replay_file(path)
    assert caught.value.reason == "EMPTY_SESSION_FILE"


# --- comparing with recorded metrics -------------------------------------------------------

COMPUTED = {"costUsd": 0.008091, "inputTokens": 24908, "compactionCostUsd": 0.001598, "toolCalls": 3, "model": "a/b"}


def test_keys_have_snake_case_twins() -> None:
    assert snake_case("cacheReadTokens") == "cache_read_tokens"
    assert snake_case("costUsd") == "cost_usd"
    assert len({snake_case(k) for k in ALL_KEYS}) == len(ALL_KEYS)


def test_check_compares_only_recorded_metrics_in_either_spelling() -> None:
    recorded = {"cost_usd": 0.006493, "toolCalls": 3, "tool_errors": 1, "model": "a/b"}
    assert compare_recorded(recorded, COMPUTED) == [Change("cost_usd", 0.006493, 0.008091)]


def test_recompute_compares_what_was_recorded_and_lists_the_rest_as_additions() -> None:
    recorded = {"cost_usd": 0.006493, "input_tokens": 19956, "tool_calls": 3, "model": "a/b"}
    changes = compare_recorded(recorded, COMPUTED)
    assert changes == [Change("cost_usd", 0.006493, 0.008091), Change("input_tokens", 19956, 24908)]
    additions = missing_metrics(recorded, COMPUTED)
    assert additions == [Change("compaction_cost_usd", None, 0.001598)]  # spelled like the record
    updated = apply_changes(recorded, changes + additions)
    assert list(updated) == ["cost_usd", "input_tokens", "tool_calls", "model", "compaction_cost_usd"]
    assert compare_recorded(updated, COMPUTED) == [] and missing_metrics(updated, COMPUTED) == []


def test_a_null_metric_the_record_lacks_is_no_addition() -> None:
    assert missing_metrics({"costUsd": 1.0}, {"costUsd": 1.0, "compactionCostUsd": None}) == []


def test_a_number_matches_at_the_precision_it_was_recorded_with() -> None:
    assert values_equal(0.636157, 0.63615675)  # six decimals recorded
    assert not values_equal(0.63615, 0.636157)  # five decimals recorded: off by 7e-6
    assert not values_equal(30, 31)
    assert not values_equal(12, 12.4)  # an integer is exact
    assert values_equal(1e-05, 1.4e-05) and not values_equal(1e-05, 1.6e-05)  # 0.00001: five decimals
    # A tie matches either rounding of it: a half to even (Python's) and a half up (the page's).
    assert values_equal(0.007812, 0.0078125) and values_equal(0.007813, 0.0078125)
    assert not values_equal(0.007811, 0.0078125) and not values_equal(0.007814, 0.0078125)


def test_float_noise_is_not_a_change() -> None:
    assert values_equal(0.1 + 0.2, 0.3)
    assert values_equal(20070, 20070.0)
    assert not values_equal(0.005962, 0.005963)
    assert not values_equal(True, 1)
    assert values_equal("v3", "v3")


# --- the sessionlog export format ----------------------------------------------------------


def _event(seq: int, kind: str, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"seq": seq, "time": 1000 + seq, "type": kind, "data": data, **extra}


def _export(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    path = tmp_path / "export.jsonl"
    header = {"type": "sessionlog", "version": 1, "session": {"id": "s1"}}
    path.write_text("".join(json.dumps(o) + "\n" for o in [header, *events]))
    return path


def test_sessionlog_export_uses_the_same_keys(tmp_path: Path) -> None:
    cost = {"total": 0.001}
    events = [
        _event(0, "system/message", {"message": {"role": "system", "content": "p"}}, surfaceOp="append"),
        _event(1, "request/context", {"provider": "openai", "model": "gpt"}),
        _event(2, "turn/start", {"turn": 1}),
        _event(3, "step/start", {"turn": 1, "step": 1}),
        _event(
            4, "user/message", {"turn": 1, "step": 1, "message": {"role": "user", "content": "hi"}}, surfaceOp="append"
        ),
        _event(
            5,
            "assistant/message",
            {
                "turn": 1,
                "step": 1,
                "message": {
                    "role": "assistant",
                    "content": [{"type": "toolCall", "id": "c", "name": "ls", "arguments": {}}],
                    "usage": {"input": 10, "output": 2, "cacheRead": 5, "cacheWrite": 0, "cost": cost},
                },
            },
            surfaceOp="append",
        ),
        _event(
            6,
            "compaction/summary",
            {
                "summary": "s",
                "provider": "openai",
                "model": "gpt",
                "tokensBefore": 9,
                "usage": {"input": 100, "output": 20, "cost": cost},
            },
        ),
    ]
    path = _export(tmp_path, events)
    result = replay_file(path)
    assert result.format == "sessionlog"
    metrics = result.metrics
    assert set(metrics) == set(ALL_KEYS)
    assert metrics["sessionFormat"] == "sessionlog-v1"
    assert (metrics["eventsInFile"], metrics["eventsOnBranch"], metrics["eventsOffBranch"]) == (8, 7, 0)
    assert (metrics["provider"], metrics["model"]) == ("openai", "gpt")
    assert (metrics["turns"], metrics["toolCalls"], metrics["compactions"]) == (1, 1, 1)
    assert (metrics["inputTokens"], metrics["outputTokens"], metrics["cacheReadTokens"]) == (110, 22, 5)
    assert metrics["costUsd"] == 0.002
    assert metrics["compactionCostUsd"] == 0.001
    assert metrics["totalTokens"] == 137
    at = replay_file(path, at="4").metrics
    assert (at["eventsOnBranch"], at["eventsOffBranch"], at["costUsd"]) == (5, 2, 0)


def test_sessionlog_export_with_a_seq_gap_is_refused(tmp_path: Path) -> None:
    path = _export(tmp_path, [_event(0, "turn/start", {"turn": 1}), _event(2, "turn/end", {"turn": 1})])
    with pytest.raises(ValidationError) as caught:
        replay_file(path)
    assert caught.value.reason == "SEQ_GAP"
    assert caught.value.metadata["line"] == "3"


def test_sessionlog_export_that_breaks_a_log_rule_is_refused(tmp_path: Path) -> None:
    events = [
        _event(0, "system/message", {"message": {"role": "system", "content": "p"}}, surfaceOp="append"),
        _event(1, "step/start", {"turn": 1, "step": 1}),  # no turn is open
    ]
    with pytest.raises(ValidationError) as caught:
        replay_file(_export(tmp_path, events))
    assert caught.value.metadata["line"] == "3"
    assert caught.value.metadata["seq"] == "1"


FILE_SHAPE = ("sessionFormat", "eventsInFile", "eventsOnBranch", "eventsOffBranch")
SAME_WHATEVER_THE_FORMAT = [k for k in ALL_KEYS if k not in FILE_SHAPE]


@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.stem[:24])
def test_a_pi_file_and_its_export_report_the_same_figures(session: Path, tmp_path: Path) -> None:
    """One session, one set of figures: `turns` (agent runs) and `modelCalls` (assistant messages)
    mean the same whether the session is replayed from Pi's file or from sessionlog's export."""
    pi_file = load_pi_file(session)
    for leaf, _ in leaves(session):
        events = [e.committed(seq, 1000 + seq) for seq, e in enumerate(branch_events(pi_file, leaf))]
        export = tmp_path / f"{leaf}.jsonl"
        export.write_text("".join(sessionlog_lines({"id": "s"}, events)), "utf-8")
        from_pi = replay_file(session, at=leaf).metrics
        from_export = replay_file(export).metrics
        for key in SAME_WHATEVER_THE_FORMAT:
            assert (key, from_pi[key]) == (key, from_export[key])


def test_usage_without_a_price_is_counted_in_either_format(tmp_path: Path) -> None:
    """A cost that leaves out unpriced model calls is a lower bound, and replay says so as `stats`
    does (`unpricedEvents`, docs/projections.md): replay summed the priced calls only, and its
    cost read as the whole, where `stats` of the imported session said what it left out."""
    unpriced = {"input": 40, "output": 4, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 44}  # no cost object
    entries = [
        *ENTRIES[:5],  # a to e: calls costing 0.25 and 0.5
        entry("u1", "e", "message", message=msg("assistant", content=[], provider="local", model="m", usage=unpriced)),
        entry("u2", "u1", "usage", kind="k", usage={**unpriced, "cost": {"total": None}}),  # no number in it
        entry("free", "u2", "usage", kind="k", usage=usage(9, 9, cost=0)),  # a price of 0 is a price
        entry("none", "free", "usage", kind="k", usage={"input": 0, "output": 0, "cost": {}}),  # no tokens
    ]
    path = tmp_path / "unpriced.jsonl"
    path.write_bytes(handmade(*entries))
    from_pi = replay_file(path).metrics
    assert (from_pi["unpricedEvents"], from_pi["costUsd"]) == (2, 0.25 + 0.5)
    pi_file = load_pi_file(path)
    events = [e.committed(seq, 1000 + seq) for seq, e in enumerate(branch_events(pi_file, None))]
    export = tmp_path / "unpriced.sessionlog.jsonl"
    export.write_text("".join(sessionlog_lines({"id": "s"}, events)), "utf-8")
    assert replay_file(export).metrics["unpricedEvents"] == 2
    assert replay_file(export, at="0").metrics["unpricedEvents"] == 0


# --- a negative usage number: refused as the door refuses it -------------------------------


def _negative(entries: list[dict[str, Any]], entry_id: str, field: str, value: float) -> list[dict[str, Any]]:
    """A copy of `entries` whose entry `entry_id` holds `value` at the dotted `field`."""
    out = json.loads(json.dumps(entries))
    target: dict[str, Any] = next(e for e in out if e["id"] == entry_id)
    *parents, last = field.split(".")
    for key in parents:
        target = target[key]
    target[last] = value
    return out


NEGATIVE_USAGE = [
    ("d", "message.usage.output", -10),  # an assistant's token count
    ("e", "message.usage.cost.total", -0.5),  # a tool result's cost
    ("f", "usage.cost.input", -1),  # a compaction's
    ("g", "usage.totalTokens", -22),  # a branch summary's
    ("h", "usage.cacheRead", -3),  # a usage entry's
]


@pytest.mark.parametrize(("entry_id", "field", "value"), NEGATIVE_USAGE, ids=[f for _, f, _ in NEGATIVE_USAGE])
def test_a_negative_usage_number_on_the_branch_is_refused_as_its_import_refuses_it(
    entry_id: str, field: str, value: float, tmp_path: Path
) -> None:
    """A token count or cost below zero, on any entry kind that carries usage, lowered the
    replay's cost and token totals where the service's door (`validate.check_usage`) refuses the
    event it imports as. The replay refuses it with the door's reason and words, naming the line,
    the entry and the field as the file spells it; the import of the same file names the same
    line and entry, and the field of the event (`data.` + the entry's)."""
    entries = _negative(ENTRIES, entry_id, field, value)
    path = tmp_path / "negative.jsonl"
    path.write_bytes(handmade(*entries))
    line = str(2 + [e["id"] for e in entries].index(entry_id))
    with pytest.raises(ValidationError) as replayed:
        replay_file(path)
    assert replayed.value.reason == "NEGATIVE_USAGE"
    assert replayed.value.metadata == {"field": field, "type": entries[int(line) - 2]["type"], "line": line,
                                       "entry": entry_id}  # fmt: skip
    assert str(replayed.value) == (
        f"line {line}: Pi entry {entry_id}: {field} is {value!r}: token counts and costs cannot be negative"
    )
    with pytest.raises(ValidationError) as imported:
        import_pi(load_pi_file(path), DEFAULT_LIMITS)
    assert imported.value.reason == replayed.value.reason
    assert (imported.value.metadata["line"], imported.value.metadata["entry"]) == (line, entry_id)
    assert imported.value.metadata["field"] == f"data.{field}"
    assert f"data.{field} is {value!r}: token counts and costs cannot be negative" in str(imported.value)


@pytest.mark.parametrize(("entry_id", "field", "value"), NEGATIVE_USAGE, ids=[f for _, f, _ in NEGATIVE_USAGE])
def test_the_export_of_a_branch_with_a_negative_usage_number_is_refused_too(
    entry_id: str, field: str, value: float, tmp_path: Path
) -> None:
    """The export replay checks each event by the rules of an append (`fold_export`), this one
    included: the same branch as a sessionlog export is refused with the same reason, naming the
    event's line and seq and the field where the event holds it."""
    pi_file = load_pi_bytes(handmade(*_negative(ENTRIES, entry_id, field, value)))
    events = [e.committed(seq, 1000 + seq) for seq, e in enumerate(branch_events(pi_file))]
    seq = next(e.seq for e in events if isinstance(e.data.get("pi"), dict) and e.data["pi"].get("id") == entry_id)
    export = tmp_path / "export.jsonl"
    export.write_text("".join(sessionlog_lines({"id": "s"}, events)), "utf-8")
    with pytest.raises(ValidationError) as caught:
        replay_file(export)
    assert caught.value.reason == "NEGATIVE_USAGE"
    assert caught.value.metadata["field"] == f"data.{field}"
    assert (caught.value.metadata["line"], caught.value.metadata["seq"]) == (str(seq + 2), str(seq))
    assert str(caught.value).startswith(f"line {seq + 2} (seq {seq}): data.{field} is {value!r}: ")


def test_a_negative_usage_number_off_the_branch_is_neither_summed_nor_checked() -> None:
    """The metrics describe one branch, and only its usage is summed (and checked): a negative
    number on an abandoned branch lowers nothing the replay reports. Replayed at that branch's
    leaf, the number is on the branch, and refused."""
    pi_file = load_pi_bytes(handmade(*_negative(ENTRIES, "x", "message.usage.cost.total", -9)))
    assert pi_metrics(pi_file) == pi_metrics(load_pi_bytes(handmade()))
    with pytest.raises(ValidationError) as caught:
        pi_metrics(pi_file, "x")
    assert (caught.value.reason, caught.value.metadata["entry"]) == ("NEGATIVE_USAGE", "x")
