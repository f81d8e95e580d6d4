"""Regenerate the Python stubs in client/sessionlog/v1 from proto/sessionlog/v1.

The generated files are committed (a harness installs them without grpcio-tools);
tests/test_proto_stubs.py fails when they are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]


def generate(out_dir: Path) -> None:
    """Compile every proto of sessionlog.v1 into `out_dir` (mirroring proto/)."""
    protos = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    bin_dir = Path(sys.executable).parent  # the mypy-protobuf plugins live beside this python
    args = [
        "protoc",
        f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
        f"-I{ROOT / 'proto'}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "client")
