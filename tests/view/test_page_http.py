"""`/sessions/ID` on the metrics/admin listener: the same page as `sessionlog view`, behind the
same bearer tokens and namespaces as the gRPC API; `/metrics` stays open."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import Unavailable
from sessionlog.core.events import Event
from sessionlog.view import page, windows
from sessionlog_server.tokens import config_line, new_token
from sessionlog_server.transport import admin_http
from tests.security.test_tls_limits_metrics import make_certificate
from tests.support import pages
from tests.support.events import note, system, user
from tests.support.scripted import write_scripted
from tests.support.servers import ServerThread
from tests.support.waiting import eventually

ALICE, BOB = new_token(), new_token()


@pytest.fixture(scope="module")
def secured(db_url: str) -> Iterator[ServerThread]:
    lines = [
        config_line(ALICE, "team-a", read_only=False, name="alice"),
        config_line(BOB, "team-b", read_only=True, name="bob"),
    ]
    server = ServerThread(db_url, tokens="[" + ",".join(lines) + "]", metrics_listen="127.0.0.1:0")
    yield server
    server.stop()


def get(
    server: ServerThread, path: str, authorization: str | None = None, *, ca: Path | None = None, method: str = "GET"
) -> tuple[int, str, dict[str, str]]:
    admin = server.running.admin
    assert admin is not None
    scheme = "https" if ca is not None else "http"
    request = urllib.request.Request(f"{scheme}://127.0.0.1:{admin.port}{path}", method=method)
    if authorization:
        request.add_header("Authorization", authorization)
    context = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, response.read().decode("utf-8"), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8"), dict(error.headers)


def page_data(html: str) -> dict:
    return json.loads(html.split('id="sessionlog-data">', 1)[1].split("</script>", 1)[0])


def test_the_page_needs_a_token_of_the_sessions_namespace(secured: ServerThread, sid: str) -> None:
    with SessionLogClient(secured.target, token=ALICE) as alice:
        child = write_scripted(alice, sid)
        stats = alice.stats(child)
    status, body, headers = get(secured, f"/sessions/{child}")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert get(secured, f"/sessions/{child}", "Bearer slt_forged")[0] == 401
    status, html, headers = get(secured, f"/sessions/{child}", f"Bearer {ALICE}")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    data = page_data(html)
    assert data["stats"] == stats
    assert data["session"]["parent"] == sid and data["session"]["parentHref"] == f"/sessions/{sid}"
    # A browser sends the token as the Basic password.
    basic = "Basic " + base64.b64encode(f"alice:{ALICE}".encode()).decode()
    assert get(secured, f"/sessions/{child}?at=20", basic)[0] == 200
    assert page_data(get(secured, f"/sessions/{child}?at=20", basic)[1])["session"]["atSeq"] == 20
    parent = page_data(get(secured, f"/sessions/{sid}", basic)[1])
    assert parent["session"]["children"] == [{"id": child, "forkSeq": 55, "href": f"/sessions/{child}"}]
    # Another namespace sees no such session; a bad seq is a clear 400.
    status, body, _ = get(secured, f"/sessions/{child}", f"Bearer {BOB}")
    assert status == 404 and "SESSION_NOT_FOUND" in body
    status, body, _ = get(secured, f"/sessions/{child}?at=-3", f"Bearer {ALICE}")
    assert status == 400 and "non-negative integer" in body
    # Past the last seq is SEQ_NOT_FOUND, as a history read there is.
    with SessionLogClient(secured.target, token=ALICE) as alice:
        head = alice.get_session(child).next_seq
    status, body, _ = get(secured, f"/sessions/{child}?at={head}", f"Bearer {ALICE}")
    assert status == 404 and f"SEQ_NOT_FOUND: session {child!r} has no seq {head}" in body, body
    assert get(secured, f"/sessions/{child}?at={head - 1}", f"Bearer {ALICE}")[0] == 200
    assert get(secured, "/metrics")[0] == 200  # scrapers need no token, as before
    assert get(secured, "/elsewhere", f"Bearer {ALICE}")[0] == 404
    # A kept page is served again while the log has not moved; a new event shows at once.
    first = get(secured, f"/sessions/{child}", f"Bearer {ALICE}")[1]
    assert get(secured, f"/sessions/{child}", f"Bearer {ALICE}")[1] == first
    with SessionLogClient(secured.target, token=ALICE) as alice:
        lease = alice.acquire_lease(child)
        alice.append(child, lease, [note(1)])
    assert page_data(get(secured, f"/sessions/{child}", f"Bearer {ALICE}")[1])["session"]["atSeq"] == (
        page_data(first)["session"]["atSeq"] + 1
    )


UNBUILT = ("vendor/uPlot.min.css", "app.css", "vendor/not-built.iife.min.js", "app.js")
"""The page's assets with the chart library's script not built (`make` was not run)."""


def test_a_page_without_its_chart_library_says_so_before_reading_the_log(
    secured: ServerThread, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the built chart library the page is a 500 that says to run `make`, answered
    before the log is read (reading a long session's log took seconds and its size in memory)."""
    with SessionLogClient(secured.target, token=ALICE) as alice:
        child = write_scripted(alice, sid)
    reads: list[str] = []
    read_events = secured.service.read_events

    def counted(session_id: str, *args: object) -> object:
        reads.append(session_id)
        return read_events(session_id, *args)

    monkeypatch.setattr(secured.service, "read_events", counted)
    monkeypatch.setattr(page, "ASSETS", UNBUILT)
    with capture_logs() as logs:
        status, body, _ = get(secured, f"/sessions/{child}?at=3", f"Bearer {ALICE}")
        # Logged once the body is done: the client may have it all a moment before.
        (line,) = eventually(lambda: [e for e in logs if e["event"] == "page"], bool)
    assert status == 500 and "vendor/not-built.iife.min.js is missing: run `make`" in body
    assert reads == []
    # The request's line says why too: an operator reading the log saw only "status": 500.
    assert line["status"] == 500 and "run `make`" in line["error"]


def test_kept_pages_stay_within_their_byte_bound(
    secured: ServerThread, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages are kept by count and by bytes: a long session's page (tens of MB) must not keep
    hundreds of MB alive after its readers left; a page over the bound is served, not kept."""
    with SessionLogClient(secured.target, token=ALICE) as alice:
        child = write_scripted(alice, sid)
    admin = secured.running.admin
    sizes = [len(get(secured, f"/sessions/{child}?at={at}", f"Bearer {ALICE}")[1].encode()) for at in (30, 40)]
    admin._pages.clear()
    monkeypatch.setattr(admin_http, "PAGE_CACHE_BYTES", max(sizes) + 100, raising=False)
    for at in (30, 40):
        assert get(secured, f"/sessions/{child}?at={at}", f"Bearer {ALICE}")[0] == 200
    assert [key[2] for key in admin._pages] == [40]  # two would be over the bound
    assert sum(map(len, admin._pages.values())) <= admin_http.PAGE_CACHE_BYTES
    monkeypatch.setattr(admin_http, "PAGE_CACHE_BYTES", 1000)
    assert get(secured, f"/sessions/{child}?at=50", f"Bearer {ALICE}")[0] == 200
    assert [key[2] for key in admin._pages] == [40]  # served, not kept, nothing else dropped


def test_a_long_sessions_page_is_read_and_sent_in_parts(
    secured: ServerThread, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page of a long session is rendered as its log is read: when the service reads a
    page of the log, the events of the earlier pages are gone (the whole log in memory at
    once took about 1.2 GB for a 200,000-event session), the body comes without a
    Content-Length, and such a page is not kept."""
    with SessionLogClient(secured.target, token=ALICE) as alice:
        alice.create_session(sid)
        lease = alice.acquire_lease(sid)
        for start in range(0, 3000, 500):
            alice.append(sid, lease, [note(n) for n in range(start, start + 500)])
    monkeypatch.setattr(page, "PART_EVENTS", 100, raising=False)
    monkeypatch.setattr(admin_http, "PAGE_CACHE_BYTES", 100_000)
    watches: list[pages.Watch] = []
    held: list[int] = []
    read_events = secured.service.read_events

    async def counted(*args: Any) -> AsyncIterator[list[Event]]:
        async for events in read_events(*args):
            held.append(pages.alive(watches))
            yield list(pages.watched(events, watches))

    monkeypatch.setattr(secured.service, "read_events", counted)
    with capture_logs() as logs:
        status, html, headers = get(secured, f"/sessions/{sid}", f"Bearer {ALICE}")
        (line,) = eventually(lambda: [e for e in logs if e["event"] == "page"], bool)
    assert status == 200 and len(held) == 6  # 500 events a read
    # The request's line comes once the body is sent, its latency the render's, and says how
    # much was sent (it was logged as the first part went out, before the render).
    assert line["status"] == 200 and line["bytes"] == len(html.encode())
    assert max(held) <= 600, held  # a read page and a part, of 3,000 events
    assert pages.page_data(html)["session"]["events"] == 3000 and "Content-Length" not in headers
    admin = secured.running.admin
    assert admin is not None and all(key[1].session_id != sid for key in admin._pages)  # over the bound


@pytest.mark.parametrize(
    ("failure", "shown", "traceback"),
    [
        # A sessionlog error: named on the page, as it would be to the caller of an RPC.
        (
            Unavailable("STORAGE_UNAVAILABLE", "the database went away <b>"),
            "STORAGE_UNAVAILABLE: the database went away &lt;b&gt;",
            False,
        ),
        # Anything else is a bug: it closed the connection mid-page, and with no Content-Length a
        # browser or a script could not tell the page was cut. Its text stays in the log.
        (RuntimeError("secret internals"), "INTERNAL: internal error", True),
    ],
)
def test_a_read_failing_part_way_ends_the_page_with_what_failed(
    secured: ServerThread,
    sid: str,
    monkeypatch: pytest.MonkeyPatch,
    failure: Exception,
    shown: str,
    traceback: bool,
) -> None:
    """The status went out with the first part: a read that fails later ends the page with a
    line that names the failure (and without the page's script, which would draw a part of the
    log as if it were all), and the failure is logged with its words."""
    with SessionLogClient(secured.target, token=ALICE) as alice:
        alice.create_session(sid)
        lease = alice.acquire_lease(sid)
        alice.append(sid, lease, [note(n) for n in range(1200)])
    monkeypatch.setattr(page, "PART_EVENTS", 100)
    read_events = secured.service.read_events

    async def failing(*args: Any) -> AsyncIterator[list[Event]]:
        async for events in read_events(*args):
            yield events
            raise failure

    monkeypatch.setattr(secured.service, "read_events", failing)
    with capture_logs() as logs:
        status, html, _ = get(secured, f"/sessions/{sid}", f"Bearer {ALICE}")
    assert status == 200 and html.count('class="sessionlog-part"') == 5  # the first read's 500 events
    assert html.endswith(f"This page is incomplete: reading the log failed ({shown}).</p>\n")
    assert "secret internals" not in html
    assert 'id="sessionlog-data"' not in html and "sessionlog-ready" not in html
    failed = [e for e in logs if e["event"] == "page incomplete"]
    assert [(e["session_id"], e["caller"], e.get("exc_info", False)) for e in failed] == [(sid, "alice", traceback)]
    assert ("secret internals" if traceback else "went away") in failed[0]["error"]


def test_a_head_request_gets_the_headers_without_a_render(
    secured: ServerThread, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HEAD rendered the whole page (the log read from seq 0) to send nothing of it."""
    with SessionLogClient(secured.target, token=ALICE) as alice:
        alice.create_session(sid)
        lease = alice.acquire_lease(sid)
        alice.append(sid, lease, [note(n) for n in range(300)])
    read_events = secured.service.read_events
    reads: list[tuple[Any, ...]] = []

    def counted(*args: Any) -> AsyncIterator[list[Event]]:
        reads.append(args)
        return read_events(*args)

    monkeypatch.setattr(secured.service, "read_events", counted)
    with capture_logs() as logs:
        status, body, headers = get(secured, f"/sessions/{sid}", f"Bearer {ALICE}", method="HEAD")
        # Logged once the body is done, which a HEAD's client does not wait for.
        lines = eventually(lambda: [(e["status"], e["bytes"]) for e in logs if e["event"] == "page"], bool)
    assert (status, body, reads, lines) == (200, "", [], [(200, 0)])
    assert headers["Content-Type"] == "text/html; charset=utf-8" and "Content-Length" not in headers
    status, html, _ = get(secured, f"/sessions/{sid}", f"Bearer {ALICE}")  # rendered, and kept
    assert status == 200 and page_data(html)["session"]["events"] == 300 and len(reads) == 1
    status, body, headers = get(secured, f"/sessions/{sid}", f"Bearer {ALICE}", method="HEAD")
    assert (status, body, headers["Content-Length"]) == (200, "", str(len(html.encode())))
    assert get(secured, f"/sessions/{sid}-missing", f"Bearer {ALICE}", method="HEAD")[:2] == (404, "")
    assert len(reads) == 1


def test_pages_need_tls_off_loopback(db_url: str, sid: str, tmp_path: Path) -> None:
    key, cert = make_certificate(tmp_path)
    token = "Bearer " + ALICE
    tokens = "[" + config_line(ALICE, "team-a", read_only=False, name="alice") + "]"
    secure = ServerThread(
        db_url, tokens=tokens, metrics_listen="0.0.0.0:0", tls_cert_file=str(cert), tls_key_file=str(key)
    )
    try:
        with SessionLogClient(secure.target, token=ALICE, ca_file=str(cert)) as alice:
            alice.create_session(sid)
        status, html, _ = get(secure, f"/sessions/{sid}", token, ca=cert)
        assert status == 200 and page_data(html)["session"]["id"] == sid
        assert get(secure, "/metrics", ca=cert)[0] == 200
    finally:
        secure.stop()
    # Without TLS, a listener that is not loopback-only serves /metrics but no session page.
    plain = ServerThread(db_url, tokens=tokens, metrics_listen="0.0.0.0:0")
    try:
        status, body, _ = get(plain, f"/sessions/{sid}", token)
        assert status == 403 and "TLS" in body
        assert get(plain, "/metrics")[0] == 200
    finally:
        plain.stop()


def test_each_page_request_is_logged_with_its_caller(secured: ServerThread, sid: str) -> None:
    """Pages show a whole session: who read which one is an audit question, as for an RPC, and
    the page listener logged nothing at all (its access log is off, the service logs as JSON)."""
    with SessionLogClient(secured.target, token=ALICE) as alice:
        alice.create_session(sid)
    with capture_logs() as logs:
        assert get(secured, f"/sessions/{sid}", f"Bearer {ALICE}")[0] == 200
        assert get(secured, f"/sessions/{sid}", f"Bearer {BOB}")[0] == 404
        assert get(secured, f"/sessions/{sid}", "Bearer slt_forged")[0] == 401
        assert get(secured, "/metrics")[0] == 200  # scrapes are not page views: no line
        # Each line comes once its body is done, which its client may have a moment before (and
        # the next request may be logged first): wait for the three, in any order.
        eventually(lambda: [e for e in logs if e["event"] == "page"], lambda found: len(found) >= 3)
    lines = [
        (e["session_id"], e["status"], e.get("caller"), e.get("namespace"), e.get("reason"))
        for e in logs
        if e["event"] == "page"
    ]
    assert sorted(lines, key=lambda line: line[1]) == [
        (sid, 200, "alice", "team-a", None),
        (sid, 401, None, None, None),
        (sid, 404, "bob", "team-b", "SESSION_NOT_FOUND"),
    ]
    assert all("slt_forged" not in repr(e) and ALICE not in repr(e) for e in logs)


CAROL = new_token()


@pytest.fixture
def windowed_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages past 20 events windowed, in windows of 10 rows and 2 turns (the scripted session
    then has several windows of each list)."""
    monkeypatch.setattr(page, "WINDOW_EVENTS", 20)
    monkeypatch.setattr(windows, "PAGE_ROWS", 10)
    monkeypatch.setattr(windows, "PAGE_TURNS", 2)


def window(server: ServerThread, path: str, token: str) -> Any:
    status, body, headers = get(server, path, f"Bearer {token}")
    assert status == 200 and headers["Content-Type"] == "application/json", (status, body)
    return json.loads(body)


def test_a_long_pages_windows_are_read_with_the_pages_token_and_namespace(
    db_url: str, sid: str, windowed_pages: None
) -> None:
    """A windowed page embeds its first windows; the rest come as JSON from the page's path,
    behind the same token, of the caller's own namespace's session: a tenant with a session of
    the same id reads its own rows, never the store another tenant's page left behind."""
    lines = [
        config_line(ALICE, "team-a", read_only=False, name="alice"),
        config_line(CAROL, "team-c", read_only=False, name="carol"),
    ]
    with ServerThread(db_url, tokens="[" + ",".join(lines) + "]", metrics_listen="127.0.0.1:0") as server:
        with SessionLogClient(server.target, token=ALICE) as alice:
            child = write_scripted(alice, sid)
            rows = [page.row_shown(row) for row in alice.transcript(child)]
            at = alice.get_session(child).next_seq - 1
        with SessionLogClient(server.target, token=CAROL) as carol:
            carol.create_session(child)
            lease = carol.acquire_lease(child)
            carol.append(child, lease, [note(n) for n in range(30)])
            carol_rows = [page.row_shown(row) for row in carol.transcript(child)]
        status, html, headers = get(server, f"/sessions/{child}", f"Bearer {ALICE}")
        assert status == 200 and "connect-src 'self'" in headers["Content-Security-Policy"]
        data = pages.page_parts(html)
        assert len(data) == 1 and data[0]["windows"]["transcript"] == len(rows) > 30
        assert data[0]["transcript"] == rows[:10]
        shown = []
        for number in range(-(-len(rows) // 10)):
            got = window(server, f"/sessions/{child}?at={at}&list=transcript&page={number}", ALICE)
            shown += got["items"]
        assert shown == rows  # replaced rows marked as the whole transcript marks them
        assert any(row["replacedBy"] is not None for row in shown)
        assert window(server, f"/sessions/{child}?at={at}&list=transcript&seq={rows[-1]['seq']}", ALICE)["page"] == (
            (len(rows) - 1) // 10
        )
        # Carol's session of the same id: her own rows, from a store of her own.
        assert window(server, f"/sessions/{child}?list=transcript&page=0", CAROL)["items"] == carol_rows[:10]
        status, body, _ = get(server, f"/sessions/{child}?at={at}&list=transcript&page=0", f"Bearer {CAROL}")
        assert status == 404 and "SEQ_NOT_FOUND" in body  # her session has no such seq: nothing of Alice's
        assert get(server, f"/sessions/{child}?at={at}&list=transcript&page=0")[0] == 401
        # Bad windows are clear errors.
        for query, words in (
            ("list=transcript&page=99", "page 99 is past the last page of transcript, page "),
            ("list=events&page=0", "list must be one of"),
            ("list=turns&page=x", "page must be a non-negative integer"),
            ("list=turns", "needs page=N"),
            ("list=bogus", "list must be one of transcript, requests, drops, turns, diff, got 'bogus'"),
            ("list=diff&from=3", "needs from=SEQ and to=SEQ"),
        ):
            status, body, _ = get(server, f"/sessions/{child}?at={at}&{query}", f"Bearer {ALICE}")
            assert status == 400 and words in body, (query, body)
        # Seqs past the page's last one are not on it: a diff answered empty lists and a jump
        # `page: null`, with 200, where the page itself and the CLI say SEQ_NOT_FOUND.
        for query in (
            f"list=diff&from=3&to={at + 1}",
            f"list=diff&from={at + 5}&to={at + 9}",
            f"list=transcript&seq={at + 1}",
        ):
            status, body, _ = get(server, f"/sessions/{child}?at={at}&{query}", f"Bearer {ALICE}")
            assert status == 404 and "SEQ_NOT_FOUND" in body, (query, body)
        # A store that is not kept (evicted, another server) is rebuilt from the log.
        admin = server.running.admin
        assert admin is not None
        kept = window(server, f"/sessions/{child}?at={at}&list=turns&page=1", ALICE)
        for store in admin._stores.values():
            store.close()
        admin._stores.clear()
        assert window(server, f"/sessions/{child}?at={at}&list=turns&page=1", ALICE) == kept
        assert kept["items"] and kept["steps"] and kept["toolCalls"]
        # A store closed under its readers (evicted as a window was about to read it) is not
        # read: the window comes from a store rebuilt from the log.
        for store in admin._stores.values():
            store.close()
        assert window(server, f"/sessions/{child}?at={at}&list=turns&page=1", ALICE) == kept


def test_a_graceful_stop_leaves_the_event_loop_free_while_the_listener_stops(db_url: str) -> None:
    """The listener's stop waits (for its thread, for a window being read from a kept store):
    done on the event loop, it held every call in flight for as long. Its last step is held
    here, on the lock the kept stores are closed under, and the loop must still run."""
    server = ServerThread(db_url, metrics_listen="127.0.0.1:0")
    admin = server.running.admin
    assert admin is not None
    stopper = threading.Thread(target=server.stop, name="test-stopper")
    with admin._lock:
        stopper.start()
        eventually(lambda: admin._server, lambda listening: listening is None)  # it stopped listening
        probe = asyncio.run_coroutine_threadsafe(asyncio.sleep(0, result="ran"), server.loop)
        assert probe.result(timeout=10) == "ran"
        assert stopper.is_alive()  # the stop waits for the listener's, held on the lock
    stopper.join(timeout=30)
    assert not stopper.is_alive()


def test_a_lone_surrogate_in_the_log_is_shown_on_the_page_and_in_its_windows(
    secured: ServerThread, sid: str, windowed_pages: None
) -> None:
    """The service takes a string holding a lone UTF-16 surrogate (JSON's "\\ud83d"), and the
    transcript carries it; the page wrote it raw and could not be encoded: the served page
    ended "internal error", its windows answered 500, and `view` failed. It is written as the
    escape it came in as, which the page's JSON.parse reads back as that UTF-16 unit."""
    odd = "a\ud83db"
    with SessionLogClient(secured.target, token=ALICE) as alice:
        alice.create_session(sid)
        lease = alice.acquire_lease(sid)
        alice.append(sid, lease, [system("s"), user(odd)])
        status, html, _ = get(secured, f"/sessions/{sid}", f"Bearer {ALICE}")
        assert status == 200 and "internal error" not in html
        assert "\\ud83d" in html
        assert [row["text"] for part in pages.page_parts(html) for row in part["transcript"]][-1] == odd
        alice.append(sid, lease, [note(n) for n in range(25)])  # windowed from here
        at = alice.get_session(sid).next_seq - 1
    rows = window(secured, f"/sessions/{sid}?at={at}&list=transcript&page=0", ALICE)["items"]
    assert odd in [row["text"] for row in rows]
