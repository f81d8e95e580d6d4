"""The test data in tests/fixtures/ (see its README for where each file came from).

Every test reads its files through here, so a missing or incomplete copy fails at collection
with the path it wanted, instead of a test quietly running on less (or on built-in) data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PI_GENERATED_COUNT = 10  # sessions written by Pi 0.73.1 with their oracle (tests/fixtures/README.md)


class FixtureMissing(RuntimeError):
    """A file the tests need is not in tests/fixtures/."""


def fixture(relative: str) -> Path:
    """The path of tests/fixtures/`relative`, which must exist."""
    path = FIXTURES / relative
    if not path.is_file():
        raise FixtureMissing(f"test data missing: {path} (see tests/fixtures/README.md)")
    return path


def pi_generated_sessions() -> list[Path]:
    """The Pi-written sessions (sorted by name), each with its oracle; all of them or an error."""
    sessions = sorted((FIXTURES / "pi-generated" / "sessions").glob("*.jsonl"))
    if len(sessions) != PI_GENERATED_COUNT:
        raise FixtureMissing(
            f"expected {PI_GENERATED_COUNT} Pi sessions in {FIXTURES / 'pi-generated' / 'sessions'}, "
            f"found {len(sessions)} (see tests/fixtures/README.md)"
        )
    for session in sessions:
        oracle_path(session)
    return sessions


def oracle_path(session: Path) -> Path:
    """The oracle file (what Pi builds on open) of a Pi-generated session."""
    return fixture(f"pi-generated/oracle/{session.stem}.json")


def oracle(session: Path) -> dict[str, Any]:
    """The oracle of a Pi-generated session, parsed."""
    data: dict[str, Any] = json.loads(oracle_path(session).read_text("utf-8"))
    return data


RESUMED_SESSION = "pi/resumed-session.jsonl"
STREAM_STDOUT = "pi/stream-stdout.jsonl"
FORKED_PENDING_CALLS = "pi-built/forked-pending-calls.jsonl"
"""Built for the tests (README): leaves that part right after an assistant message whose call is pending."""
FORKED_ANSWERED_CALLS = "pi-built/forked-answered-calls.jsonl"
"""Built for the tests (README): leaves that part after some results of an assistant message, others pending."""


def leaves(session: Path) -> list[tuple[str, str]]:
    """Every leaf of a Pi-generated session, `(leaf id, "default" | "other")`, the default first."""
    data = oracle(session)
    return [(data["defaultLeafId"], "default")] + [(o["leafId"], "other") for o in data["otherLeaves"]]


def pi_leaf_cases() -> list[Any]:
    """`(session, leaf)` test cases: every leaf of every Pi-generated session."""
    return [
        pytest.param(session, leaf, id=f"{session.stem[:24]}-{which}-{leaf}")
        for session in pi_generated_sessions()
        for leaf, which in leaves(session)
    ]


def stream_events() -> list[dict[str, Any]]:
    """The events of the real `pi --mode json` stdout (Pi 0.73.1: message snapshots and partials)."""
    return [json.loads(line) for line in fixture(STREAM_STDOUT).read_text("utf-8").splitlines()]


def delta_only(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same stream as Pi 0.84 and later prints it: no message snapshot, no partials."""
    out = []
    for event in events:
        if event["type"] == "message_update":
            update = {k: v for k, v in event["assistantMessageEvent"].items() if k != "partial"}
            event = {"type": "message_update", "assistantMessageEvent": update}
        out.append(event)
    return out
