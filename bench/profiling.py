"""Profile the server process with py-spy while a workload runs, and summarise the samples.

py-spy attaches to the running `sessionlog serve` process from outside (no code change, low
overhead) and writes collapsed stacks ("frame;frame;frame count" per line). The summary
ranks functions by self samples (where the CPU was) and by inclusive samples (what the time
was spent under), labelled `file:function` relative to the repository or site-packages.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def py_spy_path() -> str | None:
    """The py-spy executable next to this interpreter, or on PATH."""
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


def start_py_spy(pid: int, seconds: float, out: Path, rate: int = 200, gil: bool = True) -> subprocess.Popen[bytes]:
    """Start sampling `pid` for `seconds` into `out` (raw collapsed stacks); returns the process.

    With `gil`, only the thread holding the GIL is sampled: in a Python server that is where
    the CPU goes, and idle pool threads (which py-spy cannot always tell from busy ones) drop
    out of the picture.
    """
    exe = py_spy_path()
    if exe is None:
        raise FileNotFoundError("py-spy is not installed (pip install -e '.[bench]')")
    return subprocess.Popen(
        py_spy_command(exe, pid, seconds, out, rate, gil), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def py_spy_command(exe: str, pid: int, seconds: float, out: Path, rate: int, gil: bool) -> list[str]:
    """The `py-spy record` command line of `start_py_spy`."""
    cmd = [exe, "record", "-p", str(pid), "-d", str(max(1, round(seconds))), "-r", str(rate), "-f", "raw"]
    return [*cmd, "-o", str(out), *(["--gil"] if gil else [])]


@contextmanager
def recording(pid: int, out: Path, rate: int = 250) -> Iterator[Path]:
    """Sample `pid` (all threads) into `out` while the block runs; SIGINT ends py-spy, which
    then writes the collapsed stacks."""
    exe = py_spy_path()
    if exe is None:
        raise FileNotFoundError("py-spy is not installed (pip install -e '.[bench]')")
    cmd = [exe, "record", "-p", str(pid), "-r", str(rate), "-f", "raw", "-o", str(out), "--nonblocking"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # py-spy needs a moment to attach before the work starts
    try:
        yield out
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _label(frame: str) -> str:
    match = FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match.group("file")
    for marker in ("site-packages/", "/server/", "/client/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{match.group('func')}"


Buckets = tuple[tuple[str, tuple[str, ...]], ...]


def summarise(collapsed: Path, top: int = 25, buckets: Buckets = ()) -> dict[str, Any]:
    """Top functions by self and inclusive share of the samples in a py-spy raw file, the
    project's own functions by inclusive share, and, given `buckets` (name, file markers), the
    share of samples whose innermost frame falls in each (first match wins, else "other")."""
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    project: Counter[str] = Counter()
    in_bucket: Counter[str] = Counter()
    total = 0
    text = collapsed.read_text(errors="replace") if collapsed.exists() else ""
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_label(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        self_counts[frames[-1]] += count
        if buckets:
            name = next((name for name, keys in buckets if any(k in frames[-1] for k in keys)), "other")
            in_bucket[name] += count
        for frame in set(frames):
            incl_counts[frame] += count
            if frame.startswith(("sessionlog/", "sessionlog_server/")) and "cli/" not in frame:
                project[frame] += count

    def ranked(counter: Counter[str], limit: int = top) -> list[dict[str, Any]]:
        return [
            {"function": name, "samples": n, "pct": round(100 * n / max(total, 1), 1)}
            for name, n in counter.most_common(limit)
        ]

    out = {
        "samples": total,
        "self": ranked(self_counts),
        "inclusive": ranked(incl_counts),
        "project_inclusive": ranked(project),
    }
    if buckets:
        out["buckets"] = ranked(in_bucket, len(buckets) + 1)
    return out
