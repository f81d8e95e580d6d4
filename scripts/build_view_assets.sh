#!/usr/bin/env bash
# Build the session page's vendored chart library (uPlot, pinned in web/package-lock.json) into
# client/sessionlog/view/vendor/, which `sessionlog view` and the server's /sessions/ID inline
# into one self-contained HTML file. Needs Node.js and npm (Debian: apt-get install nodejs npm).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "build_view_assets: npm is missing (install Node.js and npm)" >&2
    exit 1
  fi
fi
npm ci --prefix web --no-audit --no-fund --loglevel=error
mkdir -p client/sessionlog/view/vendor
cp web/node_modules/uplot/dist/uPlot.iife.min.js web/node_modules/uplot/dist/uPlot.min.css client/sessionlog/view/vendor/
cp web/node_modules/uplot/LICENSE client/sessionlog/view/vendor/uPlot.LICENSE
