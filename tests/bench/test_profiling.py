"""The bench's py-spy command samples what its callers are told it samples."""

from __future__ import annotations

from pathlib import Path

from bench.profiling import py_spy_command


def test_the_profile_samples_only_the_gil_holder_unless_told_otherwise(tmp_path: Path) -> None:
    out = tmp_path / "raw.txt"
    gil = py_spy_command("py-spy", 1234, 15.4, out, 200, gil=True)
    assert gil[:2] == ["py-spy", "record"] and "--gil" in gil
    assert gil[gil.index("-p") + 1] == "1234" and gil[gil.index("-d") + 1] == "15"
    assert gil[gil.index("-o") + 1] == str(out) and gil[gil.index("-f") + 1] == "raw"
    assert "--gil" not in py_spy_command("py-spy", 1234, 15.4, out, 200, gil=False)
