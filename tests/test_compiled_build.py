"""The compiled build (docs/architecture/compiled-build.md): which modules are compiled where.

Under `make test-compiled` (SESSIONLOG_TEST_BUILD=compiled) every module setup.py lists must
be a compiled extension in the installed package; under `make test` (the source tree, an
editable install) none is; a module not listed (the servicer) is interpreted in both. And the
guard `make serve` and `make test` run refuses a source tree holding a compiled module.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _setup_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sessionlog_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its setup() runs only as __main__
    return module


def _module_name(path: str) -> str:
    """`client/sessionlog/core/fold.py` -> `sessionlog.core.fold`."""
    return ".".join(Path(path).with_suffix("").parts[1:])


def test_the_listed_modules_are_compiled_in_the_compiled_build_only() -> None:
    listed = _setup_module().COMPILED_MODULES
    assert listed and all((ROOT / path).is_file() for path in listed), "setup.py lists a module that does not exist"
    compiled_build = os.environ.get("SESSIONLOG_TEST_BUILD") == "compiled"
    for path in listed:
        module = importlib.import_module(_module_name(path))
        file = str(module.__file__)
        assert file.endswith(".so") == compiled_build, f"{_module_name(path)} runs from {file}"
    # One not listed (it holds async generators) stays interpreted in both builds.
    servicer = importlib.import_module("sessionlog_server.transport.servicer")
    assert str(servicer.__file__).endswith(".py")


def test_a_source_tree_holding_a_compiled_module_is_refused(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "client" / "sessionlog").mkdir(parents=True)
    (tree / "server").mkdir()
    (tree / "client" / "sessionlog" / "fold.py").write_text("")
    guard = ["bash", str(ROOT / "scripts" / "check_pure_tree.sh"), str(tree)]
    assert subprocess.run(guard, capture_output=True, text=True, check=False).returncode == 0
    (tree / "client" / "sessionlog" / "fold.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    refused = subprocess.run(guard, capture_output=True, text=True, check=False)
    assert refused.returncode == 1
    assert "fold.cpython-311-x86_64-linux-gnu.so" in refused.stderr
    assert "shadow their .py files" in refused.stderr
