"""The soak script, short (issue 7): ~20 s of 64 streaming writers and subscribers on SQLite
while the service is killed with SIGKILL and restarted every ~7 s.

It runs `python -m bench.soak` as a child process, exactly as a person would, and reads its
JSON report: zero losses, zero duplicates, every acknowledged event verified, subscribers saw
every event in order, and the restarts really happened. The long run (10 minutes) is the same
command with `--minutes 10`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.servers import ROOT

SECONDS = 20
RESTART_EVERY = 7


def test_soak_loses_and_duplicates_nothing_across_kills(tmp_path: Path) -> None:
    report_path = tmp_path / "soak.json"
    cmd = [
        sys.executable,
        "-m",
        "bench.soak",
        "--seconds",
        str(SECONDS),
        "--restart-every",
        str(RESTART_EVERY),
        "--db",
        "sqlite",
        "--json",
        str(report_path),
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=SECONDS + 240)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(report_path.read_text())
    assert report["result"] == "PASS", done.stdout
    assert report["losses"] == 0
    assert report["duplicates"] == 0
    assert report["misplaced"] == 0
    assert report["restarts"] >= SECONDS // RESTART_EVERY - 1, "the service was not killed and restarted"
    assert report["events_written_acknowledged"] > 1000
    assert report["events_verified"] == report["events_written_acknowledged"]
    assert report["retries"] > 0, "no batch was ever re-sent: the kills did not hit the writers"
    assert report["subscriber_events"] > 0
    assert report["subscriber_gaps"] == report["subscriber_duplicates"] == report["subscriber_mismatches"] == 0
    assert report["rss_epochs"], "no RSS sample was taken"
