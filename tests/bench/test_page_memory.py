"""`python -m bench.page_memory` keeps working: a small session's page is fetched from a real
server process and every figure is reported (never how large)."""

from __future__ import annotations

from pathlib import Path

from bench.page_memory import measure


def test_the_page_memory_figure_is_reported(tmp_path: Path) -> None:
    figures = measure(f"sqlite:///{tmp_path / 'page.db'}", 500, 0.05)
    assert figures["events"] >= 500 and figures["page_mb"] > 0
    assert figures["peak_mb"] >= figures["rss_before_mb"] > 0
