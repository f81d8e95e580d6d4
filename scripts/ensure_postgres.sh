#!/usr/bin/env bash
# Make sure the PostgreSQL the tests use answers on 127.0.0.1:5432 (SESSIONLOG_TEST_PG overrides).
# On a machine with a Debian cluster that is stopped, start it; otherwise say what is missing.
set -euo pipefail
url="${SESSIONLOG_TEST_PG:-postgresql://postgres@127.0.0.1:5432/test}"
ready() { pg_isready -d "$url" -q 2>/dev/null || python3 - "$url" <<'PY' 2>/dev/null
import socket, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
socket.create_connection((u.hostname or "127.0.0.1", u.port or 5432), timeout=2).close()
PY
}
if ready; then exit 0; fi
if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
  echo "starting PostgreSQL cluster" >&2
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  for _ in $(seq 1 30); do ready && exit 0; sleep 1; done
fi
echo "PostgreSQL is not reachable at $url: the PostgreSQL half of the suite needs it (set SESSIONLOG_TEST_PG)" >&2
exit 1
