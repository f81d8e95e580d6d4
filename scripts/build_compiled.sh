#!/usr/bin/env bash
# The compiled build: a wheel whose append-path modules mypyc compiled (setup.py's
# COMPILED_MODULES), installed into its own venv (.venv-compiled by default, with the dev extra
# so the suite can run on it). Never in place: the source tree stays pure Python, so an edited
# .py is what runs under `make serve` and `make test`. Uses the dev venv's mypy (pinned in the
# dev extra) and setuptools, so the wheel is built without build isolation: $BUILD_PYTHON
# (the Makefile passes its own venv's python), .venv/bin/python by default.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-compiled}
BUILD_PYTHON=${BUILD_PYTHON:-.venv/bin/python}
DIST=build/compiled-wheel
rm -rf build/lib.* build/temp.* build/__native* "$DIST"
SESSIONLOG_MYPYC=1 "$BUILD_PYTHON" -m pip wheel -q --disable-pip-version-check \
  --no-build-isolation --no-deps -w "$DIST" .
wheel=$(ls "$DIST"/sessionlog-*.whl)
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "$wheel[dev]"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
"$VENV/bin/python" -c 'import sessionlog_server.service.appends as m; assert m.__file__.endswith(".so"), m.__file__'
echo "compiled build installed in $VENV ($wheel)"
