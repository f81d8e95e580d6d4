"""The event envelope (SPEC §2): what a harness proposes and what the log stores.

`NewEvent` is a proposed event (no seq, no time): what a writer sends. `Event` is a committed
event: the service gave it a `seq` and a `time`. Both are frozen, so a folded log can share them
without defensive copies. JSON names follow the SPEC (`eventId`, `surfaceOp`,
`sourceEventSeqs`); Python names are snake_case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sessionlog.core.errors import ValidationError
from sessionlog.core.jsonvalue import has_lone_surrogate

JsonObject = dict[str, Any]


def event_id_problem(event_id: str, max_chars: int) -> str | None:
    """What keeps `event_id` from being an eventId, or None: it must be 1 to `max_chars`
    characters, without a NUL character (PostgreSQL's text columns cannot store it: refused on
    every database alike) or a lone UTF-16 surrogate (UTF-8, and so the wire, cannot carry it).
    The door's check of a proposed id and crash repair's ids (`repair.repair_event_id`) both
    ask here."""
    if not 0 < len(event_id) <= max_chars:
        return f"eventId must be 1 to {max_chars} characters"
    if "\x00" in event_id:
        return "eventId must not contain a NUL character"
    if has_lone_surrogate(event_id):
        return "eventId must not contain a lone UTF-16 surrogate"
    return None


@dataclass(frozen=True, slots=True)
class Replace:
    """`{"op":"replace","startSeq":S,"endSeq":E}`: replace surface nodes S..E (surface order)."""

    start_seq: int
    end_seq: int

    def to_json(self) -> JsonObject:
        return {"op": "replace", "startSeq": self.start_seq, "endSeq": self.end_seq}


APPEND: Literal["append"] = "append"
SurfaceOp = Literal["append"] | Replace


def surface_op_to_json(op: SurfaceOp | None) -> Any:
    """The SPEC's JSON form of a surface op (`"append"` or the replace object)."""
    if op is None or op == APPEND:
        return op
    assert isinstance(op, Replace)
    return op.to_json()


def surface_op_from_json(value: Any) -> SurfaceOp | None:
    """Parse `surfaceOp` from JSON, refusing anything but the two SPEC forms."""
    if value is None:
        return None
    if value == APPEND:
        return APPEND
    if isinstance(value, dict) and value.get("op") == "replace":
        if set(value) != {"op", "startSeq", "endSeq"}:
            raise ValidationError(
                "BAD_SURFACE_OP",
                "surfaceOp replace takes exactly op, startSeq and endSeq",
                field="surfaceOp",
            )
        start, end = value["startSeq"], value["endSeq"]
        if not (_is_seq(start) and _is_seq(end)):
            raise ValidationError(
                "BAD_SURFACE_OP",
                "surfaceOp startSeq and endSeq must be non-negative integers",
                field="surfaceOp",
            )
        return Replace(start, end)
    raise ValidationError(
        "BAD_SURFACE_OP",
        'surfaceOp must be "append" or {"op":"replace","startSeq":S,"endSeq":E}',
        field="surfaceOp",
    )


def _is_seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True, slots=True, init=False)
class NewEvent:
    """An event a writer proposes; the service assigns `seq` and `time` at commit.

    Its `__init__` is written out (the fields' own, as `dataclass` would write it, with `data`
    defaulting to a new `{}`) because it runs for every proposed event: compiled (mypyc), the one
    `dataclass` writes stays interpreted and costs ~1 µs an event, this one ~0.04
    (docs/architecture/compiled-build.md; a test in `tests/test_compiled_build.py` holds the
    two alike)."""

    type: str
    data: JsonObject = field(default_factory=dict)
    event_id: str | None = None
    ignorable: bool = False
    surface_op: SurfaceOp | None = None
    source_event_seqs: tuple[int, ...] = ()

    def __init__(
        self,
        type: str,
        data: JsonObject | None = None,
        event_id: str | None = None,
        ignorable: bool = False,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: tuple[int, ...] = (),
    ) -> None:
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "data", {} if data is None else data)
        object.__setattr__(self, "event_id", event_id)
        object.__setattr__(self, "ignorable", ignorable)
        object.__setattr__(self, "surface_op", surface_op)
        object.__setattr__(self, "source_event_seqs", source_event_seqs)

    def committed(self, seq: int, time: int) -> Event:
        """The event as stored at `seq`, committed at `time` (epoch ms)."""
        return Event(
            seq=seq,
            time=time,
            type=self.type,
            data=self.data,
            event_id=self.event_id,
            ignorable=self.ignorable,
            surface_op=self.surface_op,
            source_event_seqs=self.source_event_seqs,
        )

    def to_json(self) -> JsonObject:
        """The envelope as JSON, without `seq`/`time`, optional fields only where set."""
        out: JsonObject = {"type": self.type, "data": self.data}
        _put_optional(out, self.event_id, self.ignorable, self.surface_op, self.source_event_seqs)
        return out

    @classmethod
    def from_json(cls, obj: Any) -> NewEvent:
        """Parse an envelope from JSON (SPEC §2 names). `seq` and `time` are the service's to
        assign: a proposal may carry them (an envelope read back and sent again) and they are
        ignored, but one that is there must be well formed (BAD_SEQ, BAD_TIME), as in `Event`."""
        if not isinstance(obj, dict):
            raise ValidationError("BAD_ENVELOPE", "an event envelope must be a JSON object")
        for key in obj:
            if key not in ENVELOPE_KEYS:
                raise unknown_envelope_key(key)
        _check_position(obj.get("seq", 0), obj.get("time", 0))
        kind = obj.get("type")
        if not isinstance(kind, str) or not kind:
            raise ValidationError("BAD_TYPE", "event type must be a non-empty string", field="type")
        data = obj.get("data", {})
        if not isinstance(data, dict):
            raise ValidationError("DATA_NOT_OBJECT", "event data must be a JSON object", field="data")
        event_id = obj.get("eventId")
        if event_id is not None and not isinstance(event_id, str):
            raise ValidationError("BAD_EVENT_ID", "eventId must be a string", field="eventId")
        ignorable = obj.get("ignorable", False)
        if not isinstance(ignorable, bool):
            raise ValidationError("BAD_IGNORABLE", "ignorable must be true or false", field="ignorable")
        sources = obj.get("sourceEventSeqs") or []
        if not isinstance(sources, list) or not all(_is_seq(s) for s in sources):
            raise ValidationError(
                "BAD_SOURCE_EVENT_SEQS",
                "sourceEventSeqs must be a list of non-negative integers",
                field="sourceEventSeqs",
            )
        return cls(
            type=kind,
            data=data,
            event_id=event_id,
            ignorable=ignorable,
            surface_op=surface_op_from_json(obj.get("surfaceOp")),
            source_event_seqs=tuple(sources),
        )


@dataclass(frozen=True, slots=True, init=False)
class Event:
    """A committed event: position `seq` in its session's log, committed at `time` (epoch ms).

    `data_text`, when known, is the exact JSON text of `data` as it was accepted and stored;
    readers hand it on byte for byte instead of serialising `data` again (SPEC §12).
    `stored_size`, when read from storage, is what its data took there in bytes: the stored
    JSON text plus the blob strings taken out of it (a cold fold's snapshot spacing by bytes,
    with no text at hand for an event whose strings went to blobs).

    Its `__init__` is written out, as `NewEvent`'s is: one is built for every event appended
    and read."""

    seq: int
    time: int
    type: str
    data: JsonObject
    event_id: str | None = None
    ignorable: bool = False
    surface_op: SurfaceOp | None = None
    source_event_seqs: tuple[int, ...] = ()
    data_text: str | None = field(default=None, compare=False, repr=False)
    stored_size: int | None = field(default=None, compare=False, repr=False)

    def __init__(
        self,
        seq: int,
        time: int,
        type: str,
        data: JsonObject,
        event_id: str | None = None,
        ignorable: bool = False,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: tuple[int, ...] = (),
        data_text: str | None = None,
        stored_size: int | None = None,
    ) -> None:
        object.__setattr__(self, "seq", seq)
        object.__setattr__(self, "time", time)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "event_id", event_id)
        object.__setattr__(self, "ignorable", ignorable)
        object.__setattr__(self, "surface_op", surface_op)
        object.__setattr__(self, "source_event_seqs", source_event_seqs)
        object.__setattr__(self, "data_text", data_text)
        object.__setattr__(self, "stored_size", stored_size)

    def with_data_text(self, data_text: str) -> Event:
        """This event carrying the exact text its data was stored as (built field by field, as
        `ToolCallState.with_seqs` is: `dataclasses.replace` is interpreted)."""
        return Event(
            self.seq,
            self.time,
            self.type,
            self.data,
            self.event_id,
            self.ignorable,
            self.surface_op,
            self.source_event_seqs,
            data_text,
            self.stored_size,
        )

    def to_json(self) -> JsonObject:
        """The SPEC §2 envelope: seq, time, type, data, then optional fields where set."""
        out: JsonObject = {"seq": self.seq, "time": self.time, "type": self.type, "data": self.data}
        _put_optional(out, self.event_id, self.ignorable, self.surface_op, self.source_event_seqs)
        return out

    @classmethod
    def from_json(cls, obj: Any) -> Event:
        """Parse a stored envelope (with `seq` and `time`), e.g. from a sessionlog JSONL export."""
        draft = NewEvent.from_json(obj)
        seq, time = obj.get("seq"), obj.get("time")
        _check_position(seq, time)
        return draft.committed(seq, time)

    def as_new(self) -> NewEvent:
        """The proposal this event was committed from (used to copy or re-append it)."""
        return NewEvent(
            type=self.type,
            data=self.data,
            event_id=self.event_id,
            ignorable=self.ignorable,
            surface_op=self.surface_op,
            source_event_seqs=self.source_event_seqs,
        )


ENVELOPE_KEYS = ("seq", "time", "type", "data", "eventId", "ignorable", "surfaceOp", "sourceEventSeqs")
"""The keys an event envelope may have (SPEC §2). Any other is refused: a misspelt one was
dropped unseen, and `event_id` for `eventId` cost the event its retry protection (the writer
gave it a fresh id, so a retry appended it again), `payload` for `data` stored `{}`."""


def unknown_envelope_key(key: str) -> ValidationError:
    """BAD_ENVELOPE for an envelope's `key` that SPEC §2 does not name, with the key it was
    likely meant as (`event_id`, `eventID`: `eventId`) when one matches but for case and `_`."""
    folded = key.replace("_", "").replace("-", "").lower()
    meant = [known for known in ENVELOPE_KEYS if known.lower() == folded]
    hint = f" (did you mean {meant[0]!r}?)" if meant else ""
    return ValidationError(
        "BAD_ENVELOPE",
        f"unknown envelope key {key!r}{hint}: an event's keys are {', '.join(ENVELOPE_KEYS)} "
        "(its payload goes in data)",
        field=key,
    )


def _check_position(seq: Any, time: Any) -> None:
    """An envelope's `seq` is a non-negative integer and its `time` an integer (epoch ms)."""
    if not _is_seq(seq):
        raise ValidationError("BAD_SEQ", "seq must be a non-negative integer", field="seq")
    if not (isinstance(time, int) and not isinstance(time, bool)):
        raise ValidationError("BAD_TIME", "time must be an integer (epoch ms)", field="time")


def _put_optional(
    out: JsonObject,
    event_id: str | None,
    ignorable: bool,
    surface_op: SurfaceOp | None,
    sources: tuple[int, ...],
) -> None:
    if event_id is not None:
        out["eventId"] = event_id
    if ignorable:
        out["ignorable"] = True
    if surface_op is not None:
        out["surfaceOp"] = surface_op_to_json(surface_op)
    if sources:
        out["sourceEventSeqs"] = list(sources)
