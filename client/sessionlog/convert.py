"""Protobuf <-> core conversions of the values both ends share: events, surface ops, leases.

Both clients and the server convert these here, so the wire shape of an event is defined once.
Conversions of one RPC's request or response live with their users: the clients'
`sessionlog.requests` and the server's `transport/replies.py` and `transport/request_fields.py`;
the session and lease as the clients see them, in `sessionlog.session_info`.

A repeated field is read as a slice (`msg.source_event_seqs[:]`, a list): protobuf's upb
containers have no iterator of their own, so a loop over one ends on an IndexError whose
message is built and thrown away (~1,000 instructions; the whole server counted six per
appended event).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessionlog.core import jsonvalue
from sessionlog.core.errors import ValidationError
from sessionlog.core.events import APPEND, Event, NewEvent, Replace, SurfaceOp
from sessionlog.core.limits import DEFAULT_LIMITS, Limits
from sessionlog.v1 import event_pb2

JsonObject = dict[str, Any]


def surface_op_to_pb(op: SurfaceOp | None, target: event_pb2.SurfaceOp) -> None:
    """Fill `target` from a core surface op (nothing for None)."""
    if op is None:
        return
    if op == APPEND:
        target.append.SetInParent()
    else:
        assert isinstance(op, Replace)
        target.replace.start_seq = op.start_seq
        target.replace.end_seq = op.end_seq


def surface_op_from_pb(holder: event_pb2.NewEvent | event_pb2.Event) -> SurfaceOp | None:
    """The core surface op of a NewEvent or Event message."""
    if not holder.HasField("surface_op"):
        return None
    which = holder.surface_op.WhichOneof("op")
    if which == "append":
        return APPEND
    if which == "replace":
        return Replace(holder.surface_op.replace.start_seq, holder.surface_op.replace.end_seq)
    raise ValidationError("BAD_SURFACE_OP", "surface_op is set but names no operation", field="surface_op")


def data_from_bytes(
    raw: bytes, *, what: str = "data", proposed: bool = False, limits: Limits = DEFAULT_LIMITS
) -> JsonObject:
    """Decode a JSON object payload (empty bytes mean `{}`). A `proposed` one (an event, header
    or metadata sent to be stored) may not repeat a key nor hold more objects and arrays than
    `limits.max_json_containers`, nor more values in them than `limits.max_json_values`
    (`jsonvalue.loads_proposed`); what is read back is decoded as it was stored."""
    if not raw:
        return {}
    if proposed:
        value = jsonvalue.loads_proposed(
            raw, what=what, max_containers=limits.max_json_containers, max_values=limits.max_json_values
        )
    else:
        value = jsonvalue.loads(raw, what=what)
    if not isinstance(value, dict):
        raise ValidationError("DATA_NOT_OBJECT", f"{what} must be a JSON object", field=what)
    return value


def new_event_to_pb(event: NewEvent) -> event_pb2.NewEvent:
    """A proposed event as a protobuf message."""
    msg = event_pb2.NewEvent(
        type=event.type,
        data_json=jsonvalue.dumps_bytes(event.data),
        event_id=event.event_id or "",
        ignorable=event.ignorable,
        source_event_seqs=event.source_event_seqs,
    )
    surface_op_to_pb(event.surface_op, msg.surface_op)
    return msg


@dataclass(slots=True, init=False)
class DecodedEvent:
    """A proposed event as decoded from the wire, with its serialised size for limits (not
    frozen, though nothing changes it: built per event, see `sessionlog.core.fold._Plan`)."""

    event: NewEvent
    data_bytes: int
    raw: bytes = b""
    """The `data_json` as received (validated), so storage need not encode it again."""

    def __init__(self, event: NewEvent, data_bytes: int, raw: bytes = b"") -> None:
        # Written out (compiled, a generated one stays interpreted): see `core.events.NewEvent`.
        self.event = event
        self.data_bytes = data_bytes
        self.raw = raw


def new_event_from_pb(msg: event_pb2.NewEvent, index: int = 0, limits: Limits = DEFAULT_LIMITS) -> DecodedEvent:
    """Decode a proposed event; errors name the event's index in its batch."""
    raw = msg.data_json  # each read of a bytes field copies it out of the message
    try:
        data = data_from_bytes(raw, proposed=True, limits=limits)
        event = NewEvent(
            type=msg.type,
            data=data,
            event_id=msg.event_id or None,
            ignorable=msg.ignorable,
            surface_op=surface_op_from_pb(msg),
            source_event_seqs=tuple(msg.source_event_seqs[:]),
        )
    except ValidationError as exc:
        exc.name_event(index)
        raise
    return DecodedEvent(event, len(raw), raw)


def data_bytes(event: Event) -> bytes:
    """The event's data as JSON: the exact text stored when known, else serialised."""
    if event.data_text is not None:
        return event.data_text.encode("utf-8")
    return jsonvalue.dumps_bytes(event.data)


def event_to_pb(event: Event, data_json: bytes | None = None) -> event_pb2.Event:
    """A committed event as a protobuf message (`data_json` skips re-serialising)."""
    msg = event_pb2.Event(
        seq=event.seq,
        time_unix_ms=event.time,
        type=event.type,
        data_json=data_json if data_json is not None else data_bytes(event),
        event_id=event.event_id or "",
        ignorable=event.ignorable,
        source_event_seqs=event.source_event_seqs,
    )
    surface_op_to_pb(event.surface_op, msg.surface_op)
    return msg


def event_from_pb(msg: event_pb2.Event) -> Event:
    """A committed event from its protobuf message."""
    return Event(
        seq=msg.seq,
        time=msg.time_unix_ms,
        type=msg.type,
        data=data_from_bytes(msg.data_json),
        event_id=msg.event_id or None,
        ignorable=msg.ignorable,
        surface_op=surface_op_from_pb(msg),
        source_event_seqs=tuple(msg.source_event_seqs[:]),
    )
