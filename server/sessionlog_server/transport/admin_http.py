"""The metrics/admin HTTP listener: `/metrics` for Prometheus and `/sessions/ID` for people.

`/sessions/ID[?at=SEQ]` serves the same self-contained page as `sessionlog view` (one
`render_parts`), read through the same use cases as ReadEvents, so namespaces apply: a session
of another namespace is 404, like a missing one. When bearer tokens are configured the page
needs one of them, as `Authorization: Bearer <token>` or, so a browser can open the page, as
the password of HTTP Basic auth (the browser asks for it on the 401). `/metrics` stays open,
as it was, for scrapers.

A long session's page is windowed (`sessionlog.view.page.windowed`): it embeds the first window
of each list, and its script fetches the others as JSON from the same path,
`/sessions/ID?at=SEQ&list=transcript|requests|drops|turns&page=N` (`&seq=S` instead of `page`
finds the transcript page of a seq; `list=diff&from=A&to=B` gives what a request diff is
composed from). Windows are read from the page's `WindowStore`, a scratch file filled as the
page was rendered (the last few are kept, `PAGE_STORES`); one that is not kept (another
server, a restart) is rebuilt from the log. The same token and namespace rules apply as to
the page: a window is of a session the caller may read, at a seq it has.

Session content and tokens do not cross a network in clear text: when the server has a TLS
certificate the listener speaks HTTPS with it (both paths); without one, pages are served
only on a loopback listener (elsewhere `/sessions/` answers 403 and says why).

It runs in its own threads (a threading WSGI server from the standard library) and reaches the
service by scheduling coroutines on the server's event loop; the page is rendered in the HTTP
thread, so a large session never blocks the loop that serves gRPC. The log is read a page at a
time and the page is sent as it is rendered (`render_parts`), so a session of any length is
served in the memory of a few parts; a page is kept for a reload only when it is small.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import html
import ssl
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app

from sessionlog.core.errors import NotFound, SessionLogError, seq_not_found
from sessionlog.core.events import Event, JsonObject
from sessionlog.view.json_text import json_text
from sessionlog.view.page import MissingAssets, PageFold, SessionRef, fill_store, render_parts, require_assets, windowed
from sessionlog.view.windows import LISTS, BadWindow, StoreClosed, WindowStore
from sessionlog_server.service import access
from sessionlog_server.service.app import SessionLogService
from sessionlog_server.tokens import TokenStore
from sessionlog_server.transport.address import split_listen
from sessionlog_server.transport.loopback import LOOPBACK_HOSTS

SESSIONS_PREFIX = "/sessions/"
PAGE_TIMEOUT_S = 120.0
PAGE_CACHE = 4
"""Rendered pages kept (least recently used beyond that are dropped)."""
PAGE_CACHE_BYTES = 16 * 1024 * 1024
"""Bytes the kept pages may take together: a page of 20,000 events (the longest that is not
windowed) weighs about 7 MB, and an unwindowed 200,000-event page weighed 64 MB, so four kept by
count alone held hundreds of MB for as long as nobody looked at other pages. A page larger than
this is streamed and not kept (what a render holds of it for keeping stops growing there)."""
PAGE_STORES = 4
"""Window stores kept for the windowed pages last rendered (each a scratch file on disk, about
the size of the page it stands for, gone with the process however it ends; the least recently
used beyond that are removed)."""
PAGE_LINK = "/sessions/{id}"
StartResponse = Callable[..., Any]
PageKey = tuple[str, SessionRef, int]
"""A page: the caller's namespace, the session (with its forks) and the last seq it shows."""
log = structlog.get_logger("sessionlog.admin")


CONNECTION_TIMEOUT_S = 30.0
"""How long a connection may keep its thread while it sends nothing (its TLS handshake, its request)."""


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke off, timed out or failed its TLS handshake (a plaintext
        request, a scanner) is the client's doing: dropped quietly, where the default printed a
        traceback to stderr among the service's JSON log lines."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _QuietHandler(WSGIRequestHandler):
    timeout = CONNECTION_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Access logs are not written: the service logs with structlog, not to stderr."""


class AdminHttp:
    """The listener: start it on `HOST:PORT`, stop it with the server."""

    def __init__(
        self,
        service: SessionLogService,
        tokens: TokenStore,
        loop: asyncio.AbstractEventLoop,
        registry: CollectorRegistry,
    ) -> None:
        self.service = service
        self.tokens = tokens
        self.loop = loop
        self.metrics_app = make_wsgi_app(registry)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self._pages: OrderedDict[PageKey, bytes] = OrderedDict()
        self._stores: OrderedDict[PageKey, WindowStore] = OrderedDict()
        self._building: dict[PageKey, threading.Lock] = {}
        """One lock per store being rebuilt, so two windows of one page rebuild it once."""
        self._lock = threading.Lock()
        self.pages_allowed = False

    def start(self, listen: str, tls: tuple[str, str] | None = None) -> int:
        """Serve on `HOST:PORT` (port 0 picks a free one), over HTTPS when `tls` is
        `(cert_file, key_file)`; returns the bound port."""
        host, port = split_listen(listen, "SESSIONLOG_METRICS_LISTEN")
        server = make_server(host, port, self.app, _ThreadingServer, handler_class=_QuietHandler)
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(certfile=tls[0], keyfile=tls[1])
            # The handshake runs in the connection's own thread, on its first read: done in
            # `accept`, it held the listener's only accepting thread, so one client that never
            # handshook stopped every scrape and page.
            server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        self.pages_allowed = tls is not None or host in LOOPBACK_HOSTS
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True, name="sessionlog-admin-http")
        self._thread.start()
        self.port = int(server.server_port)
        return self.port

    def stop(self) -> None:
        """Stop listening, then remove the kept window stores. It waits for the listener's
        thread to look for the stop (it looks every half second) and for a window being read
        from a store: call it off the event loop."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            while self._stores:
                self._stores.popitem()[1].close()

    # --- WSGI ------------------------------------------------------------------------------

    def app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return self.metrics_app(environ, start_response)  # type: ignore[no-any-return]
        if not path.startswith(SESSIONS_PREFIX):
            return _text(start_response, "404 Not Found", "not found: try /metrics or /sessions/SESSION_ID\n")
        # One line per page request, as per RPC: who asked for which session's page, and the
        # outcome (an audit of who read what; never the token).
        started = time.perf_counter()
        line: dict[str, Any] = {"session_id": access.logged_id(path[len(SESSIONS_PREFIX) :])}

        def recorded(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            line["status"] = int(status.split(" ", 1)[0])
            return start_response(status, headers, exc_info)

        try:
            body = self._session_page(environ, recorded, line)
        except BaseException:
            _log_page(line, started)
            raise
        if environ.get("REQUEST_METHOD") == "HEAD":
            body = _headers_only(body)
        return _logged(body, line, started)

    def _session_page(
        self, environ: dict[str, Any], start_response: StartResponse, line: dict[str, Any]
    ) -> Iterable[bytes]:
        """`/sessions/ID[?at=SEQ]`; the caller's fields go into `line`, the request's log line."""
        path = environ.get("PATH_INFO", "")
        if not self.pages_allowed:
            return _text(
                start_response,
                "403 Forbidden",
                "session pages are served over TLS (SESSIONLOG_TLS_CERT_FILE) or on a loopback listener only\n",
            )
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return _text(start_response, "405 Method Not Allowed", "only GET and HEAD\n", [("Allow", "GET, HEAD")])
        principal = self.authenticate(environ.get("HTTP_AUTHORIZATION", ""))
        if principal is None:
            challenge = [("WWW-Authenticate", 'Basic realm="sessionlog", charset="UTF-8"')]
            return _text(start_response, "401 Unauthorized", "a sessionlog token is required\n", challenge)
        line.update(access.log_fields(principal))
        session_id = path[len(SESSIONS_PREFIX) :]
        query = parse_qs(environ.get("QUERY_STRING", ""))
        try:
            at = _seq(query, "at")
            ask = _window_query(query)
        except ValueError as exc:
            return _text(start_response, "400 Bad Request", f"{exc}\n")
        try:
            if ask is not None:
                return _json(start_response, self._window_or_internal(principal, session_id, at, ask, line))
            body = self.page(principal, session_id, at)
        except BadWindow as exc:
            return _text(start_response, "400 Bad Request", f"{exc}\n")
        except _Internal:
            return _text(start_response, "500 Internal Server Error", "INTERNAL: internal error\n")
        except TimeoutError:
            reason = f"no page of the log within {PAGE_TIMEOUT_S:.0f} s"
            line["error"] = reason
            return _text(start_response, "503 Service Unavailable", f"{reason}\n")
        except SessionLogError as exc:
            error = access.public_error(exc, principal.namespace)
            status = "404 Not Found" if isinstance(error, NotFound) else "400 Bad Request"
            line["reason"] = error.reason  # the line says why, as a failed call's does
            return _text(start_response, status, f"{error.reason}: {error.message}\n")
        except MissingAssets as exc:
            line["error"] = str(exc)  # the operator's clue: only the body said it
            return _text(start_response, "500 Internal Server Error", f"{exc}\n")
        headers = [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Cache-Control", "no-store"),
            # The page loads nothing but its own windows (a windowed page), so nothing else may be
            # loaded into it.
            (
                "Content-Security-Policy",
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
            ),
        ]
        if isinstance(body, bytes):
            start_response("200 OK", [("Content-Length", str(len(body))), *headers])
            return [body]
        start_response("200 OK", headers)
        return body

    def authenticate(self, header: str) -> access.Principal | None:
        """The caller's principal, or None; without configured tokens everyone is anonymous."""
        if not self.tokens.enabled:
            return access.ANONYMOUS
        scheme, _, credential = header.partition(" ")
        credential = credential.strip()
        if scheme.lower() == "basic":
            try:
                credential = base64.b64decode(credential, validate=True).decode("utf-8").partition(":")[2]
            except (binascii.Error, UnicodeDecodeError):
                return None
        elif scheme.lower() != "bearer":
            return None
        return self.tokens.lookup(credential) if credential else None

    def page(self, principal: access.Principal, session_id: str, at: int | None) -> bytes | Iterator[bytes]:
        """The page: its bytes when kept, else its parts as they are rendered (the session is
        looked up first, so a missing one or a bad seq is an error before anything is sent).
        The log is append-only, so the page of a session up to a given seq (with the same
        forks) never changes: the last few small ones are kept (`PAGE_CACHE`, within
        `PAGE_CACHE_BYTES`), and a reload or a second reader does not fold it again."""
        key = self._key(principal, session_id, at)
        with self._lock:
            cached = self._pages.get(key)
            if cached is not None:
                self._pages.move_to_end(key)
                return cached
        require_assets()
        return self._streamed(key, principal, session_id)

    def _key(self, principal: access.Principal, session_id: str, at: int | None) -> PageKey:
        """The page of `session_id` at `at` (None: its head) as `principal` may see it."""
        session, head = self._call(self._describe(principal, session_id))
        if at is not None and at > head:
            raise seq_not_found(session_id, at, head + 1)  # as a history read past the head
        return (principal.namespace, session, head if at is None else at)

    def window(self, principal: access.Principal, session_id: str, at: int | None, ask: WindowQuery) -> JsonObject:
        """One window of the page's lists (`WindowQuery`), from the page's store: the one kept
        since the page was rendered, else rebuilt from the log (once, however many windows
        ask for it at the same time)."""
        key = self._key(principal, session_id, at)
        for seq in ask.seqs():  # past the page's last seq, as the page itself and the CLI say
            if seq > key[2]:
                raise seq_not_found(session_id, seq, key[2] + 1)
        try:
            return ask.read(self._store(principal, session_id, key))
        except StoreClosed:
            # Evicted by other pages' stores between being found and being read: once more,
            # from a store rebuilt now (which the eviction of the oldest cannot have reached yet).
            return ask.read(self._store(principal, session_id, key))

    def _store(self, principal: access.Principal, session_id: str, key: PageKey) -> WindowStore:
        """The page's store: the one kept, else one rebuilt from the log (once, however many
        windows ask for it at the same time)."""
        store = self._kept_store(key)
        if store is not None and not store.closed:
            return store
        with self._lock:
            building = self._building.setdefault(key, threading.Lock())
        try:
            with building:
                store = self._kept_store(key)
                if store is None or store.closed:
                    store = WindowStore()
                    try:
                        fill_store(PageFold(), self._events(principal, session_id, key[2]), store, key[1], PAGE_LINK)
                    except BaseException:
                        store.close()
                        raise
                    store = self._keep_store(key, store)
        finally:  # a rebuild that failed (the database away) leaves no lock behind for its page
            with self._lock:
                self._building.pop(key, None)
        return store

    def _window_or_internal(
        self, principal: access.Principal, session_id: str, at: int | None, ask: WindowQuery, line: dict[str, Any]
    ) -> JsonObject:
        """`window`, where an unexpected failure (a bug) is logged with its traceback and the
        client told of an internal error only, as a page cut short by one is."""
        try:
            return self.window(principal, session_id, at, ask)
        except (SessionLogError, BadWindow, TimeoutError):
            raise
        except Exception as exc:
            log.exception("window failed", session_id=session_id, error=repr(exc), **access.log_fields(principal))
            line["error"] = "INTERNAL"
            raise _Internal from None

    def _kept_store(self, key: PageKey) -> WindowStore | None:
        with self._lock:
            store = self._stores.get(key)
            if store is not None:
                self._stores.move_to_end(key)
            return store

    def _keep_store(self, key: PageKey, store: WindowStore) -> WindowStore:
        """Keep `store` as the page's, and return the page's store: one kept already stays
        (windows may be reading it) and `store` is closed."""
        with self._lock:
            kept = self._stores.get(key)
            if kept is not None and not kept.closed:
                store.close()
                return kept
            self._stores[key] = store
            self._stores.move_to_end(key)
            while len(self._stores) > PAGE_STORES:
                self._stores.popitem(last=False)[1].close()
            return store

    def _streamed(self, key: PageKey, principal: access.Principal, session_id: str) -> Iterator[bytes]:
        """The page's parts, rendered as the log is read; kept whole if it ends within
        `PAGE_CACHE_BYTES`. A read or render that fails part way ends the page with a line that
        says so (the status was sent already, and the body has no length that would tell a cut
        one) and is logged; an unexpected failure (a bug) with its traceback, its text kept from
        the client, which is told of an internal error (as a gRPC call's INTERNAL is)."""
        _, session, last = key
        kept: list[bytes] | None = []
        size = 0
        store = WindowStore() if windowed(last + 1) else None
        stored = False
        try:
            parts = render_parts(self._events(principal, session_id, last), session, link=PAGE_LINK, store=store)
            for text in parts:
                if store is not None and store.finished and not stored:
                    # Kept before the page's script is sent: the script's first windows find it.
                    self._keep_store(key, store)
                    stored = True
                part = text.encode("utf-8")
                size += len(part)
                if kept is not None and size <= PAGE_CACHE_BYTES:
                    kept.append(part)
                else:
                    kept = None
                yield part
        except (SessionLogError, TimeoutError) as exc:
            if isinstance(exc, SessionLogError):
                error = access.public_error(exc, principal.namespace)
                reason = f"{error.reason}: {error.message}"
            else:
                reason = f"no page of the log within {PAGE_TIMEOUT_S:.0f} s"
            log.error("page incomplete", session_id=session_id, error=reason, **access.log_fields(principal))
            yield _incomplete(reason)
            return
        except Exception as exc:
            fields = access.log_fields(principal)
            log.exception("page incomplete", session_id=session_id, error=repr(exc), **fields)
            yield _incomplete("INTERNAL: internal error")
            return
        finally:
            if store is not None and not stored:
                store.close()  # a page cut short (or a client gone) leaves no store behind
        if kept is not None:
            body = b"".join(kept)
            with self._lock:
                self._pages[key] = body
                while len(self._pages) > PAGE_CACHE or sum(map(len, self._pages.values())) > PAGE_CACHE_BYTES:
                    self._pages.popitem(last=False)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=PAGE_TIMEOUT_S)

    async def _describe(self, principal: access.Principal, session_id: str) -> tuple[SessionRef, int]:
        """The session (its fork relations) and its last seq, as `principal` may see them."""
        access.bind(principal)
        record = await self.service.sessions.get_session(session_id)
        children: list[tuple[str, int | None]] = []
        token = ""
        while True:
            records, token = await self.service.sessions.list_sessions(0, token, session_id)
            children.extend((access.public_id(child.id), child.fork_seq) for child in records)
            if not token:
                break
        parent = access.public_id(record.parent_id) if record.parent_id is not None else None
        return SessionRef(access.public_id(record.id), parent, record.fork_seq, tuple(children)), record.next_seq - 1

    def _events(self, principal: access.Principal, session_id: str, last: int) -> Iterator[Event]:
        """Seqs 0..last, read a page at a time on the service's loop as the render asks."""
        if last < 0:
            return
        pages = self.service.read_events(session_id, 0, last, 0)
        try:
            while (page := self._call(self._next_page(principal, pages))) is not None:
                yield from page
        finally:
            self._call(pages.aclose())

    @staticmethod
    async def _next_page(principal: access.Principal, pages: AsyncGenerator[list[Event], None]) -> list[Event] | None:
        access.bind(principal)  # each step runs as a task of its own, with a context of its own
        return await anext(pages, None)


def _headers_only(body: Iterable[bytes]) -> Iterator[bytes]:
    """The answer to a HEAD request: `body` closed unsent, so a page that is rendered as it is
    sent is never rendered (its session was looked up: a missing one is still 404). One empty
    part sends the headers as they are: a streamed page's without a length, where the WSGI
    server would say `Content-Length: 0` of a body that ends before its headers went out."""
    close = getattr(body, "close", None)
    if close is not None:
        close()
    yield b""


def _incomplete(reason: str) -> bytes:
    """The line that ends a page cut short by `reason`. The page's script is not sent after it:
    nothing draws a part of the log as if it were all."""
    text = f"This page is incomplete: reading the log failed ({html.escape(reason)})."
    return f'<p class="error">{text}</p>\n'.encode()


def _logged(body: Iterable[bytes], line: dict[str, Any], started: float) -> Iterator[bytes]:
    """`body`, with the request's line logged once it is all sent (or the client went away):
    a page is rendered as it is sent, so its time is the whole body's, not the first part's."""
    sent = 0
    try:
        for part in body:
            sent += len(part)
            yield part
    finally:
        line["bytes"] = sent
        _log_page(line, started)


def _log_page(line: dict[str, Any], started: float) -> None:
    log.info("page", **line, latency_ms=round((time.perf_counter() - started) * 1000, 3))


def _seq(query: dict[str, list[str]], name: str) -> int | None:
    """The query's `name=N` (the last one wins); ValueError names a value that is not one."""
    values = query.get(name)
    if not values:
        return None
    value = values[-1]
    if not value.isdigit():
        what = "a seq" if name != "page" else "a page number"
        raise ValueError(f"{name} must be a non-negative integer ({what}), got {value!r}")
    return int(value)


class _Internal(Exception):
    """A window failed for a reason the client is not told (it was logged)."""


@dataclass(frozen=True, slots=True)
class WindowQuery:
    """What a windowed page's script asks for: a page of a list, the transcript page of a seq,
    or what a diff of two requests is composed from."""

    name: str
    page: int | None = None
    seq: int | None = None
    span: tuple[int, int] | None = None

    def seqs(self) -> tuple[int, ...]:
        """The seqs the query names (a diff's two, a jump's one): each must be on the page. Past
        its last seq, a diff answered empty lists and a jump `page: null`, with 200."""
        if self.span is not None:
            return self.span
        return () if self.seq is None else (self.seq,)

    def read(self, store: WindowStore) -> JsonObject:
        if self.span is not None:
            return store.diff(*self.span)
        if self.seq is not None:
            return store.find(self.seq)
        assert self.page is not None
        return store.window(self.name, self.page)


def _window_query(query: dict[str, list[str]]) -> WindowQuery | None:
    """The window `list=…` asks for (None: the page itself); ValueError says what is missing."""
    names = query.get("list")
    if not names:
        return None
    name = names[-1]
    if name != "diff" and name not in LISTS:  # before what it needs: `list=bogus` was told to give page=N
        raise ValueError(f"list must be one of {', '.join(LISTS)}, diff, got {name!r}")
    if name == "diff":
        start, end = _seq(query, "from"), _seq(query, "to")
        if start is None or end is None:
            raise ValueError("list=diff needs from=SEQ and to=SEQ (two request seqs)")
        return WindowQuery(name, span=(start, end))
    page, seq = _seq(query, "page"), _seq(query, "seq")
    if seq is not None and name == "transcript":
        return WindowQuery(name, seq=seq)
    if page is None:
        raise ValueError(f"list={name} needs page=N (seq=S finds the transcript page of a seq)")
    return WindowQuery(name, page=page)


def _json(start_response: StartResponse, value: JsonObject) -> list[bytes]:
    """A window as JSON: not kept by the browser (the page is not either)."""
    body = json_text(value).encode("utf-8")
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
    ]
    start_response("200 OK", headers)
    return [body]


def _text(
    start_response: StartResponse, status: str, text: str, extra: list[tuple[str, str]] | None = None
) -> list[bytes]:
    body = text.encode("utf-8")
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))] + (extra or [])
    )
    return [body]
