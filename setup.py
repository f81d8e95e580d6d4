"""Build hook: with SESSIONLOG_MYPYC=1, compile the append path's modules with mypyc.

The default wheel and sdist stay pure Python, so the client installs everywhere. With
SESSIONLOG_MYPYC=1 this builds the compiled build the image runs and `make bench` measures
(`scripts/build_compiled_wheel.sh`): mypyc turns these typed modules into C extensions, which
cuts the server's CPU per streamed event by about a quarter (bench/PROFILE.md, rounds 28-36). The list
is the append path's modules that mypyc compiles and whose tests pass compiled; what stays
interpreted and why is in docs/architecture/compiled-build.md. Never build this in place
(`pip install -e`): a `.so` beside a `.py` shadows every later edit of it, so `make serve` and
`make test` refuse a tree holding one.
"""

from __future__ import annotations

import os

from setuptools import setup

COMPILED_MODULES = [
    "client/sessionlog/convert.py",
    *(
        f"client/sessionlog/core/{name}.py"
        for name in (
            "clock",
            "costs",
            "events",
            "fold",
            "headers",
            "jsonvalue",
            "limits",
            "messages",
            "repair",
            "snapshot",
            "structure",
            "surface",
            "tool_calls",
            "usage",
            "validate",
            "vocabulary",
        )
    ),
    *(
        f"client/sessionlog/core/projections/{name}.py"
        for name in ("model_history", "request", "stats", "timeline", "transcript")
    ),
    *(
        f"server/sessionlog_server/service/{name}.py"
        for name in (
            "access",
            "append",
            "appends",
            "backlog",
            "clock",
            "committer",
            "headers",
            "leases",
            "lifecycle",
            "limits",
            "live",
            "loop_series",
            "messages",
            "metrics",
            "page_tokens",
            "session_lock",
            "sessions",
            "taken_ids",
            "writer_stream",
        )
    ),
    *(
        f"server/sessionlog_server/storage/{name}.py"
        for name in ("database_file", "driver", "group_commit", "postgres_group", "records", "rows", "writer_turn")
    ),
    *(
        f"server/sessionlog_server/transport/{name}.py"
        for name in ("decoding", "replies", "request_fields", "writer_rpc")
    ),
]


def _ext_modules() -> list[object]:
    """The compiled extensions when SESSIONLOG_MYPYC=1, else none (a pure-Python wheel)."""
    if os.environ.get("SESSIONLOG_MYPYC") != "1":
        return []
    from mypyc.build import mypycify  # only the compiled build needs mypy installed

    # One C file per module (multi_file), so build_ext compiles them on every core.
    return list(mypycify(COMPILED_MODULES, opt_level="3", debug_level="0", multi_file=True))


if __name__ == "__main__":  # as setuptools runs it; tests import the list alone
    setup(ext_modules=_ext_modules(), options={"build_ext": {"parallel": os.cpu_count() or 1}})
