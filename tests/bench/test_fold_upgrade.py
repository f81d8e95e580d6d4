"""`python -m bench.fold_upgrade` keeps working: a small session's snapshots are made stale, the
reads at old seqs are answered by a real server process, and every figure is reported (never
how fast)."""

from __future__ import annotations

from pathlib import Path

from bench.fold_upgrade import measure, render


def test_the_fold_upgrade_figures_are_reported(tmp_path: Path) -> None:
    figures = measure(f"sqlite:///{tmp_path / 'upgrade.db'}", 3_000)
    assert figures["events"] >= 3_000 and figures["stale_snapshots"] >= 1
    assert [read["read"] for read in figures["reads"]] == ["middle", "middle again", "quarter", "3/4", "head"]
    assert all(read["messages"] > 0 for read in figures["reads"])
    assert figures["current_snapshots"] >= 1  # the reads stored snapshots of this fold version
    assert "snapshots of this fold version afterwards" in render({"sqlite": figures})
