#!/usr/bin/env bash
# The compiled wheel: setup.py with SESSIONLOG_MYPYC=1 compiles its COMPILED_MODULES with mypyc
# into C extensions (docs/architecture/compiled-build.md). Built without build isolation, with
# $BUILD_PYTHON's own mypy and setuptools (the dev extra pins both; mypyc type-checks, so that
# interpreter also needs the package's dependencies and their stubs, as the dev extra installs
# them). Prints the wheel's path. Used by scripts/build_compiled.sh and deploy/Dockerfile.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_PYTHON=${BUILD_PYTHON:-.venv/bin/python}
DIST=${1:-build/compiled-wheel}
rm -rf build/lib.* build/temp.* build/__native* "$DIST"
SESSIONLOG_MYPYC=1 "$BUILD_PYTHON" -m pip wheel -q --disable-pip-version-check \
  --no-build-isolation --no-deps -w "$DIST" . >&2
ls "$DIST"/sessionlog-*.whl
