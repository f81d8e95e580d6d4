"""The committed gRPC stubs are exactly what protoc generates from proto/ (never hand-edited)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_generated_stubs_are_up_to_date(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.fail("grpcio-tools is a dev dependency; install with pip install -e .[dev]")
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate(tmp_path)
    generated = sorted(p.relative_to(tmp_path) for p in (tmp_path / "sessionlog" / "v1").iterdir())
    assert generated, "protoc produced nothing"
    for rel in generated:
        committed = ROOT / "client" / rel
        assert committed.exists(), f"{rel} is not committed"
        assert committed.read_text() == (tmp_path / rel).read_text(), f"{rel} is stale: run scripts/gen_proto.py"
