#!/usr/bin/env bash
# The compiled build installed into its own venv (.venv-compiled by default, with the dev extra
# so the suite can run on it): the wheel of scripts/build_compiled_wheel.sh, built with the dev
# venv's pinned mypy ($BUILD_PYTHON, which the Makefile passes). Never in place: the source
# tree stays pure Python, so an edited .py is what runs under `make serve` and `make test`'s
# interpreted suite.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-compiled}
wheel=$(bash scripts/build_compiled_wheel.sh)
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "$wheel[dev]"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
"$VENV/bin/python" -c 'import sessionlog_server.service.appends as m; assert m.__file__.endswith(".so"), m.__file__'
echo "compiled build installed in $VENV ($wheel)"
