"""What one proposed JSON payload costs the event loop to decode: a figure, not a test.

    .venv/bin/python -m bench.json_decode [--passes 3] [--only NAME ...]

`jsonvalue.loads_proposed` (what the service does to an event's data, a reported header or a
session's metadata, on the event loop every session of a worker shares) of the costliest
payloads per byte and per value: ~63 MB texts, and the costliest shape at `max_json_values`.
Prints thread CPU seconds (best of `--passes`) and what became of each (accepted, or the error
reason), then the bench workload's ~2 KB events in µs each. Thread CPU, not wall time: other
processes slow a run down but do not add to it. To compare two revisions, run it in each (a
`git worktree` of the base, with its own `PYTHONPATH`), alternating. Asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

from bench.workload import as_new_events, session_events
from sessionlog import convert
from sessionlog.core import jsonvalue
from sessionlog.core.errors import ValidationError
from sessionlog.core.limits import DEFAULT_LIMITS

#: An integer past 64 bits: orjson cannot decode it, so the whole text goes to the standard
#: library's decoder, several times slower per value.
BIG = b"123456789012345678901234"
MEGABYTES = 63


def _keys(count: int, big: bool = False) -> bytes:
    """One object of `count` distinct keys (and `big`, an integer past 64 bits, last)."""
    members = b",".join(b'"k%07d":1' % i for i in range(count - 1 if big else count))
    return b"{" + members + (b',"big":' + BIG if big else b"") + b"}"


def _floats(count: int) -> bytes:
    return b'{"a":[' + b",".join([b"1.5"] * count) + b"]}"


def _string(unit: str) -> bytes:
    """One string of ~63 MB of `unit` repeated."""
    text = (unit * (MEGABYTES * 1_000_000 // len(unit.encode()))).encode()
    return b'{"s":"' + text + b'"}'


LIMIT = DEFAULT_LIMITS.max_json_values
PAYLOADS: dict[str, Callable[[], bytes]] = {
    "4.5M keys": lambda: _keys(4_500_000),
    "4.5M keys + big integer": lambda: _keys(4_500_000, big=True),
    "15.75M floats": lambda: _floats(15_750_000),
    "63 MB CJK string": lambda: _string("中文字符"),
    "63 MB prose string (commas counted)": lambda: _string("one, two, three, "),
    f"{LIMIT:,} keys + big integer (at max_json_values)": lambda: _keys(LIMIT, big=True),
}


def decode_seconds(text: bytes, passes: int) -> tuple[float, str]:
    """Best thread CPU seconds of `loads_proposed(text)` over `passes`, and its outcome."""
    best, outcome = float("inf"), ""
    for _ in range(passes):
        gc.collect()
        start = time.thread_time()
        try:
            jsonvalue.loads_proposed(text)
            outcome = "accepted"
        except ValidationError as exc:
            outcome = exc.reason
        best = min(best, time.thread_time() - start)
    return best, outcome


def event_us(passes: int, events: int = 5000) -> tuple[float, float]:
    """The workload's first `events` events' data: mean bytes, and best thread CPU µs each."""
    texts = [convert.new_event_to_pb(e).data_json for e in as_new_events(session_events(events), "ev")]
    best = float("inf")
    for _ in range(passes):
        start = time.thread_time()
        for text in texts:
            jsonvalue.loads_proposed(text)
        best = min(best, time.thread_time() - start)
    return sum(map(len, texts)) / len(texts), 1e6 * best / len(texts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=3, help="runs of each payload; the best counts")
    parser.add_argument("--only", nargs="*", default=None, help="payloads whose name contains one of these")
    args = parser.parse_args(argv)
    for name, build in PAYLOADS.items():
        if args.only is not None and not any(part in name for part in args.only):
            continue
        text = build()
        seconds, outcome = decode_seconds(text, args.passes)
        print(f"{name} ({len(text) / 1e6:.1f} MB): {seconds:.2f} s, {outcome}", flush=True)
    if args.only is None or any(part in "2 KB events" for part in args.only):
        size, micros = event_us(max(args.passes, 7))
        print(f"2 KB events ({size:,.0f} bytes on average): {micros:.2f} µs each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
