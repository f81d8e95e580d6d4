#!/usr/bin/env bash
# The compiled wheel: setup.py with SESSIONLOG_MYPYC=1 compiles its COMPILED_MODULES with mypyc
# into C extensions (docs/architecture/compiled-build.md). Built without build isolation, with
# $BUILD_PYTHON's own mypy and setuptools (the dev extra pins both; mypyc type-checks, so that
# interpreter also needs the package's dependencies and their stubs, as the dev extra installs
# them). Prints the wheel's path; the build's own output goes to $DIST/build.log, shown if it
# fails. Used by scripts/build_compiled.sh and deploy/Dockerfile.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_PYTHON=${BUILD_PYTHON:-.venv/bin/python}
DIST=${1:-build/compiled-wheel}
rm -rf build/lib.* build/temp.* build/__native* "$DIST"
# setuptools' build_wheel hook itself, not `pip wheel`: pip asks the backend for the metadata
# first, in a run of setup.py of its own, and every run of setup.py with SESSIONLOG_MYPYC=1 has
# mypyc translate the modules again (~16 s of the ~66 pip took here; this takes ~46).
mkdir -p "$DIST"
if ! SESSIONLOG_MYPYC=1 "$BUILD_PYTHON" -c '
import sys
from setuptools import build_meta
with open(sys.argv[2], "w") as name:
    name.write(build_meta.build_wheel(sys.argv[1]))
' "$DIST" "$DIST/wheel-name" >"$DIST/build.log" 2>&1; then
  tail -n 60 "$DIST/build.log" >&2
  exit 1
fi
echo "$DIST/$(cat "$DIST/wheel-name")"
