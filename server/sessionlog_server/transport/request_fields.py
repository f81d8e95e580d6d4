"""A request message's fields as the service's values: a batch's events and a reported header
parsed (after their sizes are checked, so an oversized one costs no parse), optional fields,
a projection's scope. Shared by the servicer and the writer stream's transport (`writer_rpc`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sessionlog import convert
from sessionlog.core import validate
from sessionlog.core.limits import Limits
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.service.projections import Scope


def scope_from_pb(scope: pb.ProjectionScope) -> Scope:
    return Scope(scope.session_id, scope.at_seq if scope.HasField("at_seq") else None, scope.with_repair)


def decode_events(messages: Sequence[event_pb2.NewEvent], limits: Limits) -> list[convert.DecodedEvent]:
    """Parse a batch's payloads, after checking their sizes (an oversized batch costs no parse)."""
    listed = messages[:]  # a list, looped over twice (a repeated field's loop ends on an IndexError: convert.py)
    validate.check_batch_sizes([len(m.data_json) for m in listed], limits)
    return [convert.new_event_from_pb(m, i, limits) for i, m in enumerate(listed)]


def decode_header(raw: bytes, limits: Limits) -> dict[str, Any]:
    """Parse a reported header, after checking its size: a logged header is one event, bound
    by `max_event_bytes` as a batch's events are (and an oversized one costs no parse)."""
    validate.check_event_bytes(len(raw), limits, what="header")
    return convert.data_from_bytes(raw, what="header", proposed=True, limits=limits)


def optional_field(msg: object, name: str) -> int | None:
    return getattr(msg, name) if msg.HasField(name) else None  # type: ignore[attr-defined]
