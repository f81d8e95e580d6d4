"""The `ErrorReason` catalogue (proto/sessionlog/v1/error_reason.proto) matches the sources.

The sources are scanned as tests/core/test_rejections.py does for the fold's reasons: every
construction of a sessionlog error names its reason as a literal, so the set of reasons the
server, the core, the file readers and the clients can raise is known statically. Each must be
catalogued with the code its class travels as, the metadata keys it is raised with and the
places it comes from; the catalogue lists nothing that cannot be raised; docs/errors.md is
what scripts/gen_error_docs.py renders from it. At run time, status.py sends an uncatalogued
reason as INTERNAL.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import grpc
from google.rpc import code_pb2, error_details_pb2, status_pb2

from sessionlog.core import errors as core_errors
from sessionlog.errors import ServerError
from sessionlog.v1 import error_reason_pb2
from sessionlog_server.transport.status import CATALOGUE, to_status

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (ROOT / "client" / "sessionlog", ROOT / "server" / "sessionlog_server")

#: Reasons built at run time, by the text of the expression that builds them.
DYNAMIC = {"f'BAD_{name.upper()}_NUMBER'": ("BAD_TURN_NUMBER", "BAD_STEP_NUMBER")}
#: Keys every reason may carry besides its own (see the enum's comment).
COMMON_KEYS = {"event_index", "line", "seq", "entry"}
#: Reasons raised without a call site: INTERNAL is what status.py sends for a bug.
IMPLICIT = {"INTERNAL"}

_CLASSES: tuple[type[core_errors.SessionLogError], ...] = (*core_errors.ERROR_CLASSES, ServerError)
ERROR_CODES: dict[str, str] = {cls.__name__: cls.code for cls in _CLASSES}
ERROR_CODES["SessionLogError"] = core_errors.SessionLogError.code


@dataclass
class Raised:
    """What the sources do with one reason."""

    codes: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    places: set[str] = field(default_factory=set)
    sites: list[str] = field(default_factory=list)


def _place(path: Path) -> str:
    rel = path.relative_to(ROOT).as_posix()
    if rel.startswith("server/"):
        return "service"
    if "/core/formats/" in rel or "/cli/" in rel:
        return "files"
    return "core" if "/core/" in rel else "client"


def _reasons_of(arg: ast.expr | None, where: str, unknown: list[str]) -> tuple[str, ...]:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return (arg.value,)
    if isinstance(arg, ast.Attribute) and arg.attr == "reason":
        return ()  # re-raising a caught error's reason: catalogued where it was first raised
    text = ast.unparse(arg) if arg is not None else "<default reason>"
    if text in DYNAMIC:
        return DYNAMIC[text]
    unknown.append(f"{where}: reason {text}")
    return ()


def scan() -> tuple[dict[str, Raised], list[str]]:
    """Every reason the sources raise, and the call sites whose reason cannot be read."""
    raised: dict[str, Raised] = defaultdict(Raised)
    unknown: list[str] = []
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            if "v1" in path.relative_to(root).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if name not in ERROR_CODES:
                    continue
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "reason"), None)
                for reason in _reasons_of(arg, where, unknown):
                    entry = raised[reason]
                    entry.codes.add(ERROR_CODES[name])
                    entry.keys |= {k.arg for k in node.keywords if k.arg not in (None, "message", "reason")}
                    entry.places.add(_place(path))
                    entry.sites.append(where)
    return raised, unknown


def _gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_error_docs", ROOT / "scripts" / "gen_error_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


GEN = _gen_docs()
CATALOGUED = {r.name: r for r in GEN.parse(GEN.PROTO.read_text())}


def test_every_raised_reason_is_catalogued() -> None:
    raised, unknown = scan()
    assert unknown == [], "give these errors a literal reason (or list the expression in DYNAMIC)"
    assert len(raised) > 100, "the scan found too few reasons: did the error classes move?"
    missing = {reason: entry.sites for reason, entry in raised.items() if reason not in CATALOGUED}
    assert missing == {}, "add these reasons to proto/sessionlog/v1/error_reason.proto"


def test_the_catalogue_lists_only_raisable_reasons() -> None:
    raised, _ = scan()
    assert set(CATALOGUED) - set(raised) - IMPLICIT == set()


def test_each_reason_is_documented_with_its_code_keys_and_places() -> None:
    raised, _ = scan()
    for reason, entry in raised.items():
        documented = CATALOGUED[reason]
        assert entry.codes == {documented.code}, reason
        assert entry.keys - COMMON_KEYS <= set(documented.metadata), reason
        assert set(documented.metadata) <= entry.keys, f"{reason}: documents keys it never carries"
        assert entry.places == set(documented.raised_by), reason


def test_the_proto_enum_is_the_parsed_catalogue() -> None:
    values = dict(error_reason_pb2.ErrorReason.items())
    assert values.pop("ERROR_REASON_UNSPECIFIED") == 0
    assert values == {r.name: r.number for r in CATALOGUED.values()}
    assert set(CATALOGUE) == set(CATALOGUED)


def test_docs_errors_md_is_generated_from_the_catalogue() -> None:
    committed = (ROOT / "docs" / "errors.md").read_text()
    assert committed == GEN.render(GEN.PROTO.read_text()), "docs/errors.md is stale: run scripts/gen_error_docs.py"


def test_an_uncatalogued_reason_is_sent_as_internal() -> None:
    sent = to_status(core_errors.ValidationError("NOT_IN_THE_CATALOGUE", "made up"))
    assert sent.code == grpc.StatusCode.INTERNAL
    catalogued = to_status(core_errors.WriterHeld("WRITER_HELD", "held", holder="w1"))
    assert catalogued.code == grpc.StatusCode.FAILED_PRECONDITION
    details = dict(catalogued.trailing_metadata)["grpc-status-details-bin"]
    decoded = status_pb2.Status.FromString(details)
    assert decoded.code == code_pb2.FAILED_PRECONDITION
    info = error_details_pb2.ErrorInfo()
    assert decoded.details[0].Unpack(info)
    assert (info.reason, info.domain, dict(info.metadata)) == ("WRITER_HELD", "sessionlog", {"holder": "w1"})
