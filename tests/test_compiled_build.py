"""The compiled build (docs/architecture/compiled-build.md): which modules are compiled where.

Under `make test-compiled` (SESSIONLOG_TEST_BUILD=compiled) every module setup.py lists must
be a compiled extension in the installed package; under `make test` (the source tree, an
editable install) none is; a module not listed (the servicer) is interpreted in both. And the
guard `make serve` and `make test` run refuses a source tree holding a compiled module.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from sessionlog.core.events import Event, Replace
from sessionlog.core.tool_calls import ToolCallState

ROOT = Path(__file__).resolve().parents[1]


def _setup_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sessionlog_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its setup() runs only as __main__
    return module


def _module_name(path: str) -> str:
    """`client/sessionlog/core/fold.py` -> `sessionlog.core.fold`."""
    return ".".join(Path(path).with_suffix("").parts[1:])


def test_the_listed_modules_are_compiled_in_the_compiled_build_only() -> None:
    listed = _setup_module().COMPILED_MODULES
    assert listed and all((ROOT / path).is_file() for path in listed), "setup.py lists a module that does not exist"
    compiled_build = os.environ.get("SESSIONLOG_TEST_BUILD") == "compiled"
    for path in listed:
        module = importlib.import_module(_module_name(path))
        file = str(module.__file__)
        assert file.endswith(".so") == compiled_build, f"{_module_name(path)} runs from {file}"
    # One not listed (it holds async generators) stays interpreted in both builds.
    servicer = importlib.import_module("sessionlog_server.transport.servicer")
    assert str(servicer.__file__).endswith(".py")


def _awaits_while_handling(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a coroutine of `tree` awaits while it handles an exception: an await, `async for`
    or `async with` inside an `except` or `finally` block, and an `async with` over anything but a
    lock or semaphore held in a name or attribute (`live.lock`, `gate`) or `asyncio.timeout(...)`,
    whose exits do not suspend: any other's exit may await while the block's exception leaves."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Try | ast.TryStar):
            blocks = [handler.body for handler in node.handlers] + [node.finalbody]
            for statement in (statement for block in blocks for statement in block):
                for inner in ast.walk(statement):
                    if isinstance(inner, ast.Await | ast.AsyncFor | ast.AsyncWith):
                        found.append((inner.lineno, f"in an except or finally block: {ast.unparse(inner)[:60]}"))
        if isinstance(node, ast.AsyncWith):
            for item in node.items:
                manager = item.context_expr
                plain = isinstance(manager, ast.Name | ast.Attribute)
                timeout = isinstance(manager, ast.Call) and ast.unparse(manager.func) == "asyncio.timeout"
                if not (plain or timeout):
                    found.append((node.lineno, f"async with {ast.unparse(manager)[:60]}"))
    return found


def test_no_compiled_coroutine_awaits_while_it_handles_an_exception() -> None:
    """Compiled (mypyc), the exception a coroutine is handling lives in its thread's state, not in
    the coroutine: resumed after an await in the handler, it re-raises (a bare `raise`, the end of
    a `finally`, an `async with` whose exit did not suppress) whatever another coroutine left
    there: another's exception, or None, which overwrites `type(None)` and crashes the process
    later (docs/architecture/compiled-build.md). The listed modules await outside handlers."""
    offending = [
        f"{path}:{line}: {what}"
        for path in _setup_module().COMPILED_MODULES
        for line, what in _awaits_while_handling(ast.parse((ROOT / path).read_text(), path))
    ]
    assert offending == []


def test_the_await_check_sees_each_form() -> None:
    source = """
async def f(lease, live, gate):
    try:
        await g()
    except E:
        await h()
    try:
        pass
    finally:
        async for x in y():
            pass
    async with lease.hold():
        pass
    async with live.lock, gate, asyncio.timeout(1):
        pass
"""
    assert [line for line, _ in _awaits_while_handling(ast.parse(source))] == [6, 10, 12]


def test_a_source_tree_holding_a_compiled_module_is_refused(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "client" / "sessionlog").mkdir(parents=True)
    (tree / "server").mkdir()
    (tree / "client" / "sessionlog" / "fold.py").write_text("")
    guard = ["bash", str(ROOT / "scripts" / "check_pure_tree.sh"), str(tree)]
    assert subprocess.run(guard, capture_output=True, text=True, check=False).returncode == 0
    (tree / "client" / "sessionlog" / "fold.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    refused = subprocess.run(guard, capture_output=True, text=True, check=False)
    assert refused.returncode == 1
    assert "fold.cpython-311-x86_64-linux-gnu.so" in refused.stderr
    assert "shadow their .py files" in refused.stderr


def _written_inits() -> list[type]:
    """The dataclasses of the listed modules whose `__init__` is written out (`init=False`)."""
    found: list[type] = []
    for path in _setup_module().COMPILED_MODULES:
        module = importlib.import_module(_module_name(path))
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and value.__module__ == module.__name__
                and dataclasses.is_dataclass(value)
                and not value.__dataclass_params__.init  # type: ignore[attr-defined]
            ):
                found.append(value)
    return found


def test_a_written_out_init_takes_and_sets_the_fields_as_the_generated_one_would() -> None:
    """Compiled, the `__init__` `dataclass` writes stays interpreted (~1 µs a record), so the
    records built for every event write theirs out (`sessionlog.core.events.NewEvent`). Each
    must take the fields in order with their defaults (a default factory's as None) and set
    every one: a field added to the class but not to its `__init__` fails here."""
    if os.environ.get("SESSIONLOG_TEST_BUILD") == "compiled":
        pytest.skip("a compiled method has no signature to read; the source is checked interpreted")
    classes = _written_inits()
    names = {cls.__name__ for cls in classes}
    assert names >= {"NewEvent", "Event", "DecodedEvent", "_Plan", "AppendPlan", "SurfacePlan", "CostSum"}
    for cls in classes:
        fields = [f for f in dataclasses.fields(cls) if f.init]
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        assert [p.name for p in params] == [f.name for f in fields], cls
        given: dict[str, object] = {}
        for field, param in zip(fields, params, strict=True):
            assert param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, (cls, field.name)
            if field.default is not dataclasses.MISSING:
                assert param.default == field.default, (cls, field.name)
            elif field.default_factory is not dataclasses.MISSING:
                assert param.default is None, (cls, field.name)
            else:
                assert param.default is inspect.Parameter.empty, (cls, field.name)
                given[field.name] = object()
        first, second = cls(**given), cls(**given)
        for field in dataclasses.fields(cls):
            value = getattr(first, field.name)
            if field.name in given:
                assert value is given[field.name], (cls, field.name)
            elif field.default_factory is not dataclasses.MISSING:
                assert value == field.default_factory() and value is not getattr(second, field.name), (cls, field.name)
            else:
                assert value == field.default, (cls, field.name)


def test_the_written_out_copies_keep_every_field_they_do_not_set() -> None:
    """The per-event copies are built field by field (`dataclasses.replace` stays interpreted):
    each must be what `replace` gives, every field set apart from the default, so a field added
    to the class and not to a copy fails here."""
    call = ToolCallState("c1", "bash", 1, 2, 3, 4, 5, False, (6,), (7,))
    assert all(getattr(call, f.name) != f.default for f in dataclasses.fields(ToolCallState))
    assert call.with_seqs(8, 9) == dataclasses.replace(call, call_seq=8, result_seq=9)
    assert call.carried(10, (11,), True, (7, 10)) == dataclasses.replace(
        call, block_seq=10, copies=(11,), on_surface=True, carried_by=(7, 10)
    )
    event = Event(1, 2, "custom", {"a": 1}, "e1", True, Replace(0, 0), (0,), "{ }", 9)
    assert all(getattr(event, f.name) != f.default for f in dataclasses.fields(Event))
    stored = event.with_data_text('{"a":1}')
    for field in dataclasses.fields(Event):  # `==` leaves data_text and stored_size out
        expected = '{"a":1}' if field.name == "data_text" else getattr(event, field.name)
        assert getattr(stored, field.name) == expected, field.name
