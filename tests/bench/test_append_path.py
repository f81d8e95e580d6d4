"""`bench.append_path`'s instruction count plans exactly the events it is asked to.

The count is the difference of two runs under callgrind (minutes, so not run here); what it
rests on is the child mode `--plan-run EVENTS BATCH`, which must plan its first EVENTS events
and nothing else whatever EVENTS is, or the difference would count the wrong work.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import append_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("batch", [1, 16])
def test_plan_work_plans_every_event_of_the_wire(batch: int) -> None:
    wire = append_path._wire(100)
    assert len(wire) == 100
    assert append_path._plan_work(wire[:40], batch)() == 40


def test_the_counted_child_runs_from_the_repository_root() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.append_path", "--plan-run", "50", "16"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""  # the child prints nothing: callgrind's count is all that is read
