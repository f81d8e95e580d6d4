"""The session page (issue 14): one self-contained HTML file from a session's events.

Everything the page shows is computed here from pure projections (`timeline`, `transcript`,
`header_change`); the page's script (app.js, beside this file) only lays the numbers out,
pages long lists, and composes the per-request surface deltas for a diff between two chosen
requests exactly as `SurfaceDelta.merge` does. The chart library is uPlot, pinned in
web/package-lock.json and copied into vendor/ by scripts/build_view_assets.sh; it is inlined,
so the file needs no network when opened.

The CLI (`sessionlog view`) and the server (`/sessions/ID` on the metrics listener) both call
`render_page`, so they serve the same page.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import orjson

from sessionlog.core.events import Event, JsonObject
from sessionlog.core.headers import HeaderState, header_state
from sessionlog.core.projections.timeline import timeline
from sessionlog.core.projections.transcript import transcript
from sessionlog.core.request_diff import header_change

PREVIEW_CHARS = 160
"""A transcript row shows one line; the full message is in the log (`sessionlog transcript`)."""
MAX_HEADER_PAIRS = 64
"""Header pairs are precomputed for sessions with at most this many headers (else only
consecutive pairs; the page says so)."""

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


def preview(value: Any) -> str:
    """A one-line text of a message or event data, cut at PREVIEW_CHARS."""
    text = _text(value)
    text = " ".join(text.split())
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
                    arguments = _json(block.get("arguments"))
                    parts.append(f"[{block.get('name')}] {arguments[:PREVIEW_CHARS]}")
                else:
                    parts.append(f"[{kind}]")
            else:
                parts.append(str(block))
        return " ".join(parts)
    return _json(value)[: PREVIEW_CHARS * 2]


def _json(value: Any) -> str:
    """Compact JSON text (orjson; the standard library for what orjson refuses, such as an
    integer past 64 bits or a lone surrogate)."""
    try:
        return orjson.dumps(value).decode("utf-8")
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def transcript_rows(events: Sequence[Event]) -> list[JsonObject]:
    """The transcript projection's rows, cut to what the page lists."""
    rows = []
    for row in transcript(events):
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
        if row["kind"] == "replace":
            out["replaces"] = row["replaces"]
        rows.append(out)
    return rows


def header_pairs(events: Sequence[Event], header_seqs: list[int]) -> JsonObject:
    """`"A:B"` -> the header fields that differ between the headers logged at A and B."""
    states: list[HeaderState] = [header_state(events[seq], generation=0) for seq in header_seqs]
    pairs: JsonObject = {}
    for i, before in enumerate(states):
        later = states[i + 1 :] if len(states) <= MAX_HEADER_PAIRS else states[i + 1 : i + 2]
        for after in later:
            pairs[f"{before.seq}:{after.seq}"] = header_change(before, after)
    return pairs


# The timeline fields the page shows; the rest stay out of the file (a 100k-event session's
# page is parsed by the browser before anything but the header is drawn).
PAGE_FIELDS = {
    "requests": ("seq", "kind", "turn", "step", "headerSeq", "delta", "cumulativeCost", "usage", "drop", "error"),
    "turns": ("turn", "startSeq", "durationMs", "endKind", "steps", "requests"),
    "steps": ("turn", "step", "startSeq", "durationMs", "requests"),
    "toolCalls": ("callId", "name", "turn", "step", "blockSeq", "durationMs", "outcome", "errorCode"),
}
USAGE_FIELDS = ("context", "cacheRead", "output", "cacheShare", "cost")


def _shown(view: JsonObject) -> JsonObject:
    """The timeline cut to PAGE_FIELDS (a key absent from a record stays absent)."""
    out = dict(view)
    for name, keys in PAGE_FIELDS.items():
        out[name] = [{key: record[key] for key in keys if key in record} for record in view[name]]
    for request in out["requests"]:
        if request["usage"] is not None:
            request["usage"] = {key: request["usage"][key] for key in USAGE_FIELDS}
    return out


def page_data(events: Sequence[Event], session: SessionRef, *, link: str = "{id}.html") -> JsonObject:
    """Everything the page shows, as one JSON object (also what the browser tests compare)."""
    view = _shown(timeline(events))
    header_seqs = [marker["seq"] for marker in view["markers"] if marker["kind"] == "header"]
    return {
        "session": {
            "id": session.session_id,
            "parent": session.parent_session_id,
            "forkSeq": session.fork_seq,
            "parentHref": link.format(id=session.parent_session_id) if session.parent_session_id else None,
            "children": [
                {"id": child, "forkSeq": seq, "href": link.format(id=child)} for child, seq in session.children
            ],
            "events": len(events),
            "atSeq": events[-1].seq if events else None,
        },
        **view,
        "headerPairs": header_pairs(events, header_seqs),
        "headerPairsComplete": len(header_seqs) <= MAX_HEADER_PAIRS,
        "transcript": transcript_rows(events),
    }


def _script_safe(text: str) -> str:
    """Script text that cannot end its <script> element early nor open an HTML comment in it
    (`<\\/` and `<\\!--` mean the same inside JavaScript strings and regular expressions)."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _json_safe(text: str) -> str:
    """JSON inside a <script> element: every `<` as `\\u003c` (only strings hold one), so
    session content such as `</script>` or `<!--<script>` can neither end the element nor
    switch the HTML parser into its escaped-script states."""
    return text.replace("<", "\\u003c")


def render_page(events: Sequence[Event], session: SessionRef, *, link: str = "{id}.html") -> str:
    """The self-contained HTML page of `events` (a log prefix from seq 0)."""
    uplot_css, app_css, uplot_js, app_js = (_asset(name) for name in ASSETS)
    data = _json(page_data(events, session, link=link))
    title = f"sessionlog · {session.session_id}"
    return TEMPLATE.format(
        title=_escape(title),
        css=uplot_css + "\n" + app_css,
        data=_json_safe(data),
        uplot=_script_safe(uplot_js),
        app=_script_safe(app_js),
    )


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


TEMPLATE = """<!doctype html>
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
<script type="application/json" id="sessionlog-data">{data}</script>
<script>{uplot}</script>
<script>{app}</script>
</body>
</html>
"""
