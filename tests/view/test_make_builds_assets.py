"""`make` alone builds what `sessionlog view` needs, as the README and the page's own error say."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_without_a_target_builds_the_chart_library() -> None:
    # The missing-asset error says "run `make`", and the README says `make` builds the chart
    # library; `make` alone ran only the first rule, the venv, and the page stayed a 500.
    # A dry run (-n) of every rule of the default goal (-B) shows its commands, running nothing.
    dry_run = subprocess.run(
        ["make", "-n", "-B", "-C", str(ROOT)], capture_output=True, text=True, timeout=60, check=True
    )
    assert "scripts/build_view_assets.sh" in dry_run.stdout
    assert "pip install" in dry_run.stdout
