#!/usr/bin/env bash
# The browser tests (tests/view) drive Debian's headless Chromium through chromedriver:
# install both when missing (as root on Debian), else say what is needed.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
else
  echo "ensure_chromium: install Debian's chromium and chromium-driver for the browser tests" >&2
  exit 1
fi
