"""Restoring the sessionlog exports of a family of forks, against a real server, on SQLite and PostgreSQL.

An auditor backs up a session and its forks (`export --format sessionlog`, one file each) and
restores them into an empty server (`import`). Each export of a fork names its parent in its
header and holds its whole log; imported as a session of its own, a fork's `costs` `own` became
its whole log, and the family's total counted every inherited prefix again. Restored, each fork
is the fork of its parent at its seq again, so `costs` says what it said before the backup.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sessionlog.cli.import_targets import Heading, parents_first
from sessionlog.client import SessionLogClient
from tests.cli.test_costs import _append, _costs, _family, _turn
from tests.formats.test_transfer_cli import imported, invoke
from tests.support.events import assistant, step_start, system, turn_start, user
from tests.support.servers import ServerThread


def family(client: SessionLogClient, sid: str) -> list[str]:
    """`tests.cli.test_costs`' family (a parent, its fork, the fork's fork, each with priced calls
    of its own), and a fork of the parent cut inside its first turn (the service closes the turn
    in it); their ids, parents first."""
    first, second = _family(client, sid)
    inside = client.fork(sid, 3, f"{sid}-m").id  # after the first turn's `turn/start`
    _append(client, inside, _turn(2, 0.5))
    return [sid, first, second, inside]


def backup(cli: CliRunner, ids: list[str], renamed: dict[str, str], folder: Path) -> dict[str, Path]:
    """The export of each session, under the id `renamed` gives it and its parent (a server where
    none of them is stands for an empty one); restored id → file."""
    files: dict[str, Path] = {}
    for session_id in ids:
        out = folder / f"{session_id}.jsonl"
        result = invoke(cli, "export", session_id, "--format", "sessionlog", "-o", str(out))
        assert result.exit_code == 0, result.stderr
        header, *events = out.read_text("utf-8").splitlines(keepends=True)
        obj = json.loads(header)
        obj["session"]["id"] = renamed[session_id]
        if "parent" in obj["session"]:
            obj["session"]["parent"]["sessionId"] = renamed[obj["session"]["parent"]["sessionId"]]
        out.write_text(json.dumps(obj) + "\n" + "".join(events), "utf-8")
        files[renamed[session_id]] = out
    return files


def restored_ids(ids: list[str]) -> dict[str, str]:
    new = f"r-{uuid.uuid4().hex[:12]}"
    return {session_id: session_id.replace(ids[0], new, 1) for session_id in ids}


def backed_up(cli: CliRunner, ids: list[str], folder: Path) -> tuple[list[str], dict[str, str], dict[str, Path]]:
    """`ids` (a family, parents first), the ids their restore gives them (`restored_ids`), and
    their exports under those ids (`backup`)."""
    renamed = restored_ids(ids)
    return ids, renamed, backup(cli, ids, renamed, folder)


def cost_rows(server: ServerThread, root: str, renamed: dict[str, str] | None = None) -> dict[str, Any]:
    """`costs --family root`: each row's parent and own figures by (restored) id, and the total."""
    report = _costs(server, "--family", root)
    name = (lambda session_id: renamed[session_id]) if renamed else (lambda session_id: session_id)
    rows = {
        name(row["id"]): (
            {**row["parent"], "sessionId": name(row["parent"]["sessionId"])} if row["parent"] else None,
            row["own"],
        )
        for row in report["sessions"]
    }
    return {"rows": rows, "total": report["total"]}


def envelopes(client: SessionLogClient, session_id: str) -> list[dict[str, Any]]:
    """The session's events without their commit times and eventIds (the service gives those
    of what it writes into a fork anew)."""
    return [
        {k: v for k, v in e.to_json().items() if k not in ("time", "eventId")} for e in client.read_events(session_id)
    ]


@pytest.mark.parametrize("order", ["parents-first", "forks-first"])
def test_a_restored_family_gets_its_forks_and_costs_back(
    cli: CliRunner, server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path, order: str
) -> None:
    """Each fork was imported as a session of its own (its `own` cost its whole log: the total
    went up); restored, each is the fork of its parent at its seq again, whatever order the
    FILEs are given in, and a restore run again finds every session already there."""
    ids, renamed, files = backed_up(cli, family(client, sid), tmp_path)
    given = list(files.values()) if order == "parents-first" else list(reversed(files.values()))
    sessions = imported(cli, *map(str, given))
    # Each after its parent: given forks first, a fork's parent is moved before it.
    expected = ids if order == "parents-first" else [ids[0], ids[3], ids[1], ids[2]]
    assert [s["id"] for s in sessions] == [renamed[session_id] for session_id in expected]
    assert [s["status"] for s in sessions] == ["imported"] * 4
    parents: dict[str, dict[str, Any] | None] = {}
    for session_id in ids:
        source, restored = client.get_session(session_id), client.get_session(renamed[session_id])
        parent = renamed[source.parent_session_id] if source.parent_session_id is not None else None
        assert (restored.parent_session_id, restored.fork_seq) == (parent, source.fork_seq)
        assert restored.next_seq == source.next_seq
        assert envelopes(client, restored.id) == envelopes(client, session_id)
        parents[restored.id] = {"sessionId": parent, "forkSeq": source.fork_seq} if parent else None
    before, after = cost_rows(server, sid, renamed), cost_rows(server, renamed[sid])
    assert after == before and after["total"]["costUsd"] == 2.23  # 1.73, and the fork cut inside a turn's 0.5
    assert [s["parent"] for s in sessions] == [parents[s["id"]] for s in sessions]  # the output says it

    again = imported(cli, *map(str, given))
    assert [(s["id"], s["status"], s["appended"]) for s in again] == [
        (s["id"], "already-imported", 0) for s in sessions
    ]
    assert [client.get_session(s["id"]).next_seq for s in again] == [client.get_session(i).next_seq for i in expected]


def pending_call_family(client: SessionLogClient, sid: str) -> list[str]:
    """A parent (its header logged by the service) whose turn is open on a call with no result,
    its fork cut there (the service
    writes the call's error result, stamped with the time at the cut), and a fork of that fork
    cut after its own turn; their ids, parents first."""
    client.create_session(sid)
    with client.writer(sid) as writer:  # a header the service logs itself, with no eventId
        writer.report_header({"config": {"provider": "acme", "model": "m-1"}}).result()
    asked = assistant(
        1, 1, "reading", calls=(("c1", "read"),), usage={"input": 10, "output": 2, "cost": {"total": 0.1}}
    )
    cut = _append(client, sid, [system("s"), user("go"), turn_start(1), step_start(1, 1), asked])
    first = client.fork(sid, cut, f"{sid}-p").id
    second = client.fork(first, _append(client, first, _turn(2, 0.2)), f"{sid}-p-q").id
    _append(client, second, _turn(3, 0.3))
    return [sid, first, second]


def test_a_family_restored_one_file_a_command_gets_its_forks_back(
    cli: CliRunner, server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """Restored one command at a time, the fork of a fork was imported whole: its parent, the
    fork restored by the command before, held the error result of the call pending at its cut
    stamped with the restore's time, not the file's, and was taken for other events."""
    ids, renamed, files = backed_up(cli, pending_call_family(client, sid), tmp_path)
    for session_id in ids:
        result = invoke(cli, "import", str(files[renamed[session_id]]))
        assert result.exit_code == 0 and "imported whole" not in result.stderr, result.stderr
    for session_id in ids[1:]:
        source, restored = client.get_session(session_id), client.get_session(renamed[session_id])
        assert (restored.parent_session_id, restored.fork_seq) == (renamed[source.parent_session_id], source.fork_seq)
    assert cost_rows(server, renamed[sid]) == cost_rows(server, sid, renamed)


def test_the_export_of_a_restored_session_is_already_in_the_server_it_came_from(
    cli: CliRunner, server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """A session restored from its export, exported again and imported where it came from was
    refused IMPORTED_SESSION_DIFFERS: the restore gave eventIds to the events the service had
    written itself (its header, a fork's seed), which the session where it came from has not."""
    ids, renamed, files = backed_up(cli, pending_call_family(client, sid), tmp_path)
    assert invoke(cli, "import", *map(str, files.values())).exit_code == 0
    back = {renamed[session_id]: session_id for session_id in ids}
    (tmp_path / "again").mkdir()
    again = backup(cli, list(back), back, tmp_path / "again")
    sessions = imported(cli, *map(str, again.values()))
    assert [(s["id"], s["status"]) for s in sessions] == [(session_id, "already-imported") for session_id in ids]


def test_a_fork_whose_parent_is_missing_is_imported_whole_with_a_note(
    cli: CliRunner, server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """No parent to fork: the fork's whole log is its own, and stderr says so (exit 0); restored
    again, even with its parent, it is the session it was imported as."""
    ids, renamed, files = backed_up(cli, family(client, sid), tmp_path)
    parent, fork = renamed[ids[0]], renamed[ids[1]]
    result = invoke(cli, "import", str(files[fork]))
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)["sessions"]
    assert (row["id"], row["status"], row["parent"]) == (fork, "imported", None)
    (note,) = [line for line in result.stderr.splitlines() if fork in line]
    fork_seq = client.get_session(ids[1]).fork_seq
    assert note.startswith("sessionlog: note: ") and f"the fork of {parent!r} after seq {fork_seq}" in note
    assert f"no session {parent!r} is on the server" in note and "imported whole" in note
    assert f"counts the {fork_seq + 1} events it inherited again" in note
    restored = client.get_session(fork)
    assert (restored.parent_session_id, restored.next_seq) == (None, client.get_session(ids[1]).next_seq)
    assert envelopes(client, fork) == envelopes(client, ids[1])

    sessions = imported(cli, str(files[fork]), str(files[parent]))
    assert [(s["id"], s["status"]) for s in sessions] == [(parent, "imported"), (fork, "already-imported")]
    assert client.get_session(fork).parent_session_id is None


def test_a_fork_whose_parent_holds_other_events_is_imported_whole(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    ids, renamed, files = backed_up(cli, family(client, sid), tmp_path)
    parent, fork = renamed[ids[0]], renamed[ids[1]]
    client.create_session(parent)
    _append(client, parent, _turn(1, 0.7))  # not the parent's first events: the first differs at seq 0
    result = invoke(cli, "import", str(files[fork]))
    assert result.exit_code == 0, result.stderr
    assert f"{parent!r} on the server holds other events than the file from seq 0 on" in result.stderr
    assert client.get_session(fork).parent_session_id is None


def test_a_fork_whose_parent_file_holds_other_events_is_imported_whole(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """The parent comes in the same import, but its file is not the one the fork was cut from."""
    ids, renamed, files = backed_up(cli, family(client, sid), tmp_path)
    parent, fork = renamed[ids[0]], renamed[ids[1]]
    path = files[parent]
    lines = path.read_text("utf-8").splitlines(keepends=True)
    system = json.loads(lines[1])
    system["data"]["message"]["content"] = "another prompt"
    path.write_text("".join([lines[0], json.dumps(system) + "\n", *lines[2:]]), "utf-8")
    result = invoke(cli, "import", str(files[fork]), str(path))
    assert result.exit_code == 0, result.stderr
    assert f"{path} maps other events to {parent!r} up to seq" in result.stderr
    assert [s["status"] for s in json.loads(result.stdout)["sessions"]] == ["imported", "imported"]
    assert client.get_session(fork).parent_session_id is None


def test_a_header_parent_the_events_do_not_follow_is_imported_whole(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """A header that names a parent its events do not fork (no `session/end-seed` after the cut)
    is no fork's export: imported whole, with the note; one whose parent is no `{sessionId,
    forkSeq}` is a bad header (exit status 2), imported not at all."""
    ids = family(client, sid)
    renamed = restored_ids(ids)
    path = backup(cli, ids[:1], renamed, tmp_path)[renamed[sid]]
    header, *events = path.read_text("utf-8").splitlines(keepends=True)
    obj = json.loads(header)
    obj["session"]["parent"] = {"sessionId": sid, "forkSeq": 2}
    path.write_text(json.dumps(obj) + "\n" + "".join(events), "utf-8")
    result = invoke(cli, "import", str(path))
    assert result.exit_code == 0, result.stderr
    assert "its events after seq 2 are not what a fork cut there starts with" in result.stderr
    assert client.get_session(renamed[sid]).parent_session_id is None
    obj["session"]["parent"] = {"sessionId": sid}
    obj["session"]["id"] = f"{renamed[sid]}-bad"
    path.write_text(json.dumps(obj) + "\n" + "".join(events), "utf-8")
    bad = invoke(cli, "import", str(path))
    assert bad.exit_code == 2 and "BAD_SESSIONLOG_HEADER" in bad.stderr and "session.parent" in bad.stderr


def test_the_files_of_an_import_are_ordered_parents_first() -> None:
    headings = [
        Heading("c", ("b", 3)),
        Heading(None),  # a Pi file
        Heading("b", ("a", 1)),
        Heading("x", ("elsewhere", 0)),
        Heading("a"),
        Heading("loop-1", ("loop-2", 0)),
        Heading("loop-2", ("loop-1", 0)),
    ]
    assert parents_first(headings) == [4, 2, 0, 1, 3, 6, 5]
