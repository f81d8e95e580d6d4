"""Which modules a fresh interpreter loads taking some steps: what tests of a start-up's cost
assert on (a module loaded is CPU every process of that kind pays, whatever it then does)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable

from tests.support.servers import ROOT


def loaded(steps: str, watched: Iterable[str]) -> list[str]:
    """Run `steps` (Python source) in a fresh interpreter, from the repository's root, and return
    those of the `watched` modules it loaded, a package counting with any of its submodules."""
    names = sorted(watched)
    report = (
        "\nimport json as _json, sys as _sys\n"
        f"_watched = {names!r}\n"
        "print(_json.dumps([w for w in _watched if any(m == w or m.startswith(w + '.') for m in _sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", steps + report], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    found: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found
