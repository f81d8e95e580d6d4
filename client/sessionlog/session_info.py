"""The session and its writer lease as the clients see them, from their protobuf messages.

Not in `sessionlog.convert`, which the compiled build compiles (setup.py): a class mypyc
compiles cannot be subclassed by an interpreted one, and the clients' `ForkInfo` is a
`SessionInfo` with the fork's repair seqs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sessionlog.convert import JsonObject, data_from_bytes
from sessionlog.v1 import session_pb2


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """A writer lease as the client sees it; `token` is set only on a lease this client holds."""

    session_id: str
    writer_id: str
    epoch: int
    expire_time: int
    token: str = field(default="", repr=False)
    """The lease token the grant returned: the holder's only credential (kept out of repr)."""

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "sessionId": self.session_id,
            "writerId": self.writer_id,
            "epoch": self.epoch,
            "expireTime": self.expire_time,
        }
        if self.token:
            out["leaseToken"] = self.token
        return out


def lease_from_pb(msg: session_pb2.Lease, token: str = "") -> LeaseInfo:
    """A Lease message as a LeaseInfo; `token` is the grant's lease token when this client holds it."""
    return LeaseInfo(msg.session_id, msg.writer_id, msg.epoch, msg.expire_time_unix_ms, token)


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session as the client sees it."""

    id: str
    create_time: int
    cwd: str | None
    metadata: JsonObject
    parent_session_id: str | None
    fork_seq: int | None
    next_seq: int
    open_turn: bool
    lease: LeaseInfo | None
    trace_id: str | None
    """The session's OpenTelemetry trace id as the service derives it (its OTLP exports carry
    it); None from a service that predates it (an export then hashes the id)."""
    namespace: str | None
    """The namespace the service keeps the session in (the caller's own), which its OTLP exports
    name (`sessionlog.namespace`); None from a service that predates the field."""

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "id": self.id,
            "createTime": self.create_time,
            "cwd": self.cwd,
            "metadata": self.metadata,
            "nextSeq": self.next_seq,
            "openTurn": self.open_turn,
        }
        if self.trace_id is not None:
            out["traceId"] = self.trace_id
        if self.namespace is not None:
            out["namespace"] = self.namespace
        if self.parent_session_id is not None:
            out["parent"] = {"sessionId": self.parent_session_id, "forkSeq": self.fork_seq}
        if self.lease is not None:
            out["lease"] = self.lease.to_json()
        return out


def session_from_pb(msg: session_pb2.Session) -> SessionInfo:
    return SessionInfo(
        id=msg.id,
        create_time=msg.create_time_unix_ms,
        cwd=msg.cwd or None,
        metadata=data_from_bytes(msg.metadata_json, what="metadata"),
        parent_session_id=msg.parent.session_id if msg.HasField("parent") else None,
        fork_seq=msg.parent.fork_seq if msg.HasField("parent") else None,
        next_seq=msg.next_seq,
        open_turn=msg.open_turn,
        lease=lease_from_pb(msg.lease) if msg.HasField("lease") else None,
        trace_id=msg.trace_id or None,
        namespace=msg.namespace or None,
    )
