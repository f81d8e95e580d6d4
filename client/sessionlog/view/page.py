"""The session page (issue 14): one self-contained HTML file from a session's events.

Everything the page shows is computed here from pure projections (`TimelineFold`, the
transcript's `transcript_row`, `header_change`); the page's script (app.js, beside this file)
only joins the page's data parts, lays the numbers out, pages long lists, and composes the
per-request surface deltas for a diff between two chosen requests exactly as
`SurfaceDelta.merge` does. The chart library is uPlot, pinned in web/package-lock.json and
copied into vendor/ by scripts/build_view_assets.sh; it is inlined, so the file needs no
network when opened.

The page is rendered in parts (`render_parts`), PART_EVENTS events at a time, from a log read
lazily, and written out part by part: the memory a render takes does not grow with the
session's length (a 200,000-event session's whole page, built at once, took about 1.2 GB).

A page past WINDOW_EVENTS events is windowed (`windowed`): instead of every part it embeds
the summary, the first window of each list and the chart bucketed per N seqs (chart.py), so
what the browser parses stays about the same size however long the session; the lists go into
a `WindowStore` (windows.py), from which the page's script fetches a window as it is paged to
(the server's `/sessions/ID?at=SEQ&list=…`). Before, a 200,000-event page embedded 66 MB of
JSON that the browser parsed and held before it drew anything.

The CLI (`sessionlog view`) and the server (`/sessions/ID` on the metrics listener) both call
`render_parts`, so they serve the same page; the CLI's file is opened offline, where there is no
server to fetch windows from, so it embeds every part at any length.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

from sessionlog.core.events import Event, JsonObject
from sessionlog.core.headers import HeaderState
from sessionlog.core.projections.stats import STATS_KEYS, figure_label
from sessionlog.core.projections.timeline import TimelineFold
from sessionlog.core.projections.transcript import TranscriptRow, transcript_row
from sessionlog.core.request_diff import header_change
from sessionlog.core.vocabulary import REQUEST_HEADER
from sessionlog.view import windows
from sessionlog.view.chart import ChartBuckets
from sessionlog.view.json_text import json_text
from sessionlog.view.windows import WindowStore

PREVIEW_CHARS = 160
"""A transcript row shows one line; the full message is in the log (`sessionlog transcript`)."""
MAX_HEADER_PAIRS = 64
"""Header pairs are precomputed for sessions with at most this many headers (else only
consecutive pairs; the page says so)."""
PART_EVENTS = 2000
"""Events folded into one data part of the page: what a render holds of the log at once."""
WINDOW_EVENTS = 20_000
"""A page of more events than this is windowed (`windowed`): about 6.6 MB of JSON, which a
browser parses in well under a second, where 200,000 events embedded 66 MB."""
SUMMARY_KEYS = ("session", "stats", "labels", "counts", "surfaceGeneration", "headerPairsComplete")
"""What the last part adds to its lists: the page's summary."""

STATS_LABELS: dict[str, str] = {key: figure_label(key) for key in STATS_KEYS}
"""The label of each stats figure the page shows: the names `sessionlog replay` prints (the page
data carries them, so the page's script cannot name a figure its own way)."""

ASSETS = ("vendor/uPlot.min.css", "app.css", "vendor/uPlot.iife.min.js", "app.js")


class MissingAssets(RuntimeError):
    """The vendored chart library was not built (run `make` or scripts/build_view_assets.sh)."""


@dataclass(frozen=True, slots=True)
class SessionRef:
    """What the page says about the session itself and its fork relations."""

    session_id: str
    parent_session_id: str | None = None
    fork_seq: int | None = None
    children: tuple[tuple[str, int | None], ...] = ()


def _asset(name: str) -> str:
    try:
        return (resources.files("sessionlog.view") / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _missing(name) from None


def _missing(name: str) -> MissingAssets:
    return MissingAssets(
        f"session page asset {name} is missing: run `make` or `bash scripts/build_view_assets.sh` "
        "(builds the pinned chart library from web/package-lock.json)"
    )


def require_assets() -> None:
    """MissingAssets unless every asset the page inlines is there. Callers check before they
    read a session's log, which for a long session takes far longer than the page's error."""
    for name in ASSETS:
        if not (resources.files("sessionlog.view") / name).is_file():
            raise _missing(name)


BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Unicode's bidirectional formatting characters: in an audit view they reorder what is shown
(`evil\u202eexe.txt` reads as `eviltxt.exe`), so the text an agent wrote could read as other text
(Trojan Source). The page shows each as its code point instead."""


def _visible_control(match: re.Match[str]) -> str:
    return f"⟨U+{ord(match.group()):04X}⟩"


def preview(value: Any) -> str:
    """A one-line text of a message or event data, cut at PREVIEW_CHARS; bidirectional controls
    shown as their code points (BIDI_CONTROLS)."""
    text = _text(value)
    text = BIDI_CONTROLS.sub(_visible_control, " ".join(text.split()))
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _text(value: Any) -> str:
    if isinstance(value, dict) and "content" in value:
        return _text(value["content"])
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for block in value:
            if isinstance(block, dict):
                kind = block.get("type")
                if kind == "text":
                    parts.append(str(block.get("text", "")))
                elif kind == "thinking":
                    parts.append(f"[thinking] {block.get('thinking', '')}")
                elif kind == "toolCall":
                    arguments = json_text(block.get("arguments"))
                    parts.append(f"[{block.get('name')}] {arguments[:PREVIEW_CHARS]}")
                else:
                    parts.append(f"[{kind}]")
            else:
                parts.append(str(block))
        return " ".join(parts)
    return json_text(value)[: PREVIEW_CHARS * 2]


def row_shown(row: TranscriptRow) -> JsonObject:
    """A transcript projection's row cut to what the page lists."""
    data = row["data"]
    # A message or replace row's `data` is the projected message itself.
    message = data if row["kind"] != "event" and isinstance(data, dict) else None
    out: JsonObject = {
        "seq": row["seq"],
        "kind": row["kind"],
        "type": row.get("eventType", row["type"]),
        "role": message.get("role") if isinstance(message, dict) else None,
        "text": preview(message if isinstance(message, dict) else data),
        "replacedBy": row["replacedBy"],
    }
    if isinstance(message, dict) and message.get("isError") is True:
        out["isError"] = True
    if row.get("interrupted") is True:
        out["interrupted"] = True
    if row["kind"] == "replace":
        out["replaces"] = row["replaces"]
    return out


# The timeline fields the page shows; the rest stay out of the file (a 100k-event session's
# page is parsed by the browser before anything but the header is drawn).
PAGE_FIELDS = {
    "requests": (
        "seq",
        "kind",
        "turn",
        "step",
        "headerSeq",
        "delta",
        "cumulativeCost",
        "cumulativeUnpriced",
        "usage",
        "drop",
        "error",
    ),
    "turns": ("turn", "startSeq", "durationMs", "endKind", "steps", "requests"),
    "steps": ("turn", "step", "startSeq", "endSeq", "durationMs", "requests"),
    "toolCalls": ("callId", "name", "turn", "step", "blockSeq", "durationMs", "outcome", "errorCode"),
}
USAGE_FIELDS = ("context", "cacheRead", "output", "cacheShare", "cost")
INDEXED = ("turns", "steps", "toolCalls")
"""The records a later event may still change (an open turn, step or tool call): a part lists
each once it is final, as `[index, record]` by its place in the timeline's list."""


def _shown(name: str, record: JsonObject) -> JsonObject:
    """A timeline record cut to PAGE_FIELDS (a key absent from a record stays absent)."""
    out = {key: record[key] for key in PAGE_FIELDS[name] if key in record}
    if name == "requests" and out["usage"] is not None:
        out["usage"] = {key: out["usage"][key] for key in USAGE_FIELDS}
    return out


class PageFold:
    """What the page shows, folded event by event and taken out in parts, so a render holds
    one part of the page and the fold's open state (`TimelineFold(keep_events=False)`: the
    surface's seqs and the open turns, steps and tool calls), never the log nor the whole page.

    A part is a JSON object of lists (and `headerPairs`) that the page's script appends in
    order; `finish` adds the summary (`session`, `stats`, `counts`, …). Two things the whole
    log would have told at once come in pieces: a transcript row is listed with `replacedBy`
    null and each replace lists `replacedBy: [[seq, replacer], …]` for the nodes it took off
    (the first replacer of a seq names it, as in `transcript.replacements`); and the turns,
    steps and tool calls come as `[index, record]` once no later event can change them.
    """

    def __init__(self) -> None:
        self.fold = TimelineFold(keep_events=False)
        self.transcript: list[JsonObject] = []
        self.replaced_by: list[list[int]] = []
        self.created = dict.fromkeys(INDEXED, 0)
        self.pending: dict[str, list[tuple[int, JsonObject]]] = {name: [] for name in INDEXED}
        self.headers: list[HeaderState] = []
        """Every header so far while there are at most MAX_HEADER_PAIRS, then the latest."""
        self.pairs: JsonObject = {}
        self._consecutive = False
        """Past MAX_HEADER_PAIRS headers: only consecutive pairs are kept (the page says so)."""
        self.last_seq: int | None = None

    def add(self, event: Event) -> None:
        """Fold one event (seqs 0, 1, 2, … in order)."""
        plan = self.fold.add(event)
        self.last_seq = event.seq
        replaces = list(plan.shadowed) if plan is not None and plan.kind == "replace" else []
        row = transcript_row(event, None, replaces)
        if row is not None:
            self.transcript.append(row_shown(row))
        self.replaced_by.extend([seq, event.seq] for seq in replaces)
        if event.type == REQUEST_HEADER and self.fold.header is not None:
            self._header(self.fold.header)

    def _header(self, after: HeaderState) -> None:
        """The header fields that differ between `after` and every earlier header while there
        are at most MAX_HEADER_PAIRS headers, else between consecutive headers only."""
        for before in self.headers:
            self.pairs[f"{before.seq}:{after.seq}"] = header_change(before, after)
        self.headers.append(after)
        if not self._consecutive and len(self.headers) > MAX_HEADER_PAIRS:
            kept = zip(self.headers, self.headers[1:], strict=False)
            self.pairs = {key: self.pairs[key] for key in (f"{a.seq}:{b.seq}" for a, b in kept)}
            self._consecutive = True
        if self._consecutive:
            self.headers = [after]

    def take(self) -> JsonObject:
        """The part of the page folded since the last `take` (every record in it final)."""
        return self._part(final=False)

    def finish(self, session: SessionRef, link: str) -> JsonObject:
        """The last part, with every record still open as it stands, and the page's summary."""
        part = self._part(final=True)
        summary = self.fold.result()
        part.update(
            session={
                "id": session.session_id,
                "parent": session.parent_session_id,
                "forkSeq": session.fork_seq,
                "parentHref": link.format(id=session.parent_session_id) if session.parent_session_id else None,
                "children": [
                    {"id": child, "forkSeq": seq, "href": link.format(id=child)} for child, seq in session.children
                ],
                "events": self.fold.counts["events"],
                "atSeq": self.last_seq,
            },
            stats=summary["stats"],
            labels=STATS_LABELS,
            counts=summary["counts"],
            surfaceGeneration=summary["surfaceGeneration"],
            headerPairsComplete=not self._consecutive,
            pageRows=windows.PAGE_ROWS,  # the script pages the lists as the windows are cut
            pageTurns=windows.PAGE_TURNS,
        )
        return part

    def _part(self, *, final: bool) -> JsonObject:
        fold = self.fold
        part: JsonObject = {
            "requests": [_shown("requests", request) for request in fold.requests],
            "markers": list(fold.markers),
        }
        fold.requests.clear()
        fold.markers.clear()
        opened = (("turns", fold.turns, fold.open_turns), ("steps", fold.steps, fold.open_steps))
        for name, records, still in (*opened, ("toolCalls", fold.tool_calls, fold.open_calls)):
            pending = self.pending[name]
            for record in records:
                pending.append((self.created[name], record))
                self.created[name] += 1
            records.clear()
            open_ids = set() if final else {id(record) for record in still.values()}
            part[name] = [[index, _shown(name, record)] for index, record in pending if id(record) not in open_ids]
            self.pending[name] = [(index, record) for index, record in pending if id(record) in open_ids]
        part["transcript"], self.transcript = self.transcript, []
        part["replacedBy"], self.replaced_by = self.replaced_by, []
        if self._consecutive or final:
            part["headerPairs"], self.pairs = self.pairs, {}
        else:
            part["headerPairs"] = {}  # all pairs are kept until the count of headers is known
        return part


def _script_safe(text: str) -> str:
    """Script text that cannot end its <script> element early nor open an HTML comment in it
    (`<\\/` and `<\\!--` mean the same inside JavaScript strings and regular expressions)."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _json_safe(text: str) -> str:
    """JSON inside a <script> element: every `<` as `\\u003c` (only strings hold one), so
    session content such as `</script>` or `<!--<script>` can neither end the element nor
    switch the HTML parser into its escaped-script states."""
    return text.replace("<", "\\u003c")


def _data_element(part: JsonObject, attribute: str) -> str:
    return f'<script type="application/json" {attribute}>{_json_safe(json_text(part))}</script>\n'


def windowed(events: int) -> bool:
    """Whether the page of a prefix of `events` events is windowed (the one rule: the server
    asks it before it reads the log, with the prefix's length)."""
    return events > WINDOW_EVENTS


def render_parts(
    events: Iterable[Event], session: SessionRef, *, link: str = "{id}.html", store: WindowStore | None = None
) -> Iterator[str]:
    """The self-contained HTML page of `events` (a log prefix from seq 0, read lazily) in
    pieces: the head, one data element per PART_EVENTS events, the summary, the scripts.
    Joined, they are the page; written out as they come, a page of any length is rendered in
    the memory of one part (the events of a part are dropped once it is taken).

    With a `store`, the page is windowed: the parts go into the store and the page embeds only
    the summary, the first window of each list and the bucketed chart (`windowed_summary`)."""
    uplot_css, app_css, uplot_js, app_js = (_asset(name) for name in ASSETS)
    title = _escape(f"sessionlog · {session.session_id}")
    yield HEAD.format(title=title, css=uplot_css + "\n" + app_css)
    fold = PageFold()
    if store is None:
        for part in _parts(fold, events):
            yield _data_element(part, 'class="sessionlog-part"')
        yield _data_element(fold.finish(session, link), 'id="sessionlog-data"')
    else:
        yield _data_element(fill_store(fold, events, store, session, link), 'id="sessionlog-data"')
    yield TAIL.format(uplot=_script_safe(uplot_js), app=_script_safe(app_js))


def _parts(fold: PageFold, events: Iterable[Event]) -> Iterator[JsonObject]:
    """`events` folded into `fold`, taken out a part per PART_EVENTS events (the rest is
    `fold.finish`'s)."""
    source = iter(events)
    while True:
        count = 0
        for event in itertools.islice(source, PART_EVENTS):
            fold.add(event)
            count += 1
        if not count:
            return
        yield fold.take()


def fill_store(
    fold: PageFold, events: Iterable[Event], store: WindowStore, session: SessionRef, link: str
) -> JsonObject:
    """Fold `events` into `store` part by part; the windowed page's summary (`windowed_summary`)."""
    chart = ChartBuckets()
    for part in _parts(fold, events):
        chart.add(part["requests"], part["markers"])
        store.add(part)
    last = fold.finish(session, link)  # only once every part is taken: it lists what is still open
    chart.add(last["requests"], last["markers"])
    store.add(last)
    store.finished = True
    return windowed_summary(last, store, chart)


def windowed_summary(last: JsonObject, store: WindowStore, chart: ChartBuckets) -> JsonObject:
    """The data a windowed page embeds: the summary of the last part, the chart's buckets, and
    the first window of each list with how many items each list has (`windows`); the page's
    script fetches the other windows. Its size does not grow with the session's length."""
    summary: JsonObject = {key: last[key] for key in (*SUMMARY_KEYS, "pageRows", "pageTurns")}
    first = {name: store.window(name, 0) for name in store.counts}
    turns = first["turns"]
    summary.update(
        windows=dict(store.counts),
        chart=chart.result(),
        transcript=first["transcript"]["items"],
        requests=first["requests"]["items"],
        drops=first["drops"]["items"],
        turns=turns["items"],
        steps=turns["steps"],
        toolCalls=turns["toolCalls"],
        headerPairs={},
    )
    return summary


def render_page(
    events: Iterable[Event], session: SessionRef, *, link: str = "{id}.html", store: WindowStore | None = None
) -> str:
    """The self-contained HTML page of `events` (a log prefix from seq 0), as one string."""
    return "".join(render_parts(events, session, link=link, store=store))


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


HEAD = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
{css}
</style>
</head>
<body>
<header id="top"><h1>{title}</h1><div id="session"></div><dl id="summary"></dl></header>
<main>
<section id="chart-section"><h2>Requests</h2><div id="chart"></div><div id="markers-legend"></div></section>
<section id="drops-section"><h2>Cache-read drops</h2><div id="drops"></div></section>
<section id="requests-section"><h2>Request list</h2><div id="requests"></div></section>
<section id="diff-section"><h2>Request diff</h2><form id="diff-form">
<label>from request seq <input id="diff-from" type="number" min="0"></label>
<label>to request seq <input id="diff-to" type="number" min="0"></label>
<button type="submit" id="diff-run">Diff</button></form><div id="diff"></div></section>
<section id="turns-section"><h2>Turns</h2><div id="turns"></div></section>
<section id="transcript-section"><h2>Transcript</h2><div id="transcript"></div></section>
</main>
"""
TAIL = """<script>{uplot}</script>
<script>{app}</script>
</body>
</html>
"""
