"""The pure rules of importing again: how a stored log compares with a plan, and the ids a file's
sessions get (`core.formats.imported`, `core.formats.session_ids`)."""

from __future__ import annotations

import hashlib

from sessionlog.core import validate
from sessionlog.core.events import NewEvent
from sessionlog.core.formats.imported import compare_log
from sessionlog.core.formats.session_ids import fork_session_id, session_id_for

PLAN = [NewEvent("test/note", {"n": n}, event_id=f"e-{n}", ignorable=True) for n in range(5)]


def test_a_stored_log_is_the_same_behind_or_different() -> None:
    stored = [event.committed(seq, 1000 + seq) for seq, event in enumerate(PLAN)]  # commit times differ
    same = compare_log(stored, 5, PLAN, 0)
    assert same.same and not same.behind
    behind = compare_log(stored[:3], 3, PLAN, 0)
    assert behind.behind and (behind.held, behind.planned) == (3, 5)
    edited = [*stored[:2], NewEvent("test/note", {"n": 9}, event_id="e-2", ignorable=True).committed(2, 0)]
    differs = compare_log(edited, 5, PLAN, 0)
    assert differs.differs_at == 2 and not differs.same and not differs.behind
    longer = compare_log(stored, 7, PLAN, 0)  # the session went on past the plan
    assert longer.differs_at is None and not longer.same and not longer.behind
    short_read = compare_log(stored[:2], 5, PLAN, 0)  # what the read did not give is not known to match
    assert short_read.differs_at == 2


def test_a_fork_is_compared_from_its_first_seq() -> None:
    own = PLAN[3:]
    stored = [event.committed(3 + i, 0) for i, event in enumerate(own)]
    assert compare_log(stored, 5, own, 3).same
    assert compare_log([], 2, own, 3).differs_at == 2  # shorter than its fork point


def test_an_event_planned_without_an_id_matches_the_id_the_service_gave() -> None:
    plan = [NewEvent("test/note", {"n": 1}, ignorable=True)]
    assert compare_log(
        [NewEvent("test/note", {"n": 1}, event_id="uuid", ignorable=True).committed(0, 0)], 1, plan, 0
    ).same
    other = NewEvent("test/note", {"n": 2}, event_id="uuid", ignorable=True).committed(0, 0)
    assert compare_log([other], 1, plan, 0).differs_at == 0


def test_ids_come_from_the_name_or_its_hash() -> None:
    assert session_id_for("0199bcf5-9531-7369-b0b3-dc5f663e61b0") == "0199bcf5-9531-7369-b0b3-dc5f663e61b0"
    odd = "a session/with spaces"
    assert session_id_for(odd) == "import-" + hashlib.sha256(odd.encode()).hexdigest()[:32]
    assert fork_session_id("main", "4da4509b") == "main.4da4509b"
    long_main = "m" * 125
    fork = fork_session_id(long_main, "4da4509b")  # 134 characters: over the limit, so hashed
    assert fork.startswith("import-") and fork == session_id_for(f"{long_main}.4da4509b")
    for name in (odd, "", "x" * 500, "\ud83d"):
        validate.check_session_id(session_id_for(name))
