"""Fold snapshots: a session's folded state at one seq, as bytes a store can keep.

A snapshot is a cache, never the truth (the log is). Loading a session starts from the latest
usable snapshot at or before the wanted seq and folds only the events after it, so the cost of
a session follows its surface and its new events, not its history.

What makes a snapshot usable is decided here, in one place:
- it carries `FOLD_VERSION`; a snapshot written by other fold code is ignored (and the log,
  folded from an older snapshot or from seq 0, gives the same answers);
- it decodes (zlib, then lossless JSON, then every field of the expected shape); a damaged one
  raises `SnapshotUnusable`, and the loader falls back to an older snapshot or to the log.

The encoding is compact on purpose: node seqs are delta-encoded, node types are indexes into a
fixed table, tool-result digests are hex. A snapshot weighs a few bytes per surface node.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, fields
from typing import Any

from sessionlog.core import jsonvalue
from sessionlog.core.errors import SessionLogError
from sessionlog.core.headers import HeaderState, header_state_from_parts
from sessionlog.core.projections.stats import StatsAccumulator
from sessionlog.core.structure import StructureState
from sessionlog.core.surface import SurfaceNode
from sessionlog.core.tool_calls import ToolCallState
from sessionlog.core.vocabulary import ASSISTANT_MESSAGE, SYSTEM_MESSAGE, TOOL_RESULT, USER_MESSAGE

FOLD_VERSION = 11
"""The version of the fold code a snapshot was written by. Bump it whenever what the fold
computes from a log changes (a new field, a changed rule): older snapshots are then ignored.
2: stats count model calls and keep the cost as an exact sum (`usage.CostSum` partials).
3: tool-result rewrite keys digest `jsonvalue.digest_form` instead of RFC 8785 bytes.
4: stats count the tool calls and tool errors of the importers' fallback `user/message`s, by the
   role of the message they carry (`projections.stats`).
5: a pending tool call follows the surface node that carries its block, and a replace that drops
   the block takes it off the surface (`ToolCallState.on_surface`): repair no longer answers it;
   a snapshot keeps where the latest replaces started (`replaceStarts`).
6: a dropped call keeps the seq of the replace that dropped it (`block_seq`), which a refused
   result names, where a later replace of that node moved it on.
7: a call's block rides on every surface node that restates it (`ToolCallState.copies`), so a
   replace of one of two copies leaves the call on the surface, where it dropped the call;
   surface nodes keep the call ids of their toolCall blocks and the one a tool result answers
   (`SurfaceNode.calls`, `answers`), so a replace that would leave a result without its call is
   refused (`surface.check_replace_keeps_calls`).
8: surface nodes say whether they are model-only copies (`SurfaceNode.copy`, `copyNodes`), so a
   call is told by the node that opened it, not by its id alone (a later step may reuse it), and
   a replace restating a call covers one of its blocks (`structure.plan_restated_calls`).
9: a model-only copy restates the calls of the messages it cites, not every call of an id it
   carries (`tool_calls.restated_call`): a call keeps every node that carried its block
   (`ToolCallState.carried_by`), and copy nodes keep the seqs they cite (`SurfaceNode.sources`,
   `copySources`, which replaces `copyNodes`).
10: a replace restates a call only if it cites a node that carried the call's block, as a copy
   does, or (as a copy now may too) the replace that dropped it (`structure._restates`), where
   it put back a dropped call of any id its message carried: a trim of step 1's message keeping
   its call a revived step 2's dropped a.
11: stats count the events whose usage has tokens but no price (`unpricedEvents`)."""

_NODE_TYPES: tuple[str, ...] = (SYSTEM_MESSAGE, USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT)
_TYPE_INDEX = {kind: index for index, kind in enumerate(_NODE_TYPES)}
_STATS_FIELDS: tuple[str, ...] = tuple(field.name for field in fields(StatsAccumulator))


class SnapshotUnusable(Exception):
    """A stored snapshot that cannot be used (other fold version, damaged bytes)."""


@dataclass(frozen=True, slots=True)
class FoldSnapshot:
    """Everything `SessionFold` needs to continue folding after seq `next_seq - 1`."""

    next_seq: int
    last_time: int
    last_type: str | None
    nodes: list[int]
    node_info: list[SurfaceNode]
    empty: list[int]
    replace_generation: int
    replace_starts: list[int]
    """The surface position each of the latest replaces (up to `fold.RECENT_REPLACES`) started
    at, oldest first: a history copy a few replaces old re-reads only from the first message
    they changed, on any instance and after a restart (`SessionFold.first_changed_message`)."""
    structure: StructureState
    header: HeaderState | None
    stats: StatsAccumulator

    @property
    def seq(self) -> int:
        """The last seq folded into this state."""
        return self.next_seq - 1


def encode_snapshot(snapshot: FoldSnapshot) -> bytes:
    """The stored form: zlib-compressed lossless JSON, tagged with `FOLD_VERSION`."""
    deltas, previous = [], 0
    for seq in snapshot.nodes:
        deltas.append(seq - previous)
        previous = seq
    keys = {
        str(seq): info.rewrite_key.hex()
        for seq, info in zip(snapshot.nodes, snapshot.node_info, strict=True)
        if info.rewrite_key is not None
    }
    calls = {
        str(seq): list(info.calls) for seq, info in zip(snapshot.nodes, snapshot.node_info, strict=True) if info.calls
    }
    answers = {
        str(seq): info.answers
        for seq, info in zip(snapshot.nodes, snapshot.node_info, strict=True)
        if info.answers is not None
    }
    copy_sources = {
        str(seq): list(info.sources) for seq, info in zip(snapshot.nodes, snapshot.node_info, strict=True) if info.copy
    }
    structure = snapshot.structure
    header = snapshot.header
    body: dict[str, Any] = {
        "v": FOLD_VERSION,
        "nextSeq": snapshot.next_seq,
        "lastTime": snapshot.last_time,
        "lastType": snapshot.last_type,
        "nodes": deltas,
        "types": [_TYPE_INDEX[info.type] for info in snapshot.node_info],
        "keys": keys,
        "calls": calls,
        "answers": answers,
        "copySources": copy_sources,
        "empty": snapshot.empty,
        "generation": snapshot.replace_generation,
        "replaceStarts": snapshot.replace_starts,
        "structure": [
            structure.last_turn,
            structure.open_turn,
            structure.last_step,
            structure.open_step,
            [_call_row(c) for c in structure.calls.values()],
        ],
        "header": None
        if header is None
        else [header.seq, header.header, header.generation, header.reason, header.starts_series],
        "stats": [getattr(snapshot.stats, name) for name in _STATS_FIELDS],
    }
    # Every number in the body is finite: seqs and counts, the header as accepted at the door,
    # and usage sums of values within `usage.USAGE_LIMIT`. So orjson's output needs no second
    # look for a NaN it wrote as null (`dumps_bytes` would encode the body twice, as it holds
    # nulls). zlib's fastest level: a 3,000-event fold's snapshot in 0.35 ms instead of 1.05
    # at level 6, 8 % larger; snapshots are written on the event loop (every 1,000 events by
    # default, `SnapshotPolicy`).
    return zlib.compress(jsonvalue.dumps_bytes_fast(body), 1)


def decode_snapshot(blob: bytes) -> FoldSnapshot:
    """The snapshot in `blob`, or `SnapshotUnusable` (other version, damaged, wrong shape)."""
    try:
        body = jsonvalue.loads(zlib.decompress(blob), what="fold snapshot")
    except (zlib.error, SessionLogError) as exc:
        raise SnapshotUnusable(f"snapshot does not decode: {exc}") from None
    if not isinstance(body, dict) or body.get("v") != FOLD_VERSION:
        version = body.get("v") if isinstance(body, dict) else None
        raise SnapshotUnusable(f"snapshot of fold version {version!r}, this code folds version {FOLD_VERSION}")
    try:
        return _snapshot_from_body(body)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise SnapshotUnusable(f"snapshot has the wrong shape: {exc!r}") from None


def _snapshot_from_body(body: dict[str, Any]) -> FoldSnapshot:
    nodes: list[int] = []
    previous = 0
    for delta in body["nodes"]:
        previous += _int(delta)
        nodes.append(previous)
    types = [_NODE_TYPES[_int(index)] for index in body["types"]]
    if len(types) != len(nodes):
        raise ValueError("node and type counts differ")
    keys = {int(seq): bytes.fromhex(text) for seq, text in dict(body["keys"]).items()}
    calls = {int(seq): tuple(str(call_id) for call_id in ids) for seq, ids in dict(body["calls"]).items()}
    answers = {int(seq): str(call_id) for seq, call_id in dict(body["answers"]).items()}
    copy_sources = {
        int(seq): tuple(_int(source) for source in cited) for seq, cited in dict(body["copySources"]).items()
    }
    info = [
        SurfaceNode(
            kind, keys.get(seq), calls.get(seq, ()), answers.get(seq), seq in copy_sources, copy_sources.get(seq, ())
        )
        for seq, kind in zip(nodes, types, strict=True)
    ]
    last_turn, open_turn, last_step, open_step, call_rows = body["structure"]
    structure = StructureState(
        _int(last_turn),
        _opt_int(open_turn),
        _int(last_step),
        _opt_int(open_step),
        {str(c[0]): _call(c) for c in call_rows},
    )
    raw_header = body["header"]
    header = None
    if raw_header is not None:
        seq, value, generation, reason, starts = raw_header
        if not isinstance(value, dict):
            raise ValueError("header is not an object")
        header = header_state_from_parts(_int(seq), value, _int(generation), str(reason), starts is True)
    stats_values = body["stats"]
    if len(stats_values) != len(_STATS_FIELDS):
        raise ValueError("stats fields differ")
    stats = StatsAccumulator(*stats_values)
    last_type = body["lastType"]
    return FoldSnapshot(
        next_seq=_int(body["nextSeq"]),
        last_time=_int(body["lastTime"]),
        last_type=None if last_type is None else str(last_type),
        nodes=nodes,
        node_info=info,
        empty=[_int(seq) for seq in body["empty"]],
        replace_generation=_int(body["generation"]),
        # Absent from the first snapshots of version 5 (never released): none remembered, so a
        # copy older than the snapshot is read again whole, as before.
        replace_starts=[_int(start) for start in body.get("replaceStarts", [])],
        structure=structure,
        header=header,
        stats=stats,
    )


def _call_row(c: ToolCallState) -> list[Any]:
    """A call as stored (read back by `_call`)."""
    return [
        *(c.call_id, c.name, c.turn, c.step, c.block_seq, c.call_seq, c.result_seq, c.on_surface),
        *(list(c.copies), list(c.carried_by)),
    ]


def _call(c: list[Any]) -> ToolCallState:
    call_id, name, turn, step, block_seq, call_seq, result_seq, on_surface, copies, carried_by = c
    if type(on_surface) is not bool:
        raise TypeError(f"on_surface {on_surface!r} is not a boolean")
    return ToolCallState(
        str(call_id),
        str(name),
        _int(turn),
        _int(step),
        _int(block_seq),
        _opt_int(call_seq),
        _opt_int(result_seq),
        on_surface,
        tuple(_int(seq) for seq in copies),
        _carried_by(carried_by),
    )


def _carried_by(seqs: list[Any]) -> tuple[int, ...]:
    """A call's `carried_by`: never empty, its first seq is the message that opened the call."""
    carried_by = tuple(_int(seq) for seq in seqs)
    if not carried_by:
        raise ValueError("a tool call carried by no node")
    return carried_by


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


__all__ = ["FOLD_VERSION", "FoldSnapshot", "SnapshotUnusable", "decode_snapshot", "encode_snapshot"]
