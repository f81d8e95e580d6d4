"""A service killed (SIGKILL) while it holds a long session page's window store leaves nothing
on disk.

A windowed page (`view.page.windowed`) keeps its lists in a scratch SQLite file
(`view.windows.WindowStore`) for as long as the page's windows may be asked for. A graceful stop
closes and removes the files; a killed service never gets to, and every kill left each kept
page's file in the temporary directory for good (tens of megabytes for a long session, up to
`admin_http.PAGE_STORES` of them per kill).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from sessionlog.client import SessionLogClient
from sessionlog.view.page import WINDOW_EVENTS
from tests.support.events import note
from tests.support.servers import ServerProcess
from tests.support.waiting import eventually

BATCH = 2_000


def admin_address(server: ServerProcess) -> str:
    """The HTTP listener's address, from the server's `serving` line (port 0 picks one)."""

    def serving() -> list[dict[str, object]]:
        return [json.loads(line) for line in server.log if line.startswith("{") and '"serving"' in line]

    lines = eventually(serving, lambda found: len(found) == 1)
    return str(lines[0]["metrics"])


def test_a_killed_service_leaves_no_page_store_behind(fresh_db: str, sid: str, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {"TMPDIR": str(scratch), "SESSIONLOG_METRICS_LISTEN": "127.0.0.1:0"}
    server = ServerProcess(fresh_db, env=env).start()
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid, writer_id="bulk")
            for start in range(0, WINDOW_EVENTS + 1, BATCH):
                client.append(sid, lease, [note(n) for n in range(start, min(start + BATCH, WINDOW_EVENTS + 1))])
        with urllib.request.urlopen(f"http://{admin_address(server)}/sessions/{sid}", timeout=120) as response:
            page = response.read().decode("utf-8")
        assert "sessionlog-data" in page
        # The page is windowed: its store is kept for the windows its script asks for next.
        with urllib.request.urlopen(
            f"http://{admin_address(server)}/sessions/{sid}?list=transcript&page=1", timeout=60
        ) as response:
            assert response.status == 200
    finally:
        server.kill()
    assert sorted(path.name for path in scratch.iterdir()) == [], "a page store outlived the killed service"
