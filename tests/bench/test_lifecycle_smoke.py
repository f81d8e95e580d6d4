"""`python -m bench.lifecycle --quick` runs end to end and reports every figure (no speed asserted).

Keeps the lifecycle bench (issues 3 and 4: fork, start-up repair, resume, model history)
working as the service changes. One run per database, so each stays well under a minute on
two cores: the start-up condition alone starts three server processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lifecycle import FIGURE_KEYS, missing_keys

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_quick_lifecycle_bench_reports_every_figure(backend: str, tmp_path: Path) -> None:
    out = tmp_path / "lifecycle.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.lifecycle", "--quick", "--db", backend, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert list(report["results"]) == [backend]
    assert missing_keys(report) == []
    assert len(FIGURE_KEYS) > 50
    results = report["results"][backend]
    # Correctness the bench itself checks (not speed): exactly the open turns were repaired,
    # and forks store only their own few rows.
    assert results["startup"]["verification"]["all_ok"] is True
    assert results["fork"]["large"]["end"]["child_event_rows"] == 1
    assert results["fork"]["large"]["open_mid"]["child_event_rows"] == 4
    assert "| condition | figure |" in done.stdout
