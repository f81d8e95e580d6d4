"""`import`, `export` and `ingest` against a real server, on SQLite and PostgreSQL.

Conformance through the service: every file Pi wrote is imported (the default leaf's session and
one fork per other leaf), and each session's model history, read back from the server, equals the
context Pi built for that leaf; its stats give Pi's model and thinking level.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from sessionlog.base import failed_earlier
from sessionlog.cli import transfer_commands
from sessionlog.cli.common import State
from sessionlog.cli.main import app as main_app
from sessionlog.cli.offline import register as register_offline
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import LimitExceeded
from sessionlog.core.formats.pi.context import ms_to_iso, session_context
from sessionlog.core.formats.pi.load import load_pi_bytes, load_pi_file
from sessionlog.core.formats.pi.tree import PiTree
from sessionlog.core.formats.replay import LABELS, METRIC_KEYS, replay_file
from sessionlog.core.limits import DEFAULT_LIMITS
from sessionlog.core.projections.stats import STATS_KEYS
from sessionlog.view.page import STATS_LABELS
from tests.support.events import step_end, step_start, tool_call, tool_result, turn_end, turn_start, user
from tests.support.fixtures import RESUMED_SESSION, STREAM_STDOUT, fixture, pi_generated_sessions
from tests.support.fixtures import oracle as pi_oracle
from tests.support.otlp import span_attr, span_ms, spans_of
from tests.support.pages import page_data
from tests.support.scripted import READ, answer, header, usage
from tests.support.servers import ServerThread

SESSIONS = pi_generated_sessions()
STREAM = fixture(STREAM_STDOUT)

app = typer.Typer()
transfer_commands.register(app)


def invoke(cli: CliRunner, *args: str, stdin: str | bytes | None = None) -> Result:
    result = cli.invoke(app, list(args), input=stdin, catch_exceptions=False)
    return result


def imported(cli: CliRunner, *args: str) -> list[dict[str, Any]]:
    result = invoke(cli, "import", *args)
    assert result.exit_code == 0, result.stderr
    sessions: list[dict[str, Any]] = json.loads(result.stdout)["sessions"]
    return sessions


def contexts(session: Path) -> dict[str, dict[str, Any]]:
    data = pi_oracle(session)
    out = {data["defaultLeafId"]: data["defaultContext"]}
    out.update({o["leafId"]: o["context"] for o in data["otherLeaves"]})
    return out


def assert_session_is_pis(client: SessionLogClient, session_id: str, context: dict[str, Any]) -> None:
    assert client.model_history(session_id) == context["messages"]
    stats = client.stats(session_id)
    model = context["model"]
    assert (stats["provider"], stats["model"]) == (model["provider"], model["modelId"])
    assert stats["thinkingLevel"] == context["thinkingLevel"]


# --- conformance with Pi, through the server ----------------------------------------------


@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.stem[:24])
def test_imported_sessions_give_pis_context_for_every_leaf(
    cli: CliRunner, client: SessionLogClient, session: Path
) -> None:
    sessions = imported(cli, str(session))
    expected = contexts(session)
    data = pi_oracle(session)
    assert [s["leaf"] for s in sessions] == [data["defaultLeafId"]] + [o["leafId"] for o in data["otherLeaves"]]
    assert all(s["file"] == str(session) for s in sessions)
    # Named by the file (Pi's session id), so an import of it again finds them: forks `<id>.<leafId>`.
    assert [s["id"] for s in sessions] == [data["sessionId"]] + [
        f"{data['sessionId']}.{s['leaf']}" for s in sessions[1:]
    ]
    for index, entry in enumerate(sessions):
        assert_session_is_pis(client, entry["id"], expected[entry["leaf"]])
        info = client.get_session(entry["id"])
        assert not info.open_turn
        if index > 0:  # a fork of the main session or of an earlier one: the shared prefix is not copied
            assert info.parent_session_id in [earlier["id"] for earlier in sessions[:index]]


def test_id_names_the_main_session_and_its_forks(cli: CliRunner, client: SessionLogClient, sid: str) -> None:
    session = next(s for s in SESSIONS if s.name.startswith("2025-10-04"))
    sessions = imported(cli, str(session), "--id", sid)
    assert sessions[0]["id"] == sid
    assert [s["id"] for s in sessions[1:]] == [f"{sid}.{s['leaf']}" for s in sessions[1:]]
    info = client.get_session(sid)
    assert info.cwd == load_pi_file(session).header["cwd"]
    assert info.metadata["pi"]["sessionId"] == load_pi_file(session).header["id"]
    again = imported(cli, str(session), "--id", sid)  # the same file, the same sessions: nothing to do
    assert [(s["id"], s["status"]) for s in again] == [(s["id"], "already-imported") for s in sessions]
    many = invoke(cli, "import", str(session), str(session), "--id", sid)
    assert many.exit_code == 2 and "one FILE" in many.stderr  # a usage mistake, as typer's own


def test_several_files_and_the_real_resumed_session(cli: CliRunner, client: SessionLogClient) -> None:
    resumed = fixture(RESUMED_SESSION)
    small = next(s for s in SESSIONS if s.name.startswith("2025-10-07"))
    sessions = imported(cli, str(resumed), str(small))
    assert [s["file"] for s in sessions] == [str(resumed), str(small)]
    tree = PiTree(load_pi_file(resumed).entries)
    assert_session_is_pis(client, sessions[0]["id"], session_context(tree))
    assert_session_is_pis(client, sessions[1]["id"], contexts(small)[sessions[1]["leaf"]])


def pi_ms(stamp: str) -> int:
    """An entry's ISO `timestamp` in epoch ms, read here independently of the importer."""
    return round(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def test_an_imported_sessions_durations_are_what_pis_timestamps_say(
    cli: CliRunner, client: SessionLogClient, server: ServerThread, tmp_path: Path
) -> None:
    """The session page of an imported file measures turns, steps and tool calls with Pi's
    timestamps: the import commits every event at once, and those commit times gave 0 s for all."""
    session = next(s for s in SESSIONS if s.name.startswith("2025-10-07"))
    entries = {e["id"]: e for e in map(json.loads, session.read_text("utf-8").splitlines()[1:])}
    (entry,) = imported(cli, str(session))
    out = tmp_path / "page.html"
    shown = CliRunner().invoke(main_app, ["--server", server.target, "view", entry["id"], "-o", str(out)])
    assert shown.exit_code == 0, shown.stderr
    page = page_data(out.read_text("utf-8"))
    # Turn 1: the prompt cdf287cc, a call (9f488379) with its result (d9e298be), the answer 261b6102.
    prompt, call, tool_result, answer_ = (entries[i] for i in ("cdf287cc", "9f488379", "d9e298be", "261b6102"))
    turn, step, tool = page["turns"][0], page["steps"][0], page["toolCalls"][0]
    assert turn["durationMs"] == pi_ms(answer_["timestamp"]) - pi_ms(prompt["timestamp"]) == 5443
    # A model call starts at its message's `timestamp` (Pi stamps it when the request goes out).
    assert step["durationMs"] == pi_ms(tool_result["timestamp"]) - call["message"]["timestamp"] == 3325
    assert tool["callId"] == call["message"]["content"][1]["id"]
    assert tool["durationMs"] == pi_ms(tool_result["timestamp"]) - pi_ms(call["timestamp"]) == 77
    # The transcript says when each row happened by Pi's clock, beside the one commit time of the import.
    rows = client.transcript(entry["id"])
    answered = next(r for r in rows if r["kind"] == "message" and r["data"] == answer_["message"])
    assert answered["recordedTime"] == pi_ms(answer_["timestamp"])
    stamps = {pi_ms(e["timestamp"]) for e in entries.values() if e["type"] == "message"}
    assert {r["recordedTime"] for r in rows if r["kind"] == "message"} == stamps


def pi_turns(path: list[dict[str, Any]]) -> list[int]:
    """The duration of each agent run on `path`, read from Pi's entries here: a run starts at a
    user prompt (else at the request of an assistant message that comes first) and ends at the
    assistant message none of whose tool calls gets a result later on the path."""
    answered_later: list[set[str]] = []
    seen: set[str] = set()
    for entry in reversed(path):
        answered_later.append(set(seen))
        message = entry.get("message") or {}
        if message.get("role") == "toolResult":
            seen.add(message["toolCallId"])
    answered_later.reverse()
    durations, start = [], None
    for entry, later in zip(path, answered_later, strict=True):
        message = entry.get("message") or {}
        if message.get("role") == "user" and start is None:
            start = pi_ms(entry["timestamp"])
        elif message.get("role") == "assistant":
            start = message["timestamp"] if start is None else start
            calls = {block["id"] for block in message["content"] if block.get("type") == "toolCall"}
            if not calls & later:
                durations.append(pi_ms(entry["timestamp"]) - start)
                start = None
    return durations


def test_the_otlp_export_of_an_imported_session_lays_spans_on_pis_times(
    cli: CliRunner, sid: str, tmp_path: Path
) -> None:
    """Every span of an imported session lasts what Pi's timestamps say, where all of them were
    zero-length (the import commits the file at one instant): a model call from the time its
    request went out (the message's `timestamp`) to its entry's, a tool call from the entry that
    asked for it to its result's, a turn from its prompt to its last answer; every span lies
    inside its parent."""
    session = next(s for s in SESSIONS if s.name.startswith("2025-09-19"))
    header, *lines = session.read_text("utf-8").rstrip("\n").split("\n")  # raw U+2028 inside strings
    entries = {e["id"]: e for e in map(json.loads, lines)}
    path = [entries[i] for i in pi_oracle(session)["defaultPath"]]
    imported(cli, str(session), "--id", sid)
    exported = invoke(cli, "export", sid, "--format", "otlp-json", "-o", str(tmp_path / "trace.json"))
    assert exported.exit_code == 0, exported.stderr
    spans = spans_of(json.loads((tmp_path / "trace.json").read_text("utf-8")))

    def lasts(span: dict[str, Any]) -> int:
        start, end = span_ms(span)
        return end - start

    assistants = [e for e in path if (e.get("message") or {}).get("role") == "assistant"]
    chats = [s for s in spans if s["name"].startswith("chat")]
    assert len(chats) == len(assistants) == 43
    assert [lasts(s) for s in chats] == [pi_ms(e["timestamp"]) - e["message"]["timestamp"] for e in assistants]
    asked = {b["id"]: e for e in assistants for b in e["message"]["content"] if b.get("type") == "toolCall"}
    results = {e["message"]["toolCallId"]: e for e in path if (e.get("message") or {}).get("role") == "toolResult"}
    tools = {span_attr(s, "gen_ai.tool.call.id"): s for s in spans if s["name"].startswith("execute_tool")}
    assert set(tools) == set(asked) == set(results)
    assert {i: lasts(s) for i, s in tools.items()} == {
        i: pi_ms(results[i]["timestamp"]) - pi_ms(asked[i]["timestamp"]) for i in tools
    }
    turns = [s for s in spans if s["name"] == "invoke_agent"]
    assert [lasts(s) for s in turns] == pi_turns(path)
    assert sum(lasts(s) == 0 for s in chats + turns) == 0
    by_id = {s["spanId"]: s for s in spans}
    for span in spans:
        if "parentSpanId" in span:
            (start, end), (low, high) = span_ms(span), span_ms(by_id[span["parentSpanId"]])
            assert low <= start <= end <= high, (span["name"], span_attr(span, "sessionlog.seq"))
    root = next(s for s in spans if "parentSpanId" not in s)
    stamps = [pi_ms(e["timestamp"]) for e in path]
    assert span_ms(root) == (pi_ms(json.loads(header)["timestamp"]), max(stamps))


def test_stats_count_the_tool_calls_and_errors_of_pis_unstructured_messages(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """A Pi assistant message whose tool call has no id is imported as a `user/message` kept as
    the model saw it, and the result of that call as an unpaired one. Stats counted the message
    as a model call but dropped its tool call (the Pi file's replay counted it) and its result's
    error: one session, two toolCalls figures."""
    small = next(s for s in SESSIONS if s.name.startswith("2025-10-07"))
    header, *entries = [json.loads(line) for line in small.read_text("utf-8").splitlines()]
    messages = [e["message"] for e in entries if e["type"] == "message"]
    call = next(b for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "toolCall")
    answer = next(m for m in messages if m["role"] == "toolResult" and m["toolCallId"] == call["id"])
    del call["id"]
    answer["isError"] = True
    edited = tmp_path / "unstructured.jsonl"
    edited.write_text("".join(json.dumps(o) + "\n" for o in [header, *entries]), "utf-8")
    (entry,) = imported(cli, str(edited), "--id", sid)  # not the session of the unedited file
    kinds = [e.data["source"]["kind"] for e in client.read_events(entry["id"]) if e.type == "user/message"]
    assert [k for k in kinds if k != "user"] == ["pi-unstructured", "pi-unpaired-tool-result"]
    stats = client.stats(entry["id"])
    replayed = replay_file(edited).metrics
    assert (stats["modelCalls"], stats["toolCalls"]) == (replayed["modelCalls"], replayed["toolCalls"])
    assert stats["toolErrors"] == sum(1 for m in messages if m["role"] == "toolResult" and m["isError"]) == 2


def test_a_file_that_is_not_a_session_is_refused_naming_it(cli: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"message"}\n')
    result = invoke(cli, "import", str(bad))
    assert result.exit_code == 2 and str(bad) in result.stderr and "UNKNOWN_SESSION_FORMAT" in result.stderr
    result = invoke(cli, "import", str(bad), "--format", "pi")  # read as the format it was told
    assert result.exit_code == 2 and str(bad) in result.stderr and "NOT_A_PI_SESSION" in result.stderr


def test_import_tells_an_export_from_a_pi_file_by_its_first_line(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    # `replay` told the two apart; `import` read every file as Pi's unless told
    # (NOT_A_PI_SESSION for the session's own export).
    export = turns_export(tmp_path / "turns.jsonl", 2)
    export.write_text(export.read_text().replace('"id": "exported"', f'"id": "{sid}"', 1))
    pi_file = tmp_path / "pi.jsonl"
    header, *entries = fixture(RESUMED_SESSION).read_text().splitlines(keepends=True)
    pi_file.write_text(json.dumps({**json.loads(header), "id": f"{sid}-pi"}) + "\n" + "".join(entries))
    result = invoke(cli, "import", str(export), str(pi_file), "--format", "pi")
    assert result.exit_code == 2 and "NOT_A_PI_SESSION" in result.stderr, result.stderr
    result = invoke(cli, "import", str(export), str(pi_file))
    assert result.exit_code == 0, result.stderr
    exported, pi = json.loads(result.stdout)["sessions"][:2]
    assert (exported["id"], exported["status"]) == (sid, "imported")
    assert [e.type for e in client.read_events(sid)] == ["turn/start", "turn/end"] * 2
    assert (pi["id"], pi["file"], pi["status"]) == (f"{sid}-pi", str(pi_file), "imported")


def turns_export(path: Path, turns: int, **changes: dict[str, Any]) -> Path:
    """A sessionlog export of `turns` empty turns (two events each, line = seq + 2), with the
    envelope of the event on line N updated by `changes["N"]`."""
    events = [
        {"seq": 2 * (t - 1) + k, "time": 1000 + t, "type": kind, "data": data}
        for t in range(1, turns + 1)
        for k, (kind, data) in enumerate(
            [("turn/start", {"turn": t}), ("turn/end", {"turn": t, "reason": {"kind": "completed"}})]
        )
    ]
    for line, change in changes.items():
        events[int(line.removeprefix("line")) - 2].update(change)
    header = {"type": "sessionlog", "version": 1, "session": {"id": "exported"}}
    path.write_text("".join(json.dumps(obj) + "\n" for obj in [header, *events]))
    return path


def test_a_bad_sessionlog_file_imports_nothing(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """The file is checked as the service checks an append before anything is created: an
    unknown type on line 3001 (well past the first batch) leaves no session, the error names the
    file's line and seq, and the mended file imports under the same id."""
    bad = turns_export(tmp_path / "bad.jsonl", 1600, line3001={"type": "bogus/x"})
    result = invoke(cli, "import", str(bad), "--format", "sessionlog", "--id", sid)
    assert result.exit_code != 0
    assert "UNKNOWN_TYPE" in result.stderr and "line 3001 (seq 2999)" in result.stderr, result.stderr
    assert sid not in [s.id for s in client.list_sessions()]
    early = turns_export(tmp_path / "early.jsonl", 3, line3={"type": "turn/end", "data": {"turn": 1}})
    result = invoke(cli, "import", str(early), "--format", "sessionlog", "--id", sid)
    assert result.exit_code != 0 and "line 3 (seq 1)" in result.stderr, result.stderr
    assert sid not in [s.id for s in client.list_sessions()]
    good = turns_export(tmp_path / "good.jsonl", 1600)
    (entry,) = imported(cli, str(good), "--format", "sessionlog", "--id", sid)
    assert entry["id"] == sid and client.get_session(sid).next_seq == 3200


def test_a_pi_file_with_a_negative_cost_imports_nothing(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """A negative usage number (it would lower the session's cost) is refused as an append
    refuses it (NEGATIVE_USAGE), naming the file's line, before anything is created: the
    importer checks every event by the envelope rules (`validate.validate_proposal`)."""
    lines = fixture(RESUMED_SESSION).read_text().splitlines()
    entry = json.loads(lines[4])
    entry["message"]["usage"]["cost"]["total"] = -5
    lines[4] = json.dumps(entry)
    bad = tmp_path / "negative.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    result = invoke(cli, "import", str(bad), "--id", sid)
    assert result.exit_code != 0
    assert "NEGATIVE_USAGE" in result.stderr and "line 5 (seq " in result.stderr, result.stderr
    assert "data.message.usage.cost.total is -5" in result.stderr, result.stderr
    assert sid not in [s.id for s in client.list_sessions()]


@pytest.mark.parametrize("far", [False, True], ids=["same-batch", "later-batch"])
def test_a_sessionlog_file_with_an_eventid_twice_imports_nothing(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path, far: bool
) -> None:
    """A hand-edited export where two events share an eventId: the service would take the second
    for a re-send of the first (in one batch it refuses the batch after the session was created;
    in a later batch it returned the first's seq, so the import dropped the event, shifted every
    later seq and reported success). It is refused offline, naming both lines, and creates nothing."""
    line = 3001 if far else 5
    bad = turns_export(tmp_path / "dup.jsonl", 1600, line2={"eventId": "e-1"}, **{f"line{line}": {"eventId": "e-1"}})
    result = invoke(cli, "import", str(bad), "--format", "sessionlog", "--id", sid)
    assert result.exit_code != 0
    assert "DUPLICATE_ENTRY_ID" in result.stderr, result.stderr
    assert f"line {line} (seq {line - 2})" in result.stderr and "seq 0 (line 2)" in result.stderr, result.stderr
    assert sid not in [s.id for s in client.list_sessions()]


@pytest.mark.parametrize("fmt", ["pi", "sessionlog"])
def test_an_empty_file_is_empty_session_file(cli: CliRunner, tmp_path: Path, fmt: str) -> None:
    """The documented reason, as `replay` gives it."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = invoke(cli, "import", str(empty), "--format", fmt)
    assert result.exit_code != 0 and "EMPTY_SESSION_FILE" in result.stderr, result.stderr


def test_an_import_the_service_refuses_part_way_says_how_far_it_got(
    db_url: str, sid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A limit lower than the defaults the file was checked against: the session was created,
    and the error says so, with the seq it got to and the refused event's line and seq."""
    with ServerThread(db_url, max_event_bytes=200) as small:
        monkeypatch.setattr(State, "server", small.target)
        big = turns_export(
            tmp_path / "big.jsonl",
            1600,
            line3001={"data": {"turn": 1500, "reason": {"kind": "completed"}, "pad": "x" * 300}},
        )
        result = invoke(CliRunner(), "import", str(big), "--format", "sessionlog", "--id", sid)
        assert result.exit_code != 0
        message = result.stderr
        assert "EVENT_TOO_LARGE" in message and f"session {sid!r} was created" in message, message
        assert "seqs 0..2699 of 3200" in message and "stopped at seq 2700" in message, message
        assert "seq 2999 (line 3001)" in message, message
        with SessionLogClient(small.target) as client:
            assert client.get_session(sid).next_seq == 2700


def test_import_and_ingest_learn_a_lower_batch_limit_from_the_refusal(
    cli: CliRunner, db_url: str, sid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that takes at most 7 events a batch refused the import's first batch of 300
    (BATCH_TOO_LARGE) and the import stopped part way; so did an ingest. The refusal states the
    limit: each batch goes again cut to fit, at the seq it must start at, every event once."""
    with ServerThread(db_url, max_batch_events=7) as small:
        monkeypatch.setattr(State, "server", small.target)
        export = turns_export(tmp_path / "turns.jsonl", 400)
        result = invoke(cli, "import", str(export), "--format", "sessionlog", "--id", sid)
        assert result.exit_code == 0, result.stderr
        ingested = invoke(cli, "ingest", f"{sid}-pi", "--format", "pi-events", stdin=STREAM.read_bytes())
        assert ingested.exit_code == 0, ingested.stderr
        with SessionLogClient(small.target) as client:
            events = list(client.read_events(sid))
            assert [(e.seq, e.type, e.data["turn"]) for e in events] == [
                (2 * (t - 1) + k, kind, t) for t in range(1, 401) for k, kind in enumerate(("turn/start", "turn/end"))
            ]
            assert len({e.event_id for e in events}) == 800
            summary = json.loads(ingested.stdout)
            assert summary["nextSeq"] == client.get_session(f"{sid}-pi").next_seq > 7
            assert [e.seq for e in client.read_events(f"{sid}-pi")] == list(range(summary["nextSeq"]))


FORKED = next(s for s in SESSIONS if s.name.startswith("2025-10-04"))
"""A main branch (lines 2..18 shared, then its own) and three forks with their own entries from line 19."""


def broken_pi(path: Path, line: int, change: Any) -> Path:
    """A copy of `FORKED` with the entry on `line` passed through `change` (which edits it in place)."""
    objs = [json.loads(text) for text in FORKED.read_text("utf-8").splitlines()]
    change(objs[line - 1])
    path.write_text("".join(json.dumps(obj) + "\n" for obj in objs), "utf-8")
    return path


def pad_message(entry: dict[str, Any]) -> None:
    """An entry whose message is 9,000 bytes larger: its event is over a limit of 8,000."""
    entry["message"]["content"][0].update(text="x" * 9000)


def sessions_named(client: SessionLogClient, sid: str) -> list[str]:
    return [s.id for s in client.list_sessions() if s.id == sid or s.id.startswith(f"{sid}.")]


def test_a_bad_pi_file_imports_nothing(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every event of every session (forks included) is checked as the service checks an append
    before anything is created: an entry refused in a fork's own part (line 20) leaves neither the
    main session nor any fork, and the error names the file's line, the seq and the fork. (The
    importer maps whatever Pi accepts to valid events, so the refusal here is a size over limits
    set lower for the check than the file's events need.)"""
    monkeypatch.setattr(transfer_commands, "OFFLINE_LIMITS", replace(DEFAULT_LIMITS, max_event_bytes=8000))
    bad = broken_pi(tmp_path / "fork.jsonl", 20, pad_message)
    result = invoke(cli, "import", str(bad), "--id", sid)
    assert result.exit_code != 0
    message = result.stderr
    assert "EVENT_TOO_LARGE" in message and str(bad) in message, message
    assert "the fork for leaf" in message and "line 20 (seq 37)" in message, message
    assert sessions_named(client, sid) == []
    main = broken_pi(tmp_path / "main.jsonl", 5, pad_message)  # on the path every session shares
    result = invoke(cli, "import", str(main), "--id", sid)
    assert result.exit_code != 0 and "line 5 (seq 7)" in result.stderr, result.stderr
    assert "the fork for leaf" not in result.stderr
    assert sessions_named(client, sid) == []
    monkeypatch.setattr(transfer_commands, "OFFLINE_LIMITS", DEFAULT_LIMITS)
    assert len(imported(cli, str(FORKED), "--id", sid)) == 4


def test_a_pi_import_the_service_refuses_part_way_says_what_was_created(
    db_url: str, sid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A limit lower than the defaults the file was checked against, met in the first fork's own
    entries (line 24): the error names the main session (complete), the fork it stopped in (the
    seqs it holds, the refused event's seq and line) and the forks never created."""
    big = broken_pi(tmp_path / "big.jsonl", 24, pad_message)  # every event of the file is under 8000 bytes but this one
    with ServerThread(db_url, max_event_bytes=8000) as small:
        monkeypatch.setattr(State, "server", small.target)
        result = invoke(CliRunner(), "import", str(big), "--id", sid)
        assert result.exit_code != 0
        message = result.stderr
        assert "EVENT_TOO_LARGE" in message and "refused the import part way" in message, message
        assert f"session {sid!r} was created and it holds all 61 events" in message, message
        fork = f"{sid}.4da4509b"
        assert f"fork {fork!r} (leaf 4da4509b) was created and it holds seqs 0..33 of 126" in message, message
        assert "stopped at seq 34" in message and "no fork was created for leaves 10ed0e37, 11dcf9cb" in message
        assert "Refused: seq 46 (line 24)" in message, message
        with SessionLogClient(small.target) as client:
            assert sorted(sessions_named(client, sid)) == [sid, fork]
            assert client.get_session(sid).next_seq == 61 and client.get_session(fork).next_seq == 34


# --- export ------------------------------------------------------------------------------------


def test_export_pi_gives_back_pis_lines_for_every_leaf(cli: CliRunner, server: ServerThread, tmp_path: Path) -> None:
    session = next(s for s in SESSIONS if s.name.startswith("2025-10-04"))
    raw = session.read_text("utf-8").split("\n")
    by_id = {json.loads(line)["id"]: line + "\n" for line in raw[1:] if line}
    expected = contexts(session)
    for entry in imported(cli, str(session)):
        result = invoke(cli, "export", entry["id"], "--format", "pi")
        assert result.exit_code == 0, result.stderr
        tree = PiTree(load_pi_bytes(result.stdout_bytes).entries)
        assert tree.default_leaf() == entry["leaf"]
        assert session_context(tree) == expected[entry["leaf"]]
        pis = raw[0] + "\n" + "".join(by_id[i] for i in tree.path_ids(entry["leaf"]))
        assert [json.loads(line) for line in result.stdout.splitlines()] == [json.loads(p) for p in pis.splitlines()]
        if server.settings.db.startswith("sqlite"):  # JSONB (PostgreSQL) does not keep nested key order
            assert result.stdout == pis
        out = tmp_path / f"{entry['leaf']}.jsonl"
        assert invoke(cli, "export", entry["id"], "--format", "pi", "-o", str(out)).exit_code == 0
        assert out.read_bytes() == result.stdout_bytes
        # Pi's file opens at the same leaf (under another id: the file's own names the main session)
        assert imported(cli, str(out), "--id", f"{entry['id']}-back")[0]["leaf"] == entry["leaf"]


def test_export_sessionlog_and_import_it_back(cli: CliRunner, client: SessionLogClient, tmp_path: Path) -> None:
    session = next(s for s in SESSIONS if s.name.startswith("2025-09-23"))  # compactions with copies
    (entry,) = imported(cli, str(session))
    out = tmp_path / "export.jsonl"
    result = invoke(cli, "export", entry["id"], "--format", "sessionlog", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    lines = out.read_text("utf-8").splitlines()
    header = json.loads(lines[0])
    assert header["type"] == "sessionlog" and header["version"] == 1 and header["session"]["id"] == entry["id"]
    assert "lease" not in header["session"]
    (same,) = imported(cli, str(out), "--format", "sessionlog")  # named by the export: it is there
    assert (same["id"], same["status"], same["leaf"]) == (entry["id"], "already-imported", None)
    (copy,) = imported(cli, str(out), "--format", "sessionlog", "--id", f"{entry['id']}-copy")
    assert copy["status"] == "imported"
    assert client.model_history(copy["id"]) == contexts(session)[entry["leaf"]]["messages"]
    original = [e.to_json() for e in client.read_events(entry["id"])]
    again = [e.to_json() for e in client.read_events(copy["id"])]
    assert [{k: v for k, v in e.items() if k != "time"} for e in again] == [
        {k: v for k, v in e.items() if k != "time"} for e in original
    ]


def test_export_sessionlog_writes_each_line_as_its_event_is_read(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long session's export holds a page of events, not its log: each line is written before
    the events a page further on are read (it read every event before writing a line)."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    for first in range(1, 1201, 400):
        client.append(sid, lease, [e for t in range(first, first + 400) for e in (turn_start(t), turn_end(t))])
    read = 0
    ahead: list[int] = []
    events = SessionLogClient.read_events
    lines = transfer_commands.sessionlog_lines

    def counted(self: SessionLogClient, *args: Any, **kwargs: Any) -> Iterator[Any]:
        nonlocal read
        for event in events(self, *args, **kwargs):
            read += 1
            yield event

    def watched(*args: Any) -> Iterator[str]:
        for written, line in enumerate(lines(*args)):
            ahead.append(read - written)
            yield line

    monkeypatch.setattr(SessionLogClient, "read_events", counted)
    monkeypatch.setattr(transfer_commands, "sessionlog_lines", watched)
    out = tmp_path / "long.jsonl"
    assert invoke(cli, "export", sid, "--format", "sessionlog", "-o", str(out)).exit_code == 0
    assert len(out.read_text("utf-8").splitlines()) == 2401 == len(ahead)
    assert max(ahead) <= 1  # the line of each event is written before the next is read
    streamed = invoke(cli, "export", sid, "--format", "sessionlog")
    assert streamed.exit_code == 0 and streamed.stdout_bytes == out.read_bytes()


def test_export_pi_of_a_native_session_keeps_each_calls_usage(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """A harness logs an assistant message's usage in `data.usage` (events.md); Pi keeps it in the
    message. The exported file carried the message without it: its tokens and cost were 0."""
    script = [
        user("Add a stats endpoint."),
        turn_start(1),
        step_start(1, 1),
        answer(1, 1, usage(1000, 0, 50), ("c1", "read")),
        tool_call(1, 1, "c1", "read"),
        tool_result(1, 1, "c1", "contents"),
        step_end(1, 1),
        step_start(1, 2),
        answer(1, 2, usage(200, 1000, 40), text="Done."),
        step_end(1, 2),
        turn_end(1),
    ]
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    client.append(sid, lease, script, expected_next_seq=0)
    client.release_lease(lease)
    out = tmp_path / "native.jsonl"
    assert invoke(cli, "export", sid, "--format", "pi", "-o", str(out)).exit_code == 0
    (entry,) = imported(cli, str(out), "--id", f"{sid}-back")  # the file names `sid`, which holds other events
    keys = ("modelCalls", "inputTokens", "outputTokens", "cacheReadTokens", "costUsd")
    original, again = client.stats(sid), client.stats(entry["id"])
    assert original["costUsd"] > 0
    assert {k: again[k] for k in keys} == {k: original[k] for k in keys}


def native_script(header_config: dict[str, Any]) -> list[dict[str, Any]]:
    """A session another harness wrote: its route and thinking level only in the request header,
    assistant messages without `provider`/`model`, usage in `data.usage` (cache writes too)."""
    calls = usage(1000, 0, 50)
    calls["cacheWrite"] = 300
    bare_answer = answer(1, 1, calls, ("c1", "read"))
    del bare_answer["data"]["message"]["provider"], bare_answer["data"]["message"]["model"]
    done = answer(1, 2, usage(200, 1000, 40), text="Done.")
    del done["data"]["message"]["provider"], done["data"]["message"]["model"]
    return [
        header({"config": header_config, "tools": [READ]}, "initial"),
        user("Add a stats endpoint."),
        turn_start(1),
        step_start(1, 1),
        bare_answer,
        tool_call(1, 1, "c1", "read"),
        tool_result(1, 1, "c1", "contents"),
        step_end(1, 1),
        step_start(1, 2),
        done,
        step_end(1, 2),
        turn_end(1),
    ]


def replay_json(path: Path) -> dict[str, Any]:
    """What `sessionlog replay FILE --json` prints."""
    offline = typer.Typer()
    register_offline(offline)
    result = CliRunner().invoke(offline, ["replay", str(path), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


SHARED = [key for key in METRIC_KEYS if key in STATS_KEYS]


def test_stats_and_the_replay_of_the_export_name_each_figure_alike(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """One figure, one name: `replay --json` of a session's export gives, under every key it
    shares with `stats`, what `stats` gives (`model` the model id alone, `provider` apart, the
    thinking level as `thinkingLevel`, cache writes too), and the table and the session page label
    each the same. Replay printed `model` as `acme/m-1` and the level as `thinking`."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    config = {"provider": "acme", "model": "m-1", "thinkingLevel": "high"}
    client.append(sid, lease, native_script(config), expected_next_seq=0)
    client.release_lease(lease)
    out = tmp_path / "native.sessionlog.jsonl"
    assert invoke(cli, "export", sid, "--format", "sessionlog", "-o", str(out)).exit_code == 0
    stats, replayed = client.stats(sid), replay_json(out)
    assert {"model", "provider", "thinkingLevel", "cacheWriteTokens", "costUsd", "unpricedEvents"} <= set(SHARED)
    assert {key: replayed[key] for key in SHARED} == {key: stats[key] for key in SHARED}
    assert (replayed["model"], replayed["provider"], replayed["thinkingLevel"]) == ("m-1", "acme", "high")
    assert replayed["cacheWriteTokens"] == 300
    assert {key: LABELS[key] for key in SHARED} == {key: STATS_LABELS[key] for key in SHARED}


def test_the_pi_export_of_another_harness_session_names_its_model(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """A session whose model and thinking level are only in its request header (assistant
    messages without `provider`/`model`, as another harness writes them) replays from its Pi
    export with the model and level `stats` names, where the file had no `model_change` and the
    replay said `model: null`, `thinking: off`."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    config = {"provider": "acme", "model": "m-1", "thinkingLevel": "high"}
    client.append(sid, lease, native_script(config), expected_next_seq=0)
    later = {"provider": "acme", "model": "m-2", "thinkingLevel": "low"}  # after the last message
    client.append(sid, lease, [header({"config": later, "tools": [READ]}, "change")])
    client.release_lease(lease)
    out = tmp_path / "native.pi.jsonl"
    assert invoke(cli, "export", sid, "--format", "pi", "-o", str(out)).exit_code == 0
    stats, replayed = client.stats(sid), replay_json(out)
    assert (stats["provider"], stats["model"], stats["thinkingLevel"]) == ("acme", "m-2", "low")
    same = ("model", "provider", "thinkingLevel", "modelCalls", "toolCalls", "inputTokens", "cacheReadTokens")
    same += ("cacheWriteTokens", "outputTokens", "costUsd")
    assert {key: replayed[key] for key in same} == {key: stats[key] for key in same}
    # Imported back, the session has the same route (Pi's entries are what import reads it from).
    (entry,) = imported(cli, str(out), "--id", f"{sid}-back")
    again = client.stats(entry["id"])
    assert {key: again[key] for key in same} == {key: stats[key] for key in same}
    lines = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assistants = [e["message"] for e in lines if e["type"] == "message" and e["message"]["role"] == "assistant"]
    assert {(m["provider"], m["model"]) for m in assistants} == {("acme", "m-1")}


@pytest.mark.parametrize("empty", [True, False])
def test_export_pi_stamps_the_header_with_the_sessions_creation_time(
    cli: CliRunner, client: SessionLogClient, sid: str, empty: bool
) -> None:
    """A session not imported from Pi gets a fresh header, stamped as Pi stamps one: when the
    session was created. An empty session's said 1970-01-01 (no event to take a time from)."""
    created = client.create_session(sid, cwd="/repo")
    if not empty:
        time.sleep(0.01)  # its first event commits after the session was created
        lease = client.acquire_lease(sid)
        client.append(sid, lease, [user("hi")], expected_next_seq=0)
        client.release_lease(lease)
    done = invoke(cli, "export", sid, "--format", "pi")
    assert done.exit_code == 0, done.stderr
    header = json.loads(done.stdout.splitlines()[0])
    assert header == {
        "type": "session",
        "version": 3,
        "id": sid,
        "timestamp": ms_to_iso(created.create_time),
        "cwd": "/repo",
    }


# --- ingest ------------------------------------------------------------------------------------


def stream_lines(*events: dict[str, Any]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def test_ingest_the_real_stream(cli: CliRunner, client: SessionLogClient, sid: str) -> None:
    result = invoke(cli, "ingest", sid, "--format", "pi-events", stdin=STREAM.read_bytes())
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary == {"session": sid, "appended": 8, "nextSeq": 8, "incomplete": 0, "openTurn": False}
    history = client.model_history(sid)
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[1]["content"][0]["text"] == "Hi!"
    stats = client.stats(sid)
    assert (stats["turns"], stats["steps"], stats["inputTokens"], stats["costUsd"]) == (1, 1, 1488, 0.00762)
    types = [e.type for e in client.read_events(sid)]
    assert types == ["pi/session", "turn/start", "step/start", "system/message", "user/message",
                     "assistant/message", "step/end", "turn/end"]  # fmt: skip
    exported = invoke(cli, "export", sid, "--format", "pi")
    assert json.loads(exported.stdout.splitlines()[0])["id"] == "019e7434-08a3-772a-ba93-08265b85f937"
    # a second run appends after the first: a new turn
    again = invoke(cli, "ingest", sid, "--format", "pi-events", stdin=STREAM.read_bytes())
    assert again.exit_code == 0, again.stderr
    assert client.stats(sid)["turns"] == 2 and len(client.model_history(sid)) == 4


ASSISTANT = {"role": "assistant", "provider": "p", "model": "m", "api": "x", "timestamp": 2}
TOOL_RUN = [
    {"type": "agent_start"},
    {"type": "turn_start"},
    {"type": "message_start", "message": {"role": "user", "content": "list", "timestamp": 1}},
    {"type": "message_end", "message": {"role": "user", "content": "list", "timestamp": 1}},
    {"type": "message_start", "message": {**ASSISTANT, "content": []}},
    {
        "type": "message_update",
        "assistantMessageEvent": {"type": "toolcall_start", "contentIndex": 0, "id": "c1", "toolName": "ls"},
    },
    {"type": "message_update", "assistantMessageEvent": {"type": "toolcall_delta", "contentIndex": 0, "delta": "{}"}},
    {
        "type": "message_end",
        "message": {
            **ASSISTANT,
            "content": [{"type": "toolCall", "id": "c1", "name": "ls", "arguments": {}}],
            "stopReason": "toolUse",
        },
    },
    {"type": "tool_execution_start", "toolCallId": "c1", "toolName": "ls", "args": {}},
    {"type": "tool_execution_update", "toolCallId": "c1", "toolName": "ls", "args": {}, "partialResult": {}},
    {"type": "tool_execution_end", "toolCallId": "c1", "toolName": "ls", "result": {}, "isError": False},
    {"type": "message_start", "message": {"role": "toolResult", "toolCallId": "c1", "toolName": "ls", "content": []}},
    {
        "type": "message_end",
        "message": {"role": "toolResult", "toolCallId": "c1", "toolName": "ls", "content": [], "isError": False},
    },
    {"type": "turn_end"},
    {"type": "turn_start"},
    {"type": "message_start", "message": {**ASSISTANT, "content": []}},
    {"type": "message_update", "assistantMessageEvent": {"type": "text_start", "contentIndex": 0}},
    {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": "two fi"}},
]


def test_ingest_tool_calls_and_an_incomplete_message(cli: CliRunner, client: SessionLogClient, sid: str) -> None:
    result = invoke(cli, "ingest", sid, "--format", "pi-events", stdin=stream_lines(*TOOL_RUN))
    assert result.exit_code == 0, result.stderr
    assert "incomplete assistant message (turn 2)" in result.stderr
    assert "assistant/attempt (partial)" in result.stderr and "the turn stays open" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["incomplete"] == 1 and summary["openTurn"] is True
    events = list(client.read_events(sid))
    assert [e.type for e in events] == [
        "turn/start", "step/start", "system/message", "user/message", "assistant/message", "tool/call",
        "tool/result", "step/end", "step/start", "assistant/attempt",
    ]  # fmt: skip
    call = events[5].data
    assert (call["callId"], call["name"], call["turn"], call["step"]) == ("c1", "ls", 1, 1)
    attempt = events[-1].data
    assert attempt["partial"]["content"] == [{"type": "text", "text": "two fi"}]
    assert attempt["error"]["code"] == "INCOMPLETE_MESSAGE"
    assert [m["role"] for m in client.model_history(sid)] == ["user", "assistant", "toolResult"]


def test_ingest_refuses_a_truncated_stream_unless_lenient(cli: CliRunner, client: SessionLogClient, sid: str) -> None:
    text = STREAM.read_text("utf-8")
    cut = text[: text.rindex("\n", 0, len(text) - 1) + 1] + '{"type":"agent_e'
    strict = invoke(cli, "ingest", sid, "--format", "pi-events", stdin=cut)
    assert strict.exit_code != 0 and "TRUNCATED_LAST_LINE" in strict.stderr
    other = sid + "-lenient"
    lenient = invoke(cli, "ingest", other, "--format", "pi-events", "--lenient", stdin=cut)
    assert lenient.exit_code == 0, lenient.stderr
    assert "dropped a truncated last line" in lenient.stderr
    assert [m["role"] for m in client.model_history(other)] == ["user", "assistant"]


def test_ingest_refuses_an_event_over_a_limit_naming_its_line(
    cli: CliRunner, client: SessionLogClient, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each event is checked as the service checks an append before it is sent, so a refusal names
    the stream's line; the service's own refusal named only the event's index in some batch."""
    monkeypatch.setattr(transfer_commands, "OFFLINE_LIMITS", replace(DEFAULT_LIMITS, max_event_bytes=2000))
    text = [{"type": "text", "text": "x" * 3000}]
    big = {"role": "toolResult", "toolCallId": "c1", "toolName": "ls", "content": text}
    stream = [*TOOL_RUN[:11], {"type": "message_end", "message": big}, *TOOL_RUN[13:15]]
    result = invoke(cli, "ingest", sid, "--format", "pi-events", stdin=stream_lines(*stream))
    assert result.exit_code != 0
    assert "EVENT_TOO_LARGE: pi event stream: line 12 (seq 6): tool/result: " in result.stderr, result.stderr


def test_ingest_refuses_a_pi_session_file_naming_import(cli: CliRunner, client: SessionLogClient, sid: str) -> None:
    """A session file starts with the header a stream starts with; its entries went in as
    ignorable events of kinds the stream parser did not know, and nothing said the session held
    no message. Its first entry is refused, pointing at `sessionlog import`."""
    result = invoke(cli, "ingest", sid, "--format", "pi-events", stdin=fixture(RESUMED_SESSION).read_bytes())
    assert result.exit_code != 0
    assert "BAD_STREAM_EVENT: line 2: a Pi session file's entry" in result.stderr
    assert "sessionlog import" in result.stderr
    assert list(client.read_events(sid)) == []


def test_ingest_after_a_killed_run_resumes_the_session(cli: CliRunner, client: SessionLogClient, sid: str) -> None:
    events = [json.loads(line) for line in STREAM.read_text("utf-8").splitlines()]
    killed = [e for e in events if e["type"] not in ("turn_end", "agent_end")]  # cut after the reply, mid-run
    first = invoke(cli, "ingest", sid, "--format", "pi-events", stdin=stream_lines(*killed))
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout)["openTurn"] is True
    # The lease was given back, so no lapse of it brings the service's repair: it said it would.
    assert f"the turn stays open until the session is resumed (`sessionlog resume {sid}`" in first.stderr
    assert client.get_session(sid).lease is None
    second = invoke(cli, "ingest", sid, "--format", "pi-events", stdin=STREAM.read_bytes())
    assert second.exit_code == 0, second.stderr
    assert json.loads(second.stdout)["openTurn"] is False
    types = [e.type for e in client.read_events(sid)]
    resumed_at = types.index("session/end-seed")
    assert types[resumed_at - 2 : resumed_at] == ["step/end", "turn/end"]  # the service's repair of run 1
    ends = [e.data["reason"]["kind"] for e in client.read_events(sid) if e.type == "turn/end"]
    assert ends == ["interrupted", "completed"]
    assert [m["role"] for m in client.model_history(sid)] == ["user", "assistant", "user", "assistant"]


def test_a_refusal_seen_through_a_later_batch_still_names_the_refused_event(client: SessionLogClient, sid: str) -> None:
    # The import pipelines its batches: when the refusal comes back while it is still sending,
    # the next append raises the writer's earlier failure (base.failed_earlier), which names no
    # event; the report goes by that failure's cause, the refused batch's own error.
    client.create_session(sid)
    client.append(sid, client.acquire_lease(sid), [{"type": "test/note", "ignorable": True, "data": {}}] * 3)
    refused = LimitExceeded("EVENT_TOO_LARGE", "event 2: event data is 352 bytes, over the limit of 200")
    refused.metadata["event_index"] = "2"
    created = transfer_commands._Written(sid, f"session {sid!r}", 10, lambda seq: seq + 2)
    for seen in (refused, failed_earlier(refused)):
        report = transfer_commands._stopped_midway(client, [created], seen)
        assert report.reason == "EVENT_TOO_LARGE"
        assert "holds seqs 0..2 of 10 and stopped at seq 3" in report.message, report.message
        assert report.message.endswith("Refused: seq 5 (line 7): event data is 352 bytes, over the limit of 200")


def test_a_refusal_of_the_first_batch_says_the_session_holds_nothing(client: SessionLogClient, sid: str) -> None:
    """Refused at seq 0, the report said 'it holds seqs 0..-1 of 10'."""
    client.create_session(sid)
    refused = LimitExceeded("EVENT_TOO_LARGE", "event 0: event data is 352 bytes, over the limit of 200")
    refused.metadata["event_index"] = "0"
    created = transfer_commands._Written(sid, f"session {sid!r}", 10, lambda seq: seq + 2)
    report = transfer_commands._stopped_midway(client, [created], refused)
    assert f"session {sid!r} was created and it holds none of its 10 events;" in report.message, report.message
    assert report.message.endswith("Refused: seq 0 (line 2): event data is 352 bytes, over the limit of 200")


@pytest.mark.parametrize("fmt", ["pi", "sessionlog"])
def test_a_malformed_file_is_a_usage_mistake_for_import_as_for_replay(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path, fmt: str
) -> None:
    """`import` of a malformed file exited 1 where `replay` of the same file exits 2: the file is
    the user's mistake and creates nothing, the usage status 2 for both (README, exit statuses)."""
    source = FORKED if fmt == "pi" else turns_export(tmp_path / "turns.jsonl", 3)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(source.read_text("utf-8") + "{not json\n", "utf-8")
    replayed = CliRunner().invoke(main_app, ["replay", str(bad)])
    assert replayed.exit_code == 2 and "MALFORMED_JSON" in replayed.stderr, replayed.stderr
    result = invoke(cli, "import", str(bad), "--format", fmt, "--id", sid)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"sessionlog: error: MALFORMED_JSON: {bad}: ") and "line " in result.stderr
    assert sessions_named(client, sid) == []


def test_a_malformed_file_among_several_imports_none_of_them(
    cli: CliRunner, client: SessionLogClient, tmp_path: Path
) -> None:
    """The files were imported one by one: a malformed second file failed (status 2, "a bad
    file creates nothing") after the first had been imported, and its session went unreported.
    Every file is checked first: none is imported."""
    good = turns_export(tmp_path / "good.jsonl", 2)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text("utf-8") + "{not json\n", "utf-8")
    before = {s.id for s in client.list_sessions()}
    result = invoke(cli, "import", str(good), str(bad), "--format", "sessionlog")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"sessionlog: error: MALFORMED_JSON: {bad}: ")
    assert {s.id for s in client.list_sessions()} == before
