"""How much session data a session page embeds: a figure, not a test.

    .venv/bin/python -m bench.page_json [--events 200000] [--scale 0.05] [--whole]

Renders the page of one synthetic session of about `--events` events (the workload's turns at
`--scale` of their text, a compaction every 40 turns: `bench.long_sessions.session_log`, the
session `bench.page_memory` serves) with `render_parts`, the events made as the render reads
them: windowed past WINDOW_EVENTS, as `/sessions/ID` serves it, or with `--whole` every part
embedded, as `sessionlog view` writes it (and as the server did before pages were windowed).
Prints the page's size and the bytes of JSON in its data elements (what the browser parses
and holds), and the time the render took. Asserts nothing.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Iterator
from typing import Any

from bench.long_sessions import session_log
from sessionlog.core.events import Event
from sessionlog.view.page import SessionRef, render_parts, windowed
from sessionlog.view.windows import WindowStore

DATA_ELEMENT = re.compile(r'<script type="application/json"[^>]*>(.*?)</script>', re.DOTALL)


def events_of(count: int, scale: float) -> Iterator[Event]:
    """The bench session's events, committed one by one (never all held)."""
    for seq, event in enumerate(session_log(count, scale, True, seed=7)):
        yield event.committed(seq, 1_800_000_000_000 + seq * 250)


def measure(count: int, scale: float, *, whole: bool = False) -> dict[str, Any]:
    """Render the page of `count` events (windowed as the server's past WINDOW_EVENTS, unless
    `whole`); its size and the JSON its data elements hold."""
    started = time.perf_counter()
    page = json_bytes = elements = events = 0

    def counted() -> Iterator[Event]:
        nonlocal events
        for event in events_of(count, scale):
            events += 1
            yield event

    with WindowStore() as store:
        kept = store if windowed(count) and not whole else None
        for text in render_parts(counted(), SessionRef("page-json"), store=kept):
            page += len(text.encode("utf-8"))
            for found in DATA_ELEMENT.findall(text):
                json_bytes += len(found.encode("utf-8"))
                elements += 1
        store_bytes = store.stored_bytes() if kept is not None else 0
    return {
        "windowed": kept is not None,
        "events": events,
        "page_mb": round(page / 1e6, 2),
        "embedded_json_mb": round(json_bytes / 1e6, 3),
        "data_elements": elements,
        "store_mb": round(store_bytes / 1e6, 1),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--scale", type=float, default=0.05, help="text scale of the workload's turns")
    parser.add_argument("--whole", action="store_true", help="embed every part (sessionlog view's file)")
    args = parser.parse_args()
    figures = measure(args.events, args.scale, whole=args.whole)
    print(
        f"{figures['events']:,} events, {'windowed' if figures['windowed'] else 'whole'}: "
        f"page {figures['page_mb']} MB, embedded JSON "
        f"{figures['embedded_json_mb']} MB in {figures['data_elements']} data elements"
        + (f", window store {figures['store_mb']} MB on disk" if figures["windowed"] else "")
        + f"; rendered in {figures['seconds']} s"
    )


if __name__ == "__main__":
    main()
