"""Time to first paint of a 100k-event session's page (issue 14): a figure, not a test.

    .venv/bin/python -m bench.view_paint [--events 100000] [--runs 3]

Builds a synthetic session in memory (every event checked by `SessionFold`, as the service
would): turns of three model calls with tool calls, a compaction every 400 turns and a header
change every 1,000, usage on every call. Then it renders the page with `render_page` (what
`sessionlog view` and `/sessions/ID` do after reading the events), and opens the file in
Debian's headless Chromium (tests/support/browser.py) to read the browser's own timings:
first contentful paint, and the `sessionlog-ready` mark the page's script sets when every
section is drawn. Prints one table; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sessionlog.core.events import Event, NewEvent, Replace
from sessionlog.core.fold import SessionFold
from sessionlog.view.page import SessionRef, render_page
from tests.support.browser import chromium

TOOLS = [{"name": "bash", "description": "Run a command", "parameters": {"type": "object"}}]


def _usage(context: int, cached: int, output: int) -> dict[str, Any]:
    fresh = context - cached
    cost = fresh * 1e-6 + cached * 1e-7 + output * 4e-6
    return {"input": fresh, "output": output, "cacheRead": cached, "cacheWrite": 0, "cost": {"total": cost}}


class SyntheticSession:
    """A valid log of about `n` events, built turn by turn."""

    def __init__(self) -> None:
        self.fold = SessionFold()
        self.events: list[Event] = []
        self.surface: list[int] = []
        self.context = 800

    def add(self, kind: str, data: dict[str, Any], op: Any = None, sources: tuple[int, ...] = ()) -> int:
        seq = len(self.events)
        event = NewEvent(type=kind, data=data, surface_op=op, source_event_seqs=sources).committed(
            seq, 1_700_000_000_000 + seq * 350
        )
        self.fold.apply(event)
        self.events.append(event)
        if op == "append":
            self.surface.append(seq)
        elif isinstance(op, Replace):
            start = self.surface.index(op.start_seq)
            self.surface[start:] = [seq]
        return seq

    def header(self, turn: int, reason: str) -> None:
        config = {"provider": "acme", "model": "m-1", "temperature": turn // 1000}
        self.add("request/header", {"header": {"config": config, "tools": TOOLS}, "reason": reason})

    def turn(self, turn: int) -> None:
        self.add("user/message", {"message": {"role": "user", "content": f"task {turn}: " + "do it " * 20}}, "append")
        self.add("turn/start", {"turn": turn})
        for step in (1, 2, 3):
            self.add("step/start", {"turn": turn, "step": step})
            cached = self.context if step > 1 else self.context // 2
            self.context += 180
            call = f"t{turn}s{step}"
            content: list[dict[str, Any]] = [{"type": "text", "text": "Looking at it. " * 5}]
            if step < 3:
                content.append({"type": "toolCall", "id": call, "name": "bash", "arguments": {"command": "ls -la"}})
            message = {"role": "assistant", "content": content}
            data = {"turn": turn, "step": step, "message": message, "usage": _usage(self.context, cached, 60)}
            self.add("assistant/message", data, "append")
            if step < 3:
                self.add("tool/call", {"turn": turn, "step": step, "callId": call, "name": "bash", "arguments": "{}"})
                result = {"role": "toolResult", "toolCallId": call, "content": [{"type": "text", "text": "ok " * 40}]}
                self.add(
                    "tool/result",
                    {"turn": turn, "step": step, "message": {**result, "isError": step == 2 and turn % 7 == 0}},
                    "append",
                )
            self.add("step/end", {"turn": turn, "step": step})
        self.add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})

    def compaction(self) -> None:
        usage = _usage(self.context, 0, 400)
        self.add(
            "compaction/summary",
            {"summary": "so far", "provider": "acme", "model": "m-1", "usage": usage, "tokensBefore": self.context},
        )
        replaced = tuple(self.surface[1:])
        message = {"role": "user", "content": "Summary of the work so far."}
        op = Replace(replaced[0], replaced[-1])
        self.add("user/message", {"message": message, "source": {"kind": "compaction"}}, op, replaced)
        self.context = 1200


def build(n: int) -> list[Event]:
    session = SyntheticSession()
    session.header(0, "initial")
    session.add("system/message", {"message": {"role": "system", "content": "You are a coding agent."}}, "append")
    turn = 0
    while len(session.events) < n:
        turn += 1
        if turn % 1000 == 0:
            session.header(turn, "change")
        session.turn(turn)
        if turn % 400 == 0:
            session.compaction()
            session.header(turn, "series") if turn % 1000 else None
    return session.events


def measure(path: Path, runs: int) -> list[dict[str, float]]:
    out = []
    with chromium() as driver:
        for _ in range(runs):
            started = time.perf_counter()
            driver.get(path.as_uri())
            loaded = time.perf_counter() - started
            timings = driver.execute_script(
                "const p = performance.getEntriesByName('first-contentful-paint')[0];"
                "const r = performance.getEntriesByName('sessionlog-ready')[0];"
                "const n = performance.getEntriesByType('navigation')[0];"
                "return [p ? p.startTime : -1, r ? r.startTime : -1, n.domContentLoadedEventEnd];"
            )
            out.append({"fcp": timings[0], "ready": timings[1], "dcl": timings[2], "get": loaded * 1000})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    started = time.perf_counter()
    events = build(args.events)
    built = time.perf_counter() - started
    started = time.perf_counter()
    html = render_page(events, SessionRef("bench-100k"))
    rendered = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench-100k.html"
        path.write_text(html, encoding="utf-8")
        runs = measure(path, args.runs)
    median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    print(f"session: {len(events):,} events (built and checked in {built:.1f} s)")
    print(f"render_page: {rendered * 1000:,.0f} ms, page {len(html.encode()) / 1e6:.1f} MB")
    print(
        f"chromium (median of {len(runs)}): first contentful paint {median['fcp']:,.0f} ms, "
        f"page script done {median['ready']:,.0f} ms, DOMContentLoaded {median['dcl']:,.0f} ms, "
        f"driver.get {median['get']:,.0f} ms"
    )


if __name__ == "__main__":
    main()
