"""`sessionlog export --format otlp-json` and `sessionlog view` against a real server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sessionlog.cli.main import app
from sessionlog.client import SessionLogClient
from sessionlog.core.costs import own_figures
from sessionlog.core.projections.timeline import timeline
from sessionlog.view import page
from tests.support.events import step_end, step_start, system, turn_start, user
from tests.support.pages import page_data
from tests.support.scripted import HEADER_1, answer, usage, write_scripted
from tests.support.servers import ServerThread
from tests.view.test_page_http import UNBUILT

ROOT = Path(__file__).resolve().parents[2]


def run(server: ServerThread, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessionlog", "--server", server.target, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_otlp_export_of_a_fork_matches_its_own_stats(server: ServerThread, client: SessionLogClient, sid: str) -> None:
    """A fork's trace holds its own events: its token sums are its stats less its source's at
    the cut (all of the session's for the session itself), its markers its own."""
    child = write_scripted(client, sid)
    fork_seq = client.get_session(child).fork_seq
    assert fork_seq is not None
    for session, inherited in ((sid, None), (child, client.stats(sid, at_seq=fork_seq))):
        done = run(server, "export", session, "--format", "otlp-json")
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
        own = own_figures(client.stats(session), inherited)
        assert_sums(spans, own, session)
    assert [e["name"] for e in spans[0]["events"]] == ["sessionlog.fork"]  # the fork's own seed
    again = run(server, "export", child, "--format", "otlp-json")
    assert again.stdout == done.stdout  # deterministic ids and order


def assert_sums(spans: list[dict[str, Any]], stats: dict[str, Any], session: str) -> None:
    """The spans' token sums and root cost are `stats`' figures, every span names `session`."""

    def attr(span: dict, key: str) -> object:
        for kv in span["attributes"]:
            if kv["key"] == key:
                value = kv["value"]
                return int(value["intValue"]) if "intValue" in value else next(iter(value.values()))
        return None

    chat = [s for s in spans if attr(s, "gen_ai.operation.name") == "chat"]
    assert sum(int(attr(s, "gen_ai.usage.output_tokens")) for s in chat) == stats["outputTokens"]
    assert sum(int(attr(s, "gen_ai.usage.cache_read.input_tokens")) for s in chat) == stats["cacheReadTokens"]
    assert attr(spans[0], "sessionlog.cost_usd") == stats["costUsd"]
    assert {attr(s, "gen_ai.conversation.id") for s in spans if attr(s, "gen_ai.operation.name")} <= {session}


def test_view_writes_one_self_contained_file(
    server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    child = write_scripted(client, sid)
    out = tmp_path / "page.html"
    done = run(server, "view", child, "-o", str(out), "--at", "40")
    assert done.returncode == 0, done.stderr
    html = out.read_text(encoding="utf-8")
    assert "src=" not in html and 'href="http' not in html  # nothing loaded from elsewhere
    data = html.split('<script type="application/json" id="sessionlog-data">', 1)[1].split("</script>", 1)[0]
    page = json.loads(data)
    assert page["session"]["parent"] == sid and page["session"]["atSeq"] == 40
    assert page["stats"] == client.stats(child, at_seq=40)
    missing = run(server, "view", "no-such-session", "-o", str(tmp_path / "x.html"))
    assert missing.returncode == 1 and "SESSION_NOT_FOUND" in missing.stderr
    assert not (tmp_path / "x.html").exists()


def test_diff_prints_the_request_diff(server: ServerThread, client: SessionLogClient, sid: str) -> None:
    write_scripted(client, sid)
    done = run(server, "diff", sid, "--from", "14", "--to", "37")
    assert done.returncode == 0, done.stderr
    diff = json.loads(done.stdout)
    assert diff["header"]["fields"] == ["tools"] and diff["prefixKept"] is False
    assert diff["messages"]["replaced"] == [2, 5, 7, 10, 12] and diff["messages"]["added"] == [32, 35]
    backwards = run(server, "diff", sid, "--from", "37", "--to", "14")
    assert backwards.returncode == 1 and "SEQ_OUT_OF_RANGE" in backwards.stderr


def test_a_header_change_the_request_does_not_carry_keeps_the_prefix(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """`adapterDefaults` is logged with a header but not sent (the request is `{...config,
    messages, tools}`): a change of it alone left the request's bytes and sha256 as they were,
    yet `diff` said the prefix was not kept and the timeline blamed the next cache drop on the
    header. Both follow the request's bytes now; the header marker still names the field."""
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.report_header(HEADER_1).result()
        writer.append([system("s"), user("go"), turn_start(1), step_start(1, 1)]).result()
        writer.append([answer(1, 1, usage(100, 1000, 5), text="a"), step_end(1, 1)]).result()
        flagged = writer.report_header({**HEADER_1, "adapterDefaults": {"temperature": True}}).result()
        assert (flagged.reason, flagged.changed_fields) == ("change", ["adapterDefaults"])
        writer.append([step_start(1, 2), answer(1, 2, usage(1100, 0, 5), text="b"), step_end(1, 2)]).result()
    at = flagged.header_seq
    assert at is not None
    assert client.request(sid, at_seq=at - 1)["sha256"] == client.request(sid, at_seq=at)["sha256"]
    done = run(server, "diff", sid, "--from", str(at - 1), "--to", str(at))
    assert done.returncode == 0, done.stderr
    diff = json.loads(done.stdout)
    assert (diff["header"]["fields"], diff["header"]["logged"], diff["prefixKept"]) == ([], [at], True)
    drawn = timeline(list(client.read_events(sid)))
    (drop,) = [request["drop"] for request in drawn["requests"] if request["drop"] is not None]
    assert drop["causes"] == ["none"] and drop["diff"]["prefixKept"] is True
    (marker,) = [m for m in drawn["markers"] if m["kind"] == "header" and m["seq"] == at]
    assert marker["fields"] == ["adapterDefaults"]


def test_view_and_diff_past_the_head_name_the_sessions_length(
    server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """`view --at` and `diff --to` (or `--from`) past the last seq are refused as `history
    --at` is, in the same line (SEQ_NOT_FOUND, naming the session's next seq, not the prefix
    read), where diff said SEQ_OUT_OF_RANGE; view writes nothing. A diff from after its to is
    SEQ_OUT_OF_RANGE."""
    write_scripted(client, sid)
    length = client.get_session(sid).next_seq
    out = tmp_path / "page.html"
    history = run(server, "history", sid, "--at", str(length))
    past = run(server, "view", sid, "-o", str(out), "--at", str(length))
    assert past.returncode == 1 and "SEQ_NOT_FOUND" in past.stderr and not out.exists(), past.stderr
    assert past.stderr == history.stderr
    last = run(server, "view", sid, "-o", str(out), "--at", str(length - 1))
    assert last.returncode == 0, last.stderr
    backwards = run(server, "diff", sid, "--from", "3", "--to", "1")
    assert backwards.returncode == 1 and "SEQ_OUT_OF_RANGE" in backwards.stderr, backwards.stderr
    assert (
        history.stderr
        == f"sessionlog: error: SEQ_NOT_FOUND: session {sid!r} has no seq {length} (next seq is {length})\n"
    )
    for first in ("1", str(length)):
        beyond = run(server, "diff", sid, "--from", first, "--to", str(length))
        assert (beyond.returncode, beyond.stdout, beyond.stderr) == (1, "", history.stderr)


def test_the_pages_transcript_names_each_messages_role_and_marks_tool_errors(
    server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """The transcript projection's message rows carry the message itself as `data`: the page
    shows its role, and a tool result with `isError` (the tool error at 12, repair's closers at
    51 and 52) stands out."""
    child = write_scripted(client, sid)
    out = tmp_path / "page.html"
    done = run(server, "view", child, "-o", str(out))
    assert done.returncode == 0, done.stderr
    html = out.read_text(encoding="utf-8")
    rows = {row["seq"]: row for row in page_data(html)["transcript"]}
    assert [rows[seq]["role"] for seq in (2, 5, 7, 32)] == ["user", "assistant", "toolResult", "user"]
    assert rows[3]["role"] is None  # turn/start: an event, not a message
    assert sorted(seq for seq, row in rows.items() if row.get("isError")) == [12, 51, 52]


def test_view_without_its_chart_library_says_so_before_reading_the_log(
    server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`view` of a clone where `make` was not run fails at once, not after reading the whole log."""
    child = write_scripted(client, sid)
    reads: list[str] = []
    read_events = SessionLogClient.read_events

    def counted(self: SessionLogClient, session_id: str, **kwargs: Any) -> Iterator[Any]:
        reads.append(session_id)
        return read_events(self, session_id, **kwargs)

    monkeypatch.setattr(SessionLogClient, "read_events", counted)
    monkeypatch.setattr(page, "ASSETS", UNBUILT)
    result = CliRunner().invoke(app, ["--server", server.target, "view", child, "-o", str(tmp_path / "p.html")])
    assert result.exit_code == 1
    assert "vendor/not-built.iife.min.js is missing: run `make`" in result.stderr
    assert reads == [] and not (tmp_path / "p.html").exists()


@pytest.mark.parametrize("command", [["view"], ["export", "--format", "pi"], ["export", "--format", "sessionlog"]])
def test_an_output_path_that_cannot_be_written_is_one_line_and_leaves_nothing(
    server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path, command: list[str]
) -> None:
    """`-o` into a missing directory or onto a directory is the user's mistake: one line naming
    the path, exit status 2 and no file or temporary file left, where it was a traceback."""
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([user("héllo 🎉")]).result()
    verb, *options = command
    for target in (tmp_path / "no-such-dir" / "out", tmp_path):
        done = run(server, verb, sid, *options, "-o", str(target))
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"sessionlog: error: cannot write {target}: "), done.stderr
        assert len(done.stderr.splitlines()) == 1 and done.stdout == ""
    assert list(tmp_path.iterdir()) == []
    written = tmp_path / "out"
    assert run(server, verb, sid, *options, "-o", str(written)).returncode == 0
    assert "héllo 🎉" in written.read_text(encoding="utf-8") and list(tmp_path.iterdir()) == [written]


def _pi_line(entry_id: str, parent: str | None, message: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2025-01-01T00:00:00.000Z",
        "message": message,
    }


def _pi_result(call: str, *, error: bool) -> dict[str, Any]:
    text = [{"type": "text", "text": "failed" if error else "done"}]
    return {"role": "toolResult", "toolCallId": call, "toolName": "bash", "content": text, "isError": error}


def _pi_call(call: str) -> dict[str, Any]:
    return {"type": "toolCall", "id": call, "name": "bash", "arguments": {"command": "ls"}}


def test_the_page_and_stats_count_pi_messages_kept_as_user_messages_alike(
    server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """A Pi file answers call c1 twice, with an error both times: the second result's call is no
    longer pending, so it is imported as the fallback `user/message` that keeps its role
    (`pi-unpaired-tool-result`). It is a tool error all the same, once in `stats` and once on the
    page (its summary's `stats` and the timeline's `counts` alike), where the page's count only
    took results answering a call it saw open and said 1. Then an assistant message asks for two
    calls under one id, so it is imported as the fallback `pi-unstructured`: its two calls are
    the model's, in `stats` and in the timeline's `counts` alike (3 in all), where the counts took
    only an `assistant/message`'s calls and said 1."""
    answer = {"role": "assistant", "content": [_pi_call("c1")], "provider": "a", "model": "m", "stopReason": "toolUse"}
    repeated = {**answer, "content": [_pi_call("c2"), _pi_call("c2")]}
    session_id = sid
    head = {"type": "session", "version": 3, "id": session_id, "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/w"}
    entries = [
        head,
        _pi_line("u1", None, {"role": "user", "content": "run it", "timestamp": 1}),
        _pi_line("a1", "u1", {**answer, "timestamp": 2}),
        _pi_line("r1", "a1", _pi_result("c1", error=True)),
        _pi_line("r2", "r1", _pi_result("c1", error=True)),
        _pi_line("a2", "r2", {**repeated, "timestamp": 3}),
    ]
    pi_file = tmp_path / "errors.jsonl"
    pi_file.write_text("".join(json.dumps(entry) + "\n" for entry in entries), encoding="utf-8")
    done = run(server, "import", str(pi_file))
    assert done.returncode == 0, done.stderr
    kept = [e for e in client.read_events(session_id) if e.data.get("message", {}).get("role") == "toolResult"]
    assert [(e.type, e.data.get("source", {}).get("kind")) for e in kept] == [
        ("tool/result", None),
        ("user/message", "pi-unpaired-tool-result"),
    ]
    out = tmp_path / "page.html"
    shown = run(server, "view", session_id, "-o", str(out))
    assert shown.returncode == 0, shown.stderr
    data = page_data(out.read_text(encoding="utf-8"))
    assert client.stats(session_id)["toolErrors"] == data["stats"]["toolErrors"] == data["counts"]["toolErrors"] == 2
    assert data["counts"]["repairs"] == 0
    unstructured = [
        e for e in client.read_events(session_id) if e.data.get("source", {}).get("kind") == "pi-unstructured"
    ]
    assert [e.data["pi"]["id"] for e in unstructured] == ["a2"]
    assert client.stats(session_id)["toolCalls"] == data["stats"]["toolCalls"] == data["counts"]["toolCalls"] == 3
    assert data["counts"]["requests"] == data["stats"]["modelCalls"] == 2
    assert [call["callId"] for call in data["toolCalls"]] == ["c1"]  # a record for the call a result can answer
