"""Importing the same files again, against a real server, on SQLite and PostgreSQL.

An auditor imports a folder of Pi session files, then runs the same command over the folder a
week later (old files, grown files and new ones). Each session is named after the file (Pi's
header `id`, an export's `session.id`), so a re-run finds what it imported: a file whose
sessions hold exactly its events is reported as already imported and skipped; one that grew at
the end gets only its new tail; one that changed otherwise is refused, naming the session and the
file, and nothing of the run is imported.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sessionlog.cli import transfer_commands
from sessionlog.cli.common import State
from sessionlog.cli.import_targets import FileTargets
from sessionlog.client import SessionLogClient
from sessionlog.core.formats.pi.load import load_pi_file
from sessionlog.core.formats.pi.tree import PiTree
from tests.formats.test_transfer_cli import (
    FORKED,
    SESSIONS,
    STREAM,
    imported,
    invoke,
    pad_message,
    sessions_named,
    turns_export,
)
from tests.support.fixtures import FORKED_ANSWERED_CALLS, FORKED_PENDING_CALLS, fixture
from tests.support.servers import ServerThread

SMALL = next(s for s in SESSIONS if s.name.startswith("2025-10-07"))
"""One branch; line 9 ends a turn (an assistant `stop`), line 13 is a tool result inside one."""


def pi_copy(source: Path, out: Path, session_id: str, *, lines: int | None = None) -> Path:
    """`source` under another Pi session id (the header's), cut after its first `lines` lines:
    the file as Pi had written it by then."""
    header, *rest = source.read_text("utf-8").splitlines(keepends=True)
    obj = json.loads(header)
    obj["id"] = session_id
    kept = rest if lines is None else rest[: lines - 1]
    out.write_text(json.dumps(obj) + "\n" + "".join(kept), "utf-8")
    return out


def pi_id() -> str:
    return str(uuid.uuid4())


def statuses(sessions: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(s["id"], s["status"]) for s in sessions]


def envelopes(client: SessionLogClient, session_id: str) -> list[dict[str, Any]]:
    """The session's events without their commit times (an import's own instant)."""
    return [{k: v for k, v in e.to_json().items() if k != "time"} for e in client.read_events(session_id)]


# --- Pi files ---------------------------------------------------------------------------------


def test_a_rerun_over_a_folder_imports_only_the_new_files(
    cli: CliRunner, client: SessionLogClient, tmp_path: Path
) -> None:
    """The second run over old and new files gave every old session a second, random id; each
    session is now named after the file (forks `<id>.<leafId>`), found and skipped."""
    forked, small = pi_id(), pi_id()
    old = pi_copy(FORKED, tmp_path / "old.jsonl", forked)
    new = pi_copy(SMALL, tmp_path / "new.jsonl", small)
    first = imported(cli, str(old))
    leaves = [s["leaf"] for s in first]
    assert statuses(first) == [(forked, "imported")] + [(f"{forked}.{leaf}", "imported") for leaf in leaves[1:]]
    held = {s["id"]: client.get_session(s["id"]).next_seq for s in first}
    again = invoke(cli, "import", str(old), str(new))
    assert again.exit_code == 0, again.stderr
    sessions = json.loads(again.stdout)["sessions"]
    assert statuses(sessions) == [(s["id"], "already-imported") for s in first] + [(small, "imported")]
    assert [s["appended"] for s in sessions] == [0] * len(first) + [client.get_session(small).next_seq]
    assert f"{old}: already imported" in again.stderr, again.stderr
    assert {s["id"]: client.get_session(s["id"]).next_seq for s in first} == held
    assert sorted(sessions_named(client, forked)) == sorted(held)  # no second copy of any


@pytest.mark.parametrize("built", [FORKED_PENDING_CALLS, FORKED_ANSWERED_CALLS])
def test_a_rerun_over_forks_cut_at_pending_calls_finds_them_imported(
    built: str, cli: CliRunner, client: SessionLogClient, tmp_path: Path
) -> None:
    """A fork cut where a Pi call was pending holds the service's error result for it, stamped
    with the time the service forked it, where the plan has its own: the re-run compared those
    too and refused the unchanged file (IMPORTED_SESSION_DIFFERS). What the service writes into a
    fork is its own; the re-run compares the fork's place (its parent and seq) and its own events."""
    forked = pi_id()
    path = pi_copy(fixture(built), tmp_path / "forked.jsonl", forked)
    first = imported(cli, str(path))
    assert len(first) == 3
    held = {s["id"]: client.get_session(s["id"]).next_seq for s in first}
    again = imported(cli, str(path))
    assert statuses(again) == [(s["id"], "already-imported") for s in first]
    assert [s["appended"] for s in again] == [0, 0, 0]
    assert {s["id"]: client.get_session(s["id"]).next_seq for s in first} == held


def test_the_same_file_twice_in_one_run_is_imported_once(
    cli: CliRunner, client: SessionLogClient, tmp_path: Path
) -> None:
    small = pi_id()
    path = pi_copy(SMALL, tmp_path / "small.jsonl", small)
    sessions = imported(cli, str(path), str(path))
    assert statuses(sessions) == [(small, "imported"), (small, "already-imported")]
    assert sessions_named(client, small) == [small]


def test_a_pi_file_that_grew_gets_only_its_new_tail(cli: CliRunner, client: SessionLogClient, tmp_path: Path) -> None:
    """Pi appends to a live session's file. The main branch, imported when line 101 was the last,
    gets the events of the entries after it; the forks, unchanged, are left as they are. Every
    session then holds what an import of the whole file gives."""
    grown = pi_id()
    path = pi_copy(FORKED, tmp_path / "live.jsonl", grown, lines=101)
    first = imported(cli, str(path))
    held = client.get_session(grown).next_seq
    pi_copy(FORKED, path, grown)
    sessions = imported(cli, str(path))
    assert statuses(sessions) == [(grown, "appended")] + [(s["id"], "already-imported") for s in first[1:]]
    assert sessions[0]["appended"] == client.get_session(grown).next_seq - held > 0
    reference = pi_copy(FORKED, tmp_path / "whole.jsonl", grown)  # the same file, imported afresh
    whole = imported(cli, str(reference), "--id", "whole-" + grown)
    assert [s["leaf"] for s in sessions] == [s["leaf"] for s in whole]
    for mine, reference in zip(sessions, whole, strict=True):
        assert envelopes(client, mine["id"]) == envelopes(client, reference["id"]), mine


def test_a_pi_file_that_changes_while_the_import_runs_is_compared_again(
    cli: CliRunner, client: SessionLogClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several FILEs are checked first, then read again to be written, one at a time: Pi may write
    to a live one in between. Checked, the file had grown on the branch its session holds; read
    again, its last entry is on another branch. What is read again is compared with the server
    again, so the session is left as it was (appending the new main branch's tail to it would
    have mixed two branches) and the error says the file changed while the import ran."""
    changing, first = pi_id(), pi_id()
    # Lines 75 and 84 each end a turn on the branch line 63 starts; the whole file's last entry
    # (line 110) is on the branch line 97 starts.
    path = pi_copy(FORKED, tmp_path / "live.jsonl", changing, lines=75)
    imported(cli, str(path))
    held = client.get_session(changing).next_seq
    pi_copy(FORKED, path, changing, lines=84)
    reads = 0
    targets_of = transfer_commands._pi_file_targets

    def pi_writes_between_reads(read: Path, session_id: str | None) -> FileTargets:
        nonlocal reads
        if read == path:
            reads += 1
            if reads == 2:  # after the check, before the write
                pi_copy(FORKED, path, changing)
        return targets_of(read, session_id)

    monkeypatch.setattr(transfer_commands, "_pi_file_targets", pi_writes_between_reads)
    other = pi_copy(SMALL, tmp_path / "other.jsonl", first)
    result = invoke(cli, "import", str(other), str(path))
    assert reads == 2
    assert result.exit_code == 1 and "IMPORTED_SESSION_DIFFERS" in result.stderr, result.stderr
    assert f"{path} changed while the import ran, and the FILEs before it were imported" in result.stderr
    assert client.get_session(changing).next_seq == held
    assert sessions_named(client, first) == [first]


@pytest.mark.parametrize(
    ("source", "lines"), [(SMALL, 13), (FORKED, 96)], ids=["run-closed-by-the-import", "new-default-leaf"]
)
def test_a_pi_file_that_changed_otherwise_is_refused_and_nothing_is_imported(
    cli: CliRunner, client: SessionLogClient, tmp_path: Path, source: Path, lines: int
) -> None:
    """Imported while a run was open (line 13, a tool result), the session ends with the closers
    the import wrote; the grown file continues that run instead. Imported when line 96 was the
    last entry, its branch was the main session; the grown file's last entry is on another. Either
    way the stored events are no prefix of the file's: the file is refused, naming the session,
    the file and the first seq that differs, and the other file of the run is not imported."""
    changed, other = pi_id(), pi_id()
    path = pi_copy(source, tmp_path / "live.jsonl", changed, lines=lines)
    imported(cli, str(path))
    held = client.get_session(changed).next_seq
    pi_copy(source, path, changed)
    reference = imported(cli, str(path), "--id", f"whole-{changed}")[0]["id"]
    stored, whole = envelopes(client, changed), envelopes(client, reference)
    seq = next(i for i, (a, b) in enumerate(zip(stored, whole, strict=False)) if a != b)
    new = pi_copy(SMALL, tmp_path / "new.jsonl", other)
    result = invoke(cli, "import", str(new), str(path))
    assert result.exit_code == 1 and result.stdout == ""
    message = result.stderr
    assert message.startswith(f"sessionlog: error: IMPORTED_SESSION_DIFFERS: {path}: session {changed!r}"), message
    assert f"differs from seq {seq}" in message and "nothing was imported" in message, message
    assert client.get_session(changed).next_seq == held
    assert sessions_named(client, other) == []


def test_two_files_for_one_session_are_refused_before_anything_is_imported(
    cli: CliRunner, client: SessionLogClient, tmp_path: Path
) -> None:
    both = pi_id()
    short = pi_copy(SMALL, tmp_path / "short.jsonl", both, lines=9)
    whole = pi_copy(SMALL, tmp_path / "whole.jsonl", both)
    result = invoke(cli, "import", str(whole), str(short))
    assert result.exit_code == 1, result.stderr
    assert "IMPORTED_SESSION_DIFFERS" in result.stderr and str(whole) in result.stderr, result.stderr
    assert sessions_named(client, both) == []


def test_a_pi_session_id_that_is_no_session_id_names_the_session_by_its_hash(
    cli: CliRunner, client: SessionLogClient, tmp_path: Path
) -> None:
    odd = f"my session/{uuid.uuid4().hex}"
    path = pi_copy(SMALL, tmp_path / "odd.jsonl", odd)
    derived = "import-" + hashlib.sha256(odd.encode()).hexdigest()[:32]
    result = invoke(cli, "import", str(path))
    assert result.exit_code == 0, result.stderr
    assert statuses(json.loads(result.stdout)["sessions"]) == [(derived, "imported")]
    assert f"{odd!r} is not a valid session id" in result.stderr and derived in result.stderr, result.stderr
    assert client.get_session(derived).metadata["pi"]["sessionId"] == odd
    assert statuses(imported(cli, str(path))) == [(derived, "already-imported")]


def test_an_import_the_service_stopped_part_way_is_completed_by_running_it_again(
    cli: CliRunner, db_url: str, sid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server with a lower limit refused an event of the first fork's own part (line 24): the
    main session is whole, that fork holds part of its events, the other forks do not exist. The
    same import against a server that takes the event finishes the job: the fork gets its missing
    tail, the other forks are created, the main session is left as it is."""
    big = tmp_path / "big.jsonl"
    objs = [json.loads(text) for text in FORKED.read_text("utf-8").splitlines()]
    pad_message(objs[23])
    big.write_text("".join(json.dumps(obj) + "\n" for obj in objs), "utf-8")
    with ServerThread(db_url, max_event_bytes=8000) as small:
        monkeypatch.setattr(State, "server", small.target)
        stopped = invoke(cli, "import", str(big), "--id", sid)
        assert stopped.exit_code == 1 and "run the same import again" in stopped.stderr, stopped.stderr
    with ServerThread(db_url) as roomy:
        monkeypatch.setattr(State, "server", roomy.target)
        sessions = imported(cli, str(big), "--id", sid)
        fork = f"{sid}.4da4509b"
        assert [s["status"] for s in sessions] == ["already-imported", "appended", "imported", "imported"]
        assert sessions[1]["id"] == fork and sessions[1]["appended"] == 126 - 34
        with SessionLogClient(roomy.target) as client:
            whole = imported(cli, str(big), "--id", f"{sid}-whole")
            for mine, reference in zip(sessions, whole, strict=True):
                assert envelopes(client, mine["id"]) == envelopes(client, reference["id"])


def test_a_stream_file_is_pointed_at_ingest(cli: CliRunner, client: SessionLogClient) -> None:
    """`pi --mode json` output starts with a session header too: import read it as a session file
    and failed with "agent_start entry needs a string id"."""
    before = {s.id for s in client.list_sessions()}
    result = invoke(cli, "import", str(STREAM))
    assert result.exit_code == 2, result.stderr
    assert "NOT_A_PI_SESSION" in result.stderr and "line 2" in result.stderr, result.stderr
    assert "sessionlog ingest SESSION_ID --format pi-events" in result.stderr, result.stderr
    assert {s.id for s in client.list_sessions()} == before


# --- sessionlog exports -----------------------------------------------------------------------


def named_export(path: Path, session_id: str, turns: int, **changes: dict[str, Any]) -> Path:
    """`turns_export` whose header names `session_id`, as `export` writes it."""
    turns_export(path, turns, **changes)
    header, *rest = path.read_text("utf-8").splitlines(keepends=True)
    obj = json.loads(header)
    obj["session"] = {"id": session_id, "cwd": "/repo", "metadata": {"k": 1}}
    path.write_text(json.dumps(obj) + "\n" + "".join(rest), "utf-8")
    return path


def test_an_export_imports_under_its_own_id_and_a_rerun_skips_it(
    cli: CliRunner, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """A backup restored gets its ids back; restored again, it is already there; a later backup of
    the same session (it went on) adds what is new; one that disagrees is refused."""
    path = named_export(tmp_path / "backup.jsonl", sid, 3)
    (entry,) = imported(cli, str(path), "--format", "sessionlog")
    assert (entry["id"], entry["status"], entry["appended"]) == (sid, "imported", 6)
    info = client.get_session(sid)
    assert (info.cwd, info.metadata) == ("/repo", {"k": 1})
    assert statuses(imported(cli, str(path), "--format", "sessionlog")) == [(sid, "already-imported")]
    later = named_export(tmp_path / "later.jsonl", sid, 5)
    (entry,) = imported(cli, str(later), "--format", "sessionlog")
    assert (entry["status"], entry["appended"]) == ("appended", 4)
    # The file's events carry no eventId, so the service gave each its own: the rest is the file's.
    stored = [{k: v for k, v in e.items() if k != "eventId"} for e in envelopes(client, sid)]
    assert stored == [
        {k: v for k, v in e.items() if k != "time"} for e in map(json.loads, later.read_text().splitlines()[1:])
    ]
    other = named_export(tmp_path / "other.jsonl", sid, 5, line5={"data": {"turn": 2, "reason": {"kind": "aborted"}}})
    refused = invoke(cli, "import", str(other), "--format", "sessionlog")
    assert refused.exit_code == 1 and "IMPORTED_SESSION_DIFFERS" in refused.stderr, refused.stderr
    assert f"session {sid!r}" in refused.stderr and "differs from seq 3 (line 5)" in refused.stderr
    older = invoke(cli, "import", str(path), "--format", "sessionlog")  # the session went on past it
    assert older.exit_code == 1 and "holds 10 events" in older.stderr, older.stderr
    assert client.get_session(sid).next_seq == 10


def test_an_export_of_a_session_of_this_server_is_already_imported(
    cli: CliRunner, client: SessionLogClient, tmp_path: Path
) -> None:
    small = pi_id()
    assert statuses(imported(cli, str(pi_copy(SMALL, tmp_path / "small.jsonl", small)))) == [(small, "imported")]
    out = tmp_path / "export.jsonl"
    assert invoke(cli, "export", small, "--format", "sessionlog", "-o", str(out)).exit_code == 0
    assert statuses(imported(cli, str(out), "--format", "sessionlog")) == [(small, "already-imported")]


def test_an_export_without_a_session_id_needs_id(cli: CliRunner, tmp_path: Path) -> None:
    path = turns_export(tmp_path / "anonymous.jsonl", 2)
    header, *rest = path.read_text("utf-8").splitlines(keepends=True)
    path.write_text(json.dumps({**json.loads(header), "session": {}}) + "\n" + "".join(rest), "utf-8")
    result = invoke(cli, "import", str(path), "--format", "sessionlog")
    assert result.exit_code == 2 and "BAD_SESSIONLOG_HEADER" in result.stderr and "--id" in result.stderr


def test_the_pi_tree_of_the_fixture_is_what_these_tests_assume() -> None:
    """Line 101 is on the default branch of the whole file; line 96 is a leaf that is not."""
    tree = PiTree(load_pi_file(FORKED).entries)
    ids = [json.loads(line).get("id") for line in FORKED.read_text("utf-8").splitlines()]
    main_path = tree.path_ids(tree.default_leaf())
    assert ids[100] in main_path and ids[95] not in main_path and ids[95] in tree.leaves()
