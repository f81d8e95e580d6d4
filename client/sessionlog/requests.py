"""Request building and response conversion shared by the sync and asyncio clients.

The two clients differ only in how they make the call; everything about the wire shape is
here, once (kurrentdbclient's pattern).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from sessionlog import convert, session_info
from sessionlog.connecting import CHANNEL_CONNECT_OPTIONS
from sessionlog.core import jsonvalue, validate
from sessionlog.core.errors import SessionLogError, Unavailable, ValidationError
from sessionlog.core.events import Event, NewEvent
from sessionlog.core.limits import DEFAULT_LIMITS
from sessionlog.keepalive import CHANNEL_KEEPALIVE_OPTIONS
from sessionlog.v1 import session_service_pb2 as pb

DEFAULT_TARGET = "127.0.0.1:50051"
MAX_PORT = 65535


def check_target(target: str) -> None:
    """A ValueError for an empty (or blank) target, and for one whose port is past 65535: gRPC
    takes the port modulo 65536 and connects to another port (`127.0.0.1:99999` dialled 34463),
    perhaps another service, and an empty `--server ""` or `SESSIONLOG_SERVER=` is a mistake,
    not a request for the default. Any other form (`HOST:PORT`, `dns:///HOST:PORT`,
    `unix:PATH`) is gRPC's to judge."""
    if not target.strip():
        raise ValueError(f"the server address is empty: give HOST:PORT (e.g. {DEFAULT_TARGET})")
    port = target.rpartition(":")[2]
    if port.isdigit() and int(port) > MAX_PORT:
        raise ValueError(f"{target!r}: the port must be from 1 to {MAX_PORT} (HOST:PORT, e.g. {DEFAULT_TARGET})")


MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Reconnect within a second of a restart of the service, and give a connect attempt long
    # enough for a service far away (`connecting.CONNECT_TIMEOUT_MS`).
    *CHANNEL_CONNECT_OPTIONS,
    # One client, one connection. gRPC otherwise shares one TCP connection among every channel
    # of a process to the same target, so a process with several clients (an agent host, a
    # bench) sent all their streams to whichever `serve --workers` process accepted that one
    # connection, while the others idled.
    ("grpc.use_local_subchannel_pool", 1),
    # Notice a service that hangs (its connections open, nothing answered) within
    # `keepalive.HANG_NOTICED_WITHIN_S`, as the TypeScript client does.
    *CHANNEL_KEEPALIVE_OPTIONS,
]


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Seqs of an appended batch, in order, and the log's next seq after it."""

    seqs: list[int]
    next_seq: int


@dataclass(frozen=True, slots=True)
class HeaderReport:
    """What the service did with a reported request header (SPEC §6).

    `reason` is None when nothing was logged; `header_seq` is then the latest header's seq.
    `starts_series` is true for `series` too, whose logged event carries no `startsSeries`
    (its reason says it; docs/headers.md).
    """

    reason: str | None
    starts_series: bool
    header_seq: int | None
    appended: bool
    changed_fields: list[str]


@dataclass(frozen=True, slots=True)
class ResumeInfo:
    """The state a resumed writer continues from (SPEC §8)."""

    lease: session_info.LeaseInfo
    next_seq: int
    latest_header: dict[str, Any] | None
    latest_header_seq: int | None
    replace_generation: int
    repair_seqs: list[int]
    end_seed_seq: int
    last_turn: int
    """The last turn the log holds (0 when none, a fork's inherited turns count): turns are
    numbered without gaps, so the next `turn/start` is `last_turn + 1`."""

    def to_json(self) -> dict[str, Any]:
        return {
            "sessionId": self.lease.session_id,
            "lease": self.lease.to_json(),
            "nextSeq": self.next_seq,
            "latestHeader": self.latest_header,
            "latestHeaderSeq": self.latest_header_seq,
            "replaceGeneration": self.replace_generation,
            "repairSeqs": self.repair_seqs,
            "endSeedSeq": self.end_seed_seq,
            "lastTurn": self.last_turn,
        }


@dataclass(frozen=True, slots=True)
class ForkInfo(session_info.SessionInfo):
    """A fork as ForkSession answers it: the new session, every field of a SessionInfo (so a
    caller reads `.id`, `.next_seq` or `to_json()` as of any session), and the seqs of the
    `forked` repair events the service wrote after the child's end-seed when the cut fell inside
    an open turn (docs/repair.md), as `resume` answers its own. A harness that forks mid-turn
    learns from them which events close the turn without reading the child's log. Asked for
    again, a fork answers the same seqs (its seed is a pure function of the prefix)."""

    repair_seqs: list[int]
    """Empty when the cut fell between turns: nothing was repaired."""

    @property
    def session(self) -> session_info.SessionInfo:
        """The session alone, as `get_session` answers it (a ForkInfo carries more, so it is
        never equal to a SessionInfo)."""
        return session_info.SessionInfo(**_session_fields(self))

    def to_json(self) -> dict[str, Any]:
        # Named, not super(): a slotted dataclass is a new class, which zero-argument super() misses.
        return {**session_info.SessionInfo.to_json(self), "repairSeqs": self.repair_seqs}


def _session_fields(session: session_info.SessionInfo) -> dict[str, Any]:
    """The SessionInfo fields of `session` (not `asdict`, which would turn its lease into a dict)."""
    return {f.name: getattr(session, f.name) for f in fields(session_info.SessionInfo)}


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """Subscription marker: the replay is complete; later items are live events."""

    next_seq: int


EventLike = NewEvent | dict[str, Any]


def as_new_event(item: EventLike) -> NewEvent:
    """Accept a NewEvent or a SPEC §2 JSON envelope."""
    return item if isinstance(item, NewEvent) else NewEvent.from_json(item)


SEQ_MAX = 2**64 - 1
"""The largest seq a request can carry (seqs are uint64 on the wire)."""


def seq_argument(value: Any, name: str) -> int:
    """A seq a caller passed (`from_seq`, `at_seq`, `expected_next_seq`, ...): a non-negative
    integer of at most SEQ_MAX, else BAD_SEQ here, before anything is sent (the wire's unsigned
    fields would otherwise fail to encode with an untyped error, or round a float)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError("BAD_SEQ", f"{name} must be a non-negative integer, not {value!r}", field=name)
    if value > SEQ_MAX:
        raise ValidationError("BAD_SEQ", f"a seq is at most {SEQ_MAX} (2**64 - 1): {name} is {value}", field=name)
    return value


def named_session(session_id: str | None, name: str) -> str:
    """The id a create or fork names: a fresh UUID for None, else the caller's id, which may
    not be empty: the wire cannot tell "" from no id, so the service would make up a session
    (an unset `$SID` in `sessionlog create --id "$SID"`) where the caller meant its own."""
    if session_id is None:
        return str(uuid.uuid4())
    if not session_id:
        raise ValidationError("BAD_SESSION_ID", f"{name} is empty: give an id, or none for a generated one", field=name)
    return session_id


def session_argument(session_id: str, name: str = "session_id") -> str:
    """A session id a caller passed, checked by the service's own rule (`validate.check_session_id`,
    BAD_SESSION_ID) before it is sent: one with a lone surrogate raised protobuf's
    UnicodeEncodeError, untyped, from every call (UTF-8 cannot carry it)."""
    try:
        validate.check_session_id(session_id, DEFAULT_LIMITS)  # the id length is not configurable
    except ValidationError as exc:
        if name != "session_id":
            exc.message = exc.message.replace("session id", name, 1)
            exc.args = (exc.message,)
            exc.field = name
            exc.metadata["field"] = name
        raise
    return session_id


def with_event_ids(events: Iterable[EventLike]) -> list[NewEvent]:
    """Give every event an eventId, so a retry after an unknown outcome cannot append twice.

    A given eventId is checked here by the service's own rule (`validate.check_event_id`): an
    empty one cannot be told from none on the wire, so it would be stored without an id and a
    retry would append the event again. So are the envelope's keys (`NewEvent.from_json`) and
    its type's form (`validate.check_type_name`), each error naming the event's index."""
    out = []
    for index, item in enumerate(events):
        try:
            event = as_new_event(item)
            validate.check_type_name(event.type)
            validate.check_event_id(event, DEFAULT_LIMITS)  # the id length is not configurable
        except ValidationError as exc:
            exc.name_event(index)
            raise
        out.append(event if event.event_id is not None else replace(event, event_id=str(uuid.uuid4())))
    return out


def create_request(session_id: str | None, cwd: str | None, metadata: dict[str, Any] | None) -> pb.CreateSessionRequest:
    validate.check_session_text(cwd, metadata)  # the service's rule, typed, before protobuf fails on it
    return pb.CreateSessionRequest(
        session_id=session_argument(session_id) if session_id else "",
        cwd=cwd or "",
        metadata_json=jsonvalue.dumps_bytes(metadata) if metadata else b"",
    )


def append_request(
    session_id: str,
    lease: session_info.LeaseInfo,
    events: Sequence[NewEvent],
    expected_next_seq: int | None,
    acknowledged_next_seq: int | None = None,
) -> pb.AppendEventsRequest:
    """`acknowledged_next_seq`: where the acknowledgements under the lease end (`base.Acknowledged`)."""
    request = pb.AppendEventsRequest(
        session_id=session_argument(session_id),
        lease_token=lease.token,
        events=[convert.new_event_to_pb(e) for e in events],
        acknowledged_next_seq=acknowledged_next_seq,
    )
    if expected_next_seq is not None:
        request.expected_next_seq = seq_argument(expected_next_seq, "expected_next_seq")
    return request


CREATE_IF_MISSING_HINT = "open the writer with create_if_missing=True to create it"
"""What a writer's SESSION_NOT_FOUND adds: the way to a session that does not exist yet."""


def writer_open_refused(error: SessionLogError, create_if_missing: bool) -> SessionLogError:
    """`error`, the service's answer to a writer's `open`, worded for its caller: a session that
    is not there (SESSION_NOT_FOUND, without `create_if_missing`) names the option that creates
    it, which the service's message, written for every call, does not."""
    if error.reason == "SESSION_NOT_FOUND" and not create_if_missing:
        error.message = f"{error.message}; {CREATE_IF_MISSING_HINT}"
        error.args = (error.message,)
    return error


def open_request(
    session_id: str,
    writer_id: str | None,
    takeover: bool,
    create_if_missing: bool,
    resume: bool = False,
    lease_token: str = "",
    acknowledged_next_seq: int | None = None,
    request_id: str = "",
) -> pb.WriteRequest:
    """The `open` message; `lease_token` (of a lease still held) lets a reconnect take it again,
    and `acknowledged_next_seq` tells it where the answers it got end (what it re-sends from
    there is answered from the log). `request_id` makes a first open safe to retry."""
    validate.check_writer_id(writer_id, DEFAULT_LIMITS)
    return pb.WriteRequest(
        open=pb.OpenWriter(
            session_id=session_argument(session_id),
            writer_id=writer_id or "",
            takeover=takeover,
            create_if_missing=create_if_missing,
            resume=resume,
            lease_token=lease_token,
            acknowledged_next_seq=acknowledged_next_seq,
            request_id=request_id,
        )
    )


def acquire_request(
    session_id: str, writer_id: str | None, takeover: bool, lease_token: str, request_id: str
) -> pb.AcquireLeaseRequest:
    validate.check_writer_id(writer_id, DEFAULT_LIMITS)
    return pb.AcquireLeaseRequest(
        session_id=session_argument(session_id),
        writer_id=writer_id or "",
        takeover=takeover,
        lease_token=lease_token,
        request_id=request_id,
    )


def acquire_from_pb(msg: pb.AcquireLeaseResponse) -> session_info.LeaseInfo:
    """The granted lease, holding the token only this response carries."""
    return session_info.lease_from_pb(msg.lease, msg.lease_token)


def renew_request(lease: session_info.LeaseInfo) -> pb.RenewLeaseRequest:
    return pb.RenewLeaseRequest(session_id=lease.session_id, lease_token=lease.token)


def release_request(lease: session_info.LeaseInfo) -> pb.ReleaseLeaseRequest:
    return pb.ReleaseLeaseRequest(session_id=lease.session_id, lease_token=lease.token)


def resume_request(
    session_id: str, writer_id: str | None, takeover: bool, lease_token: str, request_id: str
) -> pb.ResumeSessionRequest:
    validate.check_writer_id(writer_id, DEFAULT_LIMITS)
    return pb.ResumeSessionRequest(
        session_id=session_argument(session_id),
        writer_id=writer_id or "",
        takeover=takeover,
        lease_token=lease_token,
        request_id=request_id,
    )


CLOSE_REQUEST = pb.WriteRequest(close=pb.CloseWriter())
"""Ends a writer on purpose: the service releases its lease (a stream ended without it lapses)."""


def batch_request(batch_id: int, events: Sequence[NewEvent], expected_next_seq: int | None = None) -> pb.WriteRequest:
    batch = pb.WriteBatch(batch_id=batch_id, events=[convert.new_event_to_pb(e) for e in events])
    if expected_next_seq is not None:
        batch.expected_next_seq = seq_argument(expected_next_seq, "expected_next_seq")
    return pb.WriteRequest(batch=batch)


def read_request(session_id: str, from_seq: int, to_seq: int | None, page_size: int) -> pb.ReadEventsRequest:
    request = pb.ReadEventsRequest(
        session_id=session_argument(session_id), from_seq=seq_argument(from_seq, "from_seq"), page_size=page_size
    )
    if to_seq is not None:
        request.to_seq = seq_argument(to_seq, "to_seq")
    return request


#: The reason a subscription is cut off for falling behind; the client resubscribes on its own.
SUBSCRIBER_TOO_SLOW = "SUBSCRIBER_TOO_SLOW"
#: How many times in a row a subscription resumes without receiving anything before giving up.
MAX_EMPTY_RESUMES = 5
#: How many times in a row a subscription resubscribes while the service is unreachable (with
#: backoff from RESUBSCRIBE_FIRST_DELAY to RESUBSCRIBE_MAX_DELAY: about a minute, long enough to
#: ride out a restart).
MAX_UNREACHABLE_RESUMES = 120
#: The wait (seconds) before the first resubscribe while the service is unreachable; each next
#: one waits twice as long, up to RESUBSCRIBE_MAX_DELAY.
RESUBSCRIBE_FIRST_DELAY = 0.05
RESUBSCRIBE_MAX_DELAY = 0.5


OnResubscribe = Callable[[int, SessionLogError], None]
"""Told of each resubscription: the seq it resumes from, and the error that cut the stream (for
metrics and logs; the TypeScript client's `onResubscribe`)."""


class SubscriptionCursor:
    """What a subscription has delivered, so a cut-off subscription resumes without a gap or a repeat.

    The caller sees one stream: events in seq order, each once, and one CaughtUp marker. It
    resumes after the service cut it off for falling behind (SUBSCRIBER_TOO_SLOW, at once) and
    after a transport failure such as a service restart (UNAVAILABLE, with backoff).
    """

    def __init__(self, session_id: str, from_seq: int, on_resubscribe: OnResubscribe | None = None) -> None:
        self.session_id = session_argument(session_id)
        self.next_seq = seq_argument(from_seq, "from_seq")
        self.caught_up = False
        self.empty_resumes = 0
        self.unreachable = 0
        self.resubscribes = 0
        """Resubscriptions so far (the TypeScript client's `resubscribes`)."""
        self.on_resubscribe = on_resubscribe

    def request(self) -> pb.SubscribeEventsRequest:
        return pb.SubscribeEventsRequest(session_id=self.session_id, from_seq=self.next_seq)

    def items(self, response: pb.SubscribeEventsResponse) -> list[Event | CaughtUp]:
        """What the caller sees of a response: events not delivered yet, and the first marker."""
        # Any response, a marker too, means the service was reached: the unreachable count is
        # of attempts in a row, and a quiet session's resume yields nothing but a marker.
        self.unreachable = 0
        out: list[Event | CaughtUp] = []
        for item in subscription_items(response):
            if isinstance(item, CaughtUp):
                if not self.caught_up:
                    self.caught_up = True
                    out.append(item)
            elif item.seq >= self.next_seq:
                self.next_seq = item.seq + 1
                self.empty_resumes = 0
                out.append(item)
        return out

    def resume_delay(self, error: SessionLogError) -> float | None:
        """How long to wait before resubscribing from `next_seq` after `error`, or None to give
        up with it (any other error, or too many resumes in a row with nothing received). A
        resubscription is counted and told to `on_resubscribe` (seq, cause) here."""
        delay = self._delay(error)
        if delay is not None:
            self.resubscribes += 1
            if self.on_resubscribe is not None:
                self.on_resubscribe(self.next_seq, error)
        return delay

    def _delay(self, error: SessionLogError) -> float | None:
        if error.reason == SUBSCRIBER_TOO_SLOW:
            self.empty_resumes += 1
            return 0.0 if self.empty_resumes <= MAX_EMPTY_RESUMES else None
        if isinstance(error, Unavailable):
            self.unreachable += 1
            if self.unreachable >= MAX_UNREACHABLE_RESUMES:
                return None
            return float(min(RESUBSCRIBE_FIRST_DELAY * 2 ** (self.unreachable - 1), RESUBSCRIBE_MAX_DELAY))
        return None


def subscription_items(response: pb.SubscribeEventsResponse) -> list[Event | CaughtUp]:
    if response.WhichOneof("kind") == "caught_up":
        return [CaughtUp(response.caught_up.next_seq)]
    return [convert.event_from_pb(m) for m in response.events.events]


HEADER_REASON_NAMES = {
    pb.HEADER_REASON_UNSPECIFIED: None,
    pb.HEADER_REASON_INITIAL: "initial",
    pb.HEADER_REASON_RESUME: "resume",
    pb.HEADER_REASON_CHANGE: "change",
    pb.HEADER_REASON_SERIES: "series",
}


def header_report_from_pb(msg: pb.ReportRequestHeaderResponse) -> HeaderReport:
    return HeaderReport(
        reason=HEADER_REASON_NAMES[msg.reason],
        starts_series=msg.starts_series,
        header_seq=msg.header_seq if msg.HasField("header_seq") else None,
        appended=msg.appended,
        changed_fields=list(msg.changed_fields),
    )


def header_request(
    session_id: str, lease: session_info.LeaseInfo, header: dict[str, Any]
) -> pb.ReportRequestHeaderRequest:
    return pb.ReportRequestHeaderRequest(
        session_id=session_argument(session_id), lease_token=lease.token, header_json=jsonvalue.dumps_bytes(header)
    )


def header_write_request(batch_id: int, header: dict[str, Any]) -> pb.WriteRequest:
    return pb.WriteRequest(header=pb.WriteHeader(batch_id=batch_id, header_json=jsonvalue.dumps_bytes(header)))


def scope(session_id: str, at_seq: int | None, with_repair: bool) -> pb.ProjectionScope:
    msg = pb.ProjectionScope(session_id=session_argument(session_id), with_repair=with_repair)
    if at_seq is not None:
        msg.at_seq = seq_argument(at_seq, "at_seq")
    return msg


def resume_from_pb(msg: pb.ResumeSessionResponse) -> ResumeInfo:
    return ResumeInfo(
        lease=session_info.lease_from_pb(msg.lease, msg.lease_token),
        next_seq=msg.next_seq,
        latest_header=convert.data_from_bytes(msg.latest_header_json, what="header")
        if msg.latest_header_json
        else None,
        latest_header_seq=msg.latest_header_seq if msg.HasField("latest_header_seq") else None,
        replace_generation=msg.replace_generation,
        repair_seqs=list(msg.repair_seqs),
        end_seed_seq=msg.end_seed_seq,
        last_turn=msg.last_turn,
    )


def fork_from_pb(msg: pb.ForkSessionResponse) -> ForkInfo:
    return ForkInfo(**_session_fields(session_info.session_from_pb(msg.session)), repair_seqs=msg.repair_seqs[:])


def request_view_from_pb(msg: pb.GetRequestResponse) -> dict[str, Any]:
    """`{"request", "requestJson", "sha256", "headerSeq", "atSeq"}`. `requestJson` is the
    request's exact bytes as the service sent them, the canonical JSON (RFC 8785) that `sha256` is
    of: `request`, parsed, does not give them back (Python writes some numbers otherwise). `atSeq`
    is the seq the request's prefix ends at (the head when none was asked for; past it when a
    crash repair is shown in memory), so a request read at the head can be read again, and
    audited, with `at_seq`; None for a session without events, whose request
    (`{"messages": []}`) ends at no seq."""
    return {
        "request": jsonvalue.loads(msg.request_json, what="request"),
        "requestJson": bytes(msg.request_json),
        "sha256": msg.sha256,
        "headerSeq": msg.header_seq if msg.HasField("header_seq") else None,
        "atSeq": at_seq_from_pb(msg),
    }


def surface_from_pb(msg: pb.GetSurfaceResponse) -> dict[str, Any]:
    """`{"nodes", "replaceGeneration", "atSeq"}`: `atSeq` the last seq the surface covers, None
    for a session without events (as in every projection: `at_seq_from_pb`)."""
    return {"nodes": list(msg.nodes), "replaceGeneration": msg.replace_generation, "atSeq": at_seq_from_pb(msg)}


def at_seq_from_pb(msg: Any) -> int | None:
    """A projection response's `at_seq`: the last seq it covers, None when the service left it
    unset (a session without events, which covers no seq: `at_seq=0` is SEQ_NOT_FOUND there)."""
    return int(msg.at_seq) if msg.HasField("at_seq") else None


class HistoryCopy:
    """A reader's copy of a model history, kept current by fetching only new messages.

    While no replace happens, the history only grows, so a refresh asks for the messages from
    the copy's length on, quoting the replace generation it was read at; the server answers
    with just the tail, or, when the surface was rewritten meanwhile, with the messages from
    the first one a replace changed (a voice answer cut to what was heard changes only the
    tail; everything when the server no longer knows). A harness building each request from
    this copy pays O(new or changed messages) per step.
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.messages: list[dict[str, Any]] = []
        self.generation: int | None = None
        self.at_seq: int | None = None
        """The last seq the copy covers (None before the first refresh, and for a session
        without events)."""
        self.page_token = ""

    @property
    def complete(self) -> bool:
        """False while the server has more pages of the history being fetched."""
        return not self.page_token

    def request(self) -> pb.GetModelHistoryRequest:
        if self.page_token:  # the next page of the history being fetched
            return pb.GetModelHistoryRequest(scope=scope(self.session_id, None, False), page_token=self.page_token)
        msg = pb.GetModelHistoryRequest(scope=scope(self.session_id, None, False), from_index=len(self.messages))
        if self.generation is not None:
            msg.if_generation = self.generation
        return msg

    def apply(self, response: pb.GetModelHistoryResponse) -> list[dict[str, Any]]:
        """Merge one page into the copy; returns the history so far (see `complete`)."""
        fresh = list(jsonvalue.loads_served(response.messages_json, what="messages"))
        if response.from_index == 0:
            self.messages = fresh
        else:
            del self.messages[response.from_index :]
            self.messages.extend(fresh)
        self.generation = response.replace_generation
        self.at_seq = at_seq_from_pb(response)
        self.page_token = response.next_page_token
        return self.messages


def history_request(
    session_id: str, at_seq: int | None, with_repair: bool, page_token: str = ""
) -> pb.GetModelHistoryRequest:
    """GetModelHistory for a whole history, page by page (follow `next_page_token`)."""
    return pb.GetModelHistoryRequest(scope=scope(session_id, at_seq, with_repair), page_token=page_token)


def transcript_request(
    session_id: str, at_seq: int | None, with_repair: bool, page_token: str = ""
) -> pb.GetTranscriptRequest:
    """GetTranscript, page by page (follow `next_page_token`)."""
    return pb.GetTranscriptRequest(scope=scope(session_id, at_seq, with_repair), page_token=page_token)


#: Most batches one coalesced writer message carries.
MAX_COALESCED_BATCHES = 256
MAX_COALESCED_BYTES = 1024 * 1024
"""Most bytes of batches one coalesced writer message carries. Batches that each fit the
server's message limit, merged without a bound, made a message past it: refused whole (ten
1 MiB batches under a 4 MiB limit), or past gRPC's 256 MiB, which grpc.aio reports as an
internal error that the writer took for a broken stream and re-sent without end. A batch
larger than this goes alone; beside a MiB of payload the per-message cost merging shares is
nothing."""


def coalesce(requests: list[pb.WriteRequest]) -> list[pb.WriteRequest]:
    """Merge runs of consecutive batch requests into `batches` requests, keeping order.

    Each batch stays atomic and acknowledged on its own; only the per-message cost is shared.
    Open and header requests keep their place between the runs. A run holds at most
    `MAX_COALESCED_BATCHES` batches and `MAX_COALESCED_BYTES` bytes of them (a batch larger
    than that is a run of its own).
    """
    out: list[pb.WriteRequest] = []
    run: list[pb.WriteBatch] = []
    run_bytes = 0
    for request in requests:
        if request.WhichOneof("kind") != "batch":
            _flush_run(run, out)
            run_bytes = 0
            out.append(request)
            continue
        size = request.batch.ByteSize()
        if run and (len(run) >= MAX_COALESCED_BATCHES or run_bytes + size > MAX_COALESCED_BYTES):
            _flush_run(run, out)
            run_bytes = 0
        run.append(request.batch)
        run_bytes += size
    _flush_run(run, out)
    return out


def _flush_run(run: list[pb.WriteBatch], out: list[pb.WriteRequest]) -> None:
    """Append `run` to `out` as one request (a lone batch as itself), and empty it."""
    if len(run) == 1:
        out.append(pb.WriteRequest(batch=run[0]))
    elif run:
        out.append(pb.WriteRequest(batches=pb.WriteBatches(batches=run)))
    run.clear()
