#!/usr/bin/env bash
# Refuses a source tree holding a compiled module (a .so under client/ or server/): Python
# imports it instead of the .py beside it, so every later edit of that .py would silently not
# run. The compiled build lives in its own venv (scripts/build_compiled.sh), never in place.
# Usage: check_pure_tree.sh [TREE] (default: this repository).
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
found=$(find client server -name '*.so' 2>/dev/null || true)
if [ -n "$found" ]; then
  echo "$found" >&2
  echo "compiled modules (above) in the source tree shadow their .py files: delete them" \
    "(the compiled build is 'make compiled', in its own venv)" >&2
  exit 1
fi
