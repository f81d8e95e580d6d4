"""How fast does `sessionlog recompute` re-derive metrics? Prints MB/s on a generated corpus.

Generates N synthetic Pi v3 session files (seeded, realistic shapes: user prompts, assistant
messages with thinking, text and tool calls and usage, tool results with multi-KB outputs, CJK and
emoji text, occasional compactions with usage, model and thinking changes, a branch now and then)
plus a RUNS.jsonl whose recorded metrics are stale for a third of the runs, then runs the
`recompute` command in-process, end to end, and reports the throughput over session bytes.

    .venv/bin/python bench/recompute_speed.py [--files 300] [--seed 7] [--keep DIR]
    .venv/bin/python bench/recompute_speed.py --copies-of tests/fixtures/pi-generated/sessions

`--copies-of DIR` builds the corpus from copies of real session files instead (cycling over the
`*.jsonl` in DIR), which shows the cost of many small messages: synthetic files have longer
strings and parse faster per byte.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from sessionlog.cli.offline import register
from sessionlog.core.formats.replay import replay_file

WORDS = [
    "the", "build", "fails", "because", "parse", "returns", "early", "when", "the",
    "header", "has", "no", "version", "field", "修复", "分页", "评论", "😀",
]  # fmt: skip


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _usage(rng: random.Random) -> dict[str, Any]:
    inp, out, cache = rng.randint(100, 3000), rng.randint(10, 800), rng.randint(0, 20000)
    cost = round(inp * 3e-6 + out * 15e-6 + cache * 3e-7, 8)
    return {
        "input": inp,
        "output": out,
        "cacheRead": cache,
        "cacheWrite": 0,
        "totalTokens": inp + out + cache,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": cost},
    }


class _Writer:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[str] = []
        self.leaf: str | None = None
        self.ids: list[str] = []
        self.clock = 1_757_900_000_000

    def add(self, kind: str, **fields: Any) -> str:
        entry_id = f"{self.rng.getrandbits(32):08x}"
        self.clock += self.rng.randint(200, 9000)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.clock / 1000)) + f".{self.clock % 1000:03d}Z"
        entry = {"type": kind, "id": entry_id, "parentId": self.leaf, "timestamp": stamp, **fields}
        self.lines.append(json.dumps(entry, ensure_ascii=False, separators=(",", ":")))
        self.leaf = entry_id
        self.ids.append(entry_id)
        return entry_id

    def message(self, role: str, **fields: Any) -> str:
        return self.add("message", message={"role": role, **fields, "timestamp": self.clock})


def generate_session(rng: random.Random, index: int) -> str:
    """One synthetic session file (text), about 10 to 150 KB."""
    writer = _Writer(rng)
    header = {
        "type": "session",
        "version": 3,
        "id": f"bench-{index:04d}",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/home/me/bench",
    }
    writer.add("model_change", provider="anthropic", modelId="claude-sonnet-4-5")
    writer.add("thinking_level_change", thinkingLevel=rng.choice(["off", "low", "medium", "high"]))
    for _ in range(rng.randint(2, 12)):
        first = writer.message("user", content=[{"type": "text", "text": _text(rng, rng.randint(5, 60))}])
        for _ in range(rng.randint(1, 6)):
            calls = [
                {
                    "type": "toolCall",
                    "id": f"call_{rng.getrandbits(40):x}",
                    "name": "bash",
                    "arguments": {"command": _text(rng, 4)},
                }
                for _ in range(rng.randint(0, 3))
            ]
            content = [
                {"type": "thinking", "thinking": _text(rng, rng.randint(0, 80))},
                {"type": "text", "text": _text(rng, rng.randint(5, 120))},
                *calls,
            ]
            writer.message(
                "assistant",
                content=content,
                api="anthropic-messages",
                provider="anthropic",
                model="claude-sonnet-4-5",
                usage=_usage(rng),
                stopReason="toolUse" if calls else "stop",
            )
            for call in calls:
                writer.message(
                    "toolResult",
                    toolCallId=call["id"],
                    toolName="bash",
                    isError=rng.random() < 0.1,
                    content=[{"type": "text", "text": _text(rng, rng.randint(20, 900))}],
                )
            if not calls:
                break
        if rng.random() < 0.15:
            writer.add(
                "compaction",
                summary=_text(rng, 200),
                firstKeptEntryId=first,
                tokensBefore=rng.randint(9000, 90000),
                details={"readFiles": [], "modifiedFiles": []},
                usage=_usage(rng),
            )
        if rng.random() < 0.1 and len(writer.ids) > 4:
            writer.leaf = writer.ids[-4]  # branch: continue from an earlier entry
    return json.dumps(header) + "\n" + "\n".join(writer.lines) + "\n"


def build_corpus(directory: Path, files: int, seed: int, copies_of: Path | None = None) -> tuple[Path, int]:
    """Write the sessions and RUNS.jsonl; return the runs path and the session bytes."""
    rng = random.Random(seed)
    sessions = directory / "sessions"
    sessions.mkdir(parents=True)
    sources = sorted(copies_of.glob("*.jsonl")) if copies_of is not None else []
    runs: list[str] = []
    total = 0
    for index in range(files):
        name = f"run{index:04d}.jsonl"
        data = sources[index % len(sources)].read_bytes() if sources else generate_session(rng, index).encode()
        (sessions / name).write_bytes(data)
        total += len(data)
        metrics = {k: v for k, v in replay_file(sessions / name).metrics.items() if v is not None}
        if index % 3 == 0:  # a metrics bug: cost missed the compaction usage
            metrics["costUsd"] = round(metrics["costUsd"] * 0.9, 6)
        runs.append(
            json.dumps(
                {"run_id": f"r{index:04d}", "experiment": f"e{index % 4}", "session_file": name, "metrics": metrics}
            )
        )
    path = directory / "runs.jsonl"
    path.write_text("\n".join(runs) + "\n", encoding="utf-8")
    return path, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the best is reported")
    parser.add_argument("--keep", type=Path, help="write the corpus here and keep it")
    parser.add_argument("--copies-of", type=Path, help="build the corpus from copies of the session files here")
    args = parser.parse_args()

    directory = args.keep or Path(tempfile.mkdtemp(prefix="recompute-bench-"))
    try:
        runs, total = build_corpus(directory, args.files, args.seed, args.copies_of)
        app = typer.Typer()
        register(app)
        best = float("inf")
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = CliRunner().invoke(app, ["recompute", str(runs), "--sessions", str(directory / "sessions")])
            best = min(best, time.perf_counter() - started)
            if result.exit_code != 0:
                raise SystemExit(result.output)
        changed = next(line for line in result.output.splitlines() if "differ" in line)
        origin = f"copies of {args.copies_of}" if args.copies_of else "synthetic"
        print(f"corpus: {args.files} Pi session files ({origin}), {total / 1e6:.1f} MB ({changed})")
        print(f"recompute end to end: best of {args.repeat}: {best:.2f} s = {total / 1e6 / best:.1f} MB/s")
    finally:
        if args.keep is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
