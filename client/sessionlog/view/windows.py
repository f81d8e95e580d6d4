"""A long session page's lists, kept out of the page and read back a window at a time.

A windowed page (page.py `windowed`) embeds the first window of each list; the rest stay in a
`WindowStore`, filled part by part as the page is folded (`PageFold`'s parts, the same that a
short page embeds) and read by the page's script through the server's JSON windows
(`/sessions/ID?at=SEQ&list=…`). The store is a SQLite file on disk, so what the server holds in
memory does not grow with the session either.

Two things a part gives in pieces are joined when a window is read, as the page's script joins
a short page's parts: a row is listed with `replacedBy` null and a later replace names it (the
first replacer of a seq names it), and the turns, steps and tool calls come by index, in any
order, once final.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

from sessionlog.core.events import JsonObject
from sessionlog.view.json_text import json_text

PAGE_ROWS = 100
"""Rows a page of the transcript, request and cache-drop lists shows: one window of them."""
PAGE_TURNS = 25
"""Turns a page of the turn list shows (with their steps and tool calls): one window."""
LISTS = ("transcript", "requests", "drops", "turns")
"""The paged lists a window is read from."""

SCHEMA = """
CREATE TABLE rows (idx INTEGER PRIMARY KEY, seq INTEGER NOT NULL, body TEXT NOT NULL);
CREATE INDEX rows_seq ON rows (seq);
CREATE TABLE replaced (seq INTEGER PRIMARY KEY, by INTEGER NOT NULL);
CREATE TABLE requests (idx INTEGER PRIMARY KEY, seq INTEGER NOT NULL, body TEXT NOT NULL);
CREATE INDEX requests_seq ON requests (seq);
CREATE TABLE drops (idx INTEGER PRIMARY KEY, request INTEGER NOT NULL);
CREATE TABLE turns (idx INTEGER PRIMARY KEY, turn INTEGER, body TEXT NOT NULL);
CREATE TABLE steps (idx INTEGER PRIMARY KEY, turn INTEGER, body TEXT NOT NULL);
CREATE INDEX steps_turn ON steps (turn);
CREATE TABLE calls (idx INTEGER PRIMARY KEY, turn INTEGER, body TEXT NOT NULL);
CREATE INDEX calls_turn ON calls (turn);
CREATE TABLE pairs (key TEXT PRIMARY KEY, body TEXT NOT NULL);
"""
INDEXED_TABLES = {"turns": "turns", "steps": "steps", "toolCalls": "calls"}


class BadWindow(ValueError):
    """A window that is not there (a page past the list's end, a list the page has not)."""


class StoreClosed(RuntimeError):
    """The store was closed (its page's store evicted) before a window could be read from it:
    the caller reads the window from a store rebuilt from the log."""


class WindowStore:
    """The lists of one page (one session's prefix up to one seq) in a SQLite file of its own,
    gone once `close`d or its process ends, however it ends. Safe to read from several threads
    (one connection behind a lock).

    The file is SQLite's own temporary database (an empty file name): SQLite keeps it in its
    page cache while it is small, spills the rest to a file in the temporary directory
    (`SQLITE_TMPDIR`, else `TMPDIR`, else `/var/tmp`, `/tmp`) and unlinks that file as soon as
    it opens it. A named file (`mkstemp`) was removed only by `close`: a killed server (SIGKILL,
    the OOM killer, a power loss) left every kept page's file behind for good.
    """

    def __init__(self) -> None:
        self._db = sqlite3.connect("", check_same_thread=False, isolation_level=None)
        # A scratch file: rebuilt from the log whenever it is missing, so never synced.
        self._db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + SCHEMA)
        self._lock = threading.Lock()
        self.counts = dict.fromkeys(LISTS, 0)
        """Items in each list so far."""
        self.finished = False
        """Every part of the page is in (page.py `fill_store` says so after the last)."""
        self.closed = False

    def __enter__(self) -> WindowStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (which removes it)."""
        with self._lock:
            self.closed = True
            self._db.close()

    def stored_bytes(self) -> int:
        """The size of the store's database: what it holds in SQLite's cache and on disk."""
        with self._lock:
            (pages,) = self._db.execute("PRAGMA page_count").fetchone()
            (page_size,) = self._db.execute("PRAGMA page_size").fetchone()
        return int(pages) * int(page_size)

    def add(self, part: JsonObject) -> None:
        """One part of the page (`PageFold.take` or `finish`), in the order they were taken."""
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            rows, requests = self.counts["transcript"], self.counts["requests"]
            db.executemany(
                "INSERT INTO rows VALUES (?, ?, ?)",
                ((rows + i, row["seq"], json_text(row)) for i, row in enumerate(part["transcript"])),
            )
            db.executemany("INSERT OR IGNORE INTO replaced VALUES (?, ?)", part["replacedBy"])
            db.executemany(
                "INSERT INTO requests VALUES (?, ?, ?)",
                ((requests + i, request["seq"], json_text(request)) for i, request in enumerate(part["requests"])),
            )
            drops = [requests + i for i, request in enumerate(part["requests"]) if request["drop"] is not None]
            db.executemany(
                "INSERT INTO drops VALUES (?, ?)", ((self.counts["drops"] + i, r) for i, r in enumerate(drops))
            )
            for name, table in INDEXED_TABLES.items():
                db.executemany(
                    f"INSERT INTO {table} VALUES (?, ?, ?)",
                    ((index, record.get("turn"), json_text(record)) for index, record in part[name]),
                )
            db.executemany(
                "INSERT OR REPLACE INTO pairs VALUES (?, ?)",
                ((k, json_text(v)) for k, v in part["headerPairs"].items()),
            )
            db.execute("COMMIT")
        self.counts["transcript"] += len(part["transcript"])
        self.counts["requests"] += len(part["requests"])
        self.counts["drops"] += len(drops)
        self.counts["turns"] += len(part["turns"])

    # --- reading ---------------------------------------------------------------------------

    def pages(self, name: str) -> int:
        """How many pages list `name` has (at least one, an empty one for an empty list)."""
        size = PAGE_TURNS if name == "turns" else PAGE_ROWS
        return max(1, -(-self.counts[name] // size))

    def window(self, name: str, page: int) -> JsonObject:
        """Page `page` of list `name`: `{"list", "page", "items"}`, and for the turns the steps
        and tool calls of its turns (`steps`, `toolCalls`). BadWindow for a list or page that
        is not there."""
        if name not in LISTS:
            raise BadWindow(f"list must be one of {', '.join(LISTS)}, got {name!r}")
        if not 0 <= page < self.pages(name):
            last = self.pages(name) - 1
            raise BadWindow(f"page {page} is past the last page of {name}, page {last} (pages count from 0)")
        with self._reading():
            if name == "turns":
                return {"list": name, "page": page, **self._turns(page)}
            first = page * PAGE_ROWS
            bounds = (first, first + PAGE_ROWS - 1)
            if name == "transcript":
                items = self._rows("WHERE r.idx BETWEEN ? AND ?", bounds)
            elif name == "requests":
                items = self._select("SELECT body FROM requests WHERE idx BETWEEN ? AND ? ORDER BY idx", bounds)
            else:
                query = "SELECT r.body FROM drops d JOIN requests r ON r.idx = d.request WHERE d.idx BETWEEN ? AND ?"
                items = self._select(query + " ORDER BY d.idx", bounds)
        return {"list": name, "page": page, "items": items}

    def find(self, seq: int) -> JsonObject:
        """The transcript page that holds the row of `seq` (`page` null when no row has it)."""
        with self._reading():
            found = self._db.execute("SELECT idx FROM rows WHERE seq = ?", (seq,)).fetchone()
        page = None if found is None else found[0] // PAGE_ROWS
        return {"list": "transcript", "seq": seq, "page": page}

    def diff(self, from_seq: int, to_seq: int) -> JsonObject:
        """What the page composes the diff of two requests from: the requests from `from_seq` to
        `to_seq` (their surface deltas), the header pairs that can apply, and the transcript rows
        the deltas name (the page shows each added or replaced message by its row)."""
        if from_seq > to_seq:
            raise BadWindow(f"from ({from_seq}) must not be past to ({to_seq})")
        with self._reading():
            query = "SELECT body FROM requests WHERE seq BETWEEN ? AND ? ORDER BY seq"
            requests = self._select(query, (from_seq, to_seq))
            ends = [r["headerSeq"] for r in requests if r["seq"] in (from_seq, to_seq)]
            key = ":".join(map(str, ends)) if len(ends) == 2 and None not in ends else ""
            pair = self._db.execute("SELECT body FROM pairs WHERE key = ?", (key,)).fetchone()
            named = sorted(
                {seq for r in requests for seq in r["delta"]["added"]}
                | {seq for r in requests for seq, _ in r["delta"]["replaced"]}
            )
            rows = self._rows("WHERE r.seq IN (SELECT value FROM json_each(?))", (json_text(named),))
        pairs = {key: json.loads(pair[0])} if pair is not None else {}
        return {
            "list": "diff",
            "from": from_seq,
            "to": to_seq,
            "requests": requests,
            "headerPairs": pairs,
            "rows": rows,
        }

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Hold the store for a read; StoreClosed once it was closed (evicted meanwhile)."""
        with self._lock:
            if self.closed:
                raise StoreClosed("the page's window store was closed")
            yield

    def _select(self, query: str, parameters: tuple[Any, ...]) -> list[Any]:
        return [json.loads(body) for (body,) in self._db.execute(query, parameters)]

    def _rows(self, where: str, parameters: tuple[Any, ...]) -> list[Any]:
        """Transcript rows, each with the first replace that took it off the surface."""
        query = f"SELECT r.body, x.by FROM rows r LEFT JOIN replaced x ON x.seq = r.seq {where} ORDER BY r.idx"
        rows = []
        for body, by in self._db.execute(query, parameters):
            row = json.loads(body)
            if row["replacedBy"] is None:
                row["replacedBy"] = by
            rows.append(row)
        return rows

    def _turns(self, page: int) -> JsonObject:
        first = page * PAGE_TURNS
        bounds = (first, first + PAGE_TURNS - 1)
        turns = self._select("SELECT body FROM turns WHERE idx BETWEEN ? AND ? ORDER BY idx", bounds)
        numbers = json_text(sorted({t["turn"] for t in turns if t["turn"] is not None}))
        of_turns = "WHERE turn IN (SELECT value FROM json_each(?)) ORDER BY idx"
        steps = self._select(f"SELECT body FROM steps {of_turns}", (numbers,))
        calls = self._select(f"SELECT body FROM calls {of_turns}", (numbers,))
        return {"items": turns, "steps": steps, "toolCalls": calls}
