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
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

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

    # One C file per module (multi_file), so ParallelBuildExt compiles them on every core.
    return list(mypycify(COMPILED_MODULES, opt_level="3", debug_level="0", multi_file=True))


_CORES = os.cpu_count() or 1


class ParallelBuildExt(build_ext):
    """build_ext compiling C files side by side within an extension too, one gcc per core.

    mypyc puts every compiled module into one extension (its shared library) of ~70 C files,
    beside a small extension per module that imports it; distutils compiles an extension's files
    one after another, and build_ext's `parallel` option only builds different extensions side
    by side, so the big one's files took ~60 s of the build's ~85 on one of two cores. Here each
    extension's files are compiled from threads, every gcc process taking one of `_CORES` slots
    whichever extension it is for. The compiler's `_setup_compile` and `_compile` are the steps
    its own `compile` takes (what a compiler class implements); the threads only wait on gcc.
    """

    def build_extensions(self) -> None:
        compiler = self.compiler
        gcc_slots = threading.BoundedSemaphore(_CORES)

        def compile_side_by_side(
            sources: list[str],
            output_dir: str | None = None,
            macros: Any = None,
            include_dirs: list[str] | None = None,
            debug: bool = False,
            extra_preargs: list[str] | None = None,
            extra_postargs: list[str] | None = None,
            depends: list[str] | None = None,
        ) -> list[str]:
            macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs
            )
            cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

            def compile_one(obj: str) -> None:
                source, extension = build[obj]
                with gcc_slots:
                    compiler._compile(obj, source, extension, cc_args, extra_postargs, pp_opts)

            with ThreadPoolExecutor(_CORES) as pool:
                list(pool.map(compile_one, [obj for obj in objects if obj in build]))
            return list(objects)

        compiler.compile = compile_side_by_side
        super().build_extensions()


if __name__ == "__main__":  # as setuptools runs it; tests import the list alone
    setup(
        ext_modules=_ext_modules(),
        cmdclass={"build_ext": ParallelBuildExt},
        options={"build_ext": {"parallel": _CORES}},  # the extensions side by side as well
    )
