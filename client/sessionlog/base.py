"""Plumbing shared by the sync client (client.py) and the asyncio client (aio.py).

The two clients differ only in how they wait: threads and concurrent futures, or the event
loop and asyncio futures. Everything else is defined here once (kurrentdbclient's pattern):

- `ClientBase`: the options a client is made with, its channel and its stub (each client
  says only how its kind of channel is opened);
- `Call`: each unary call as the stub method it uses, its request, how its response is read
  and whether it may be retried; `Paged`: the same for calls read page by page; `EventCursor`:
  where a broken `ReadEvents` goes on from, and `no_page`: a read that waited its timeout for a
  page;
- `RetryPolicy`: how idempotent calls are retried on UNAVAILABLE (reads; appends, whose
  events always carry eventIds; creates and forks, which always name their new session; lease
  grants and resumes, which always carry a request_id; a writer's first open, which carries one
  too), and how writers back off while reconnecting; `Budget`: a unary call's timeout, the
  budget of all its attempts;
- `Acknowledged`: per lease token, where the acknowledgements of the unary appends end (sent
  with each append, so a restored database refuses the writer: ACKNOWLEDGED_PAST_LOG);
- `LeaseKeeper`: a unary writer's lease, kept by heartbeats, and the loss that ends it;
- `WriterCore`: the streaming writer's bookkeeping (batch ids, the pending batches in send
  order, acknowledgements, failure, what a reconnect re-sends, and the check that no other
  writer held the session while the stream was down); `Recovery`: the reconnects of a
  writer whose stream broke.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from sessionlog import convert, session_info
from sessionlog.auth import bearer_token, channel_credentials
from sessionlog.core import jsonvalue
from sessionlog.core.errors import (
    LimitExceeded,
    OwnershipLost,
    SessionLogError,
    Unavailable,
    WriterClosed,
    WriterHeld,
)
from sessionlog.core.events import Event, NewEvent
from sessionlog.core.headers import check_header
from sessionlog.requests import (
    DEFAULT_TARGET,
    MAX_MESSAGE_BYTES,
    AppendResult,
    EventLike,
    ForkInfo,
    HeaderReport,
    HistoryCopy,
    ResumeInfo,
    acquire_from_pb,
    acquire_request,
    append_request,
    batch_request,
    check_target,
    create_request,
    fork_from_pb,
    header_report_from_pb,
    header_request,
    header_write_request,
    history_request,
    named_session,
    open_request,
    read_request,
    release_request,
    renew_request,
    request_view_from_pb,
    resume_from_pb,
    resume_request,
    scope,
    seq_argument,
    session_argument,
    surface_from_pb,
    transcript_request,
    with_event_ids,
    writer_open_refused,
)
from sessionlog.unanswered import UnansweredOpens
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog.v1.session_service_pb2_grpc import SessionServiceStub

T = TypeVar("T")
R = TypeVar("R")


# --- retrying ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`attempts` in all (the first included), waiting `initial_delay` doubling up to `max_delay`."""

    attempts: int = 8
    initial_delay: float = 0.05
    max_delay: float = 1.0

    def delay(self, attempt: int) -> float:
        """The wait after failed attempt number `attempt` (1-based)."""
        return float(min(self.initial_delay * 2 ** max(0, attempt - 1), self.max_delay))

    def retries(self, error: SessionLogError, attempt: int) -> bool:
        """Whether to try again after `error` ended attempt `attempt` (only an unknown outcome)."""
        return isinstance(error, Unavailable) and attempt < self.attempts

    def wait_after(self, error: SessionLogError, attempt: int) -> float:
        """The wait before trying again after `error` ended attempt `attempt`; raises `error`
        when it is not to be retried."""
        if not self.retries(error, attempt):
            raise error from None
        return self.delay(attempt)


DEFAULT_RETRY = RetryPolicy()
NO_RETRY = RetryPolicy(attempts=1)

#: How a writer whose stream broke reconnects: long enough to ride out a service restart.
RECONNECT = RetryPolicy(attempts=120, initial_delay=0.05, max_delay=0.5)


class Budget:
    """A unary call's `timeout` as the budget of the whole call, its retries and their waits
    included: each attempt gets what is left of it as its gRPC deadline, and no attempt starts
    once it is spent (nor a wait that would spend it). Each attempt had the whole timeout: a
    call to a service that never answered was tried `policy.attempts` times over, 8 times its
    timeout and the backoff (minutes with the 30 s default) before it failed.

    A call that fails for want of time raises the last attempt's error (its class and reason:
    Unavailable, TRANSPORT_ERROR for gRPC's DEADLINE_EXCEEDED; the outcome is unknown) told as
    "the call's timeout of T s was spent after N attempts: ...". `timeout` None: no budget,
    each attempt without a deadline.
    """

    def __init__(self, timeout: float | None, policy: RetryPolicy) -> None:
        self._timeout = timeout
        self._policy = policy
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._attempts = 0

    def next_attempt(self) -> float | None:
        """Count an attempt; its timeout: what is left of the budget."""
        self._attempts += 1
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def wait_after(self, error: SessionLogError) -> float:
        """The wait before the next attempt after `error` ended this one; raises `error` when it
        is not to be retried, told as the budget spent when the time for another attempt is."""
        if isinstance(error, Unavailable) and self._spent(0.0):
            raise self._spent_error(error) from None
        delay = self._policy.wait_after(error, self._attempts)
        if self._spent(delay):
            raise self._spent_error(error) from None
        return delay

    def unanswered(self) -> NoOpenAnswer:
        """The error of a writer's first open whose attempt got no answer: that attempt had what
        was left of this budget, so the budget is spent; told once, with the whole timeout. Told
        as a spent budget ("the call's timeout of 1 s was spent after 1 attempt: ..."), it named
        the timeout twice, the second time as the attempt's share of it (0.999997 s)."""
        assert self._timeout is not None  # without a timeout, no attempt has one to run out of
        return no_open_answer(self._timeout)

    def _spent(self, delay: float) -> bool:
        """Whether no time is left for an attempt after `delay`."""
        return self._deadline is not None and time.monotonic() + delay >= self._deadline

    def _spent_error(self, error: SessionLogError) -> SessionLogError:
        attempts = f"{self._attempts} attempt{'s' if self._attempts > 1 else ''}"
        spent = error.located(f"the call's timeout of {self._timeout:g} s was spent after {attempts}")
        if hasattr(error, "grpc_code"):
            spent.grpc_code = error.grpc_code  # type: ignore[attr-defined]
        spent.__cause__ = error
        return spent


# --- the client --------------------------------------------------------------------------


class ClientBase:
    """What both clients hold: the target, the call timeout, the retry policy, the channel and
    the stub. Each client says only how its kind of channel (sync or asyncio) is opened."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        credentials: Any = None,
        timeout: float | None = 30.0,
        token: str | None = None,
        ca_file: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        """Connect to `target`; `token` authenticates, `ca_file` (or `credentials`, a
        grpc.ChannelCredentials) turns on TLS; `retry` says how idempotent calls are retried
        on UNAVAILABLE. `timeout` (seconds, None for none) is the budget of each unary call
        (each page of a listing or projection), its retries and their waits included
        (`Budget`), and of the wait for each page of `read_events` (`no_page`); writer streams
        and subscriptions have their own reconnect policy. A
        ValueError for an empty target or a port past 65535 (`check_target`). A writer's first
        open is retried by `retry` too (`writer`'s `open_retry`)."""
        check_target(target)
        self.target = target
        self.timeout = timeout
        self.retry = retry
        self._closing = threading.Event()
        """Set by `close()`: the channel is gone, every later call says so (`_check_open`), and a
        wait to try again, or a lease writer's wait for its next heartbeat, ends (the sync
        client's `_pause`, the asyncio client's `_pause`)."""
        self._waits = threading.Condition()
        """What the sync client's waits to try again and its lease writers' waits between
        heartbeats wait on (`SessionLogClient._pause`): notified by `close()` and by a waiter's
        own end (`_wake_waits`). The asyncio client's waits are tasks `close()` cancels instead
        (`AsyncSessionLogClient._ended_by_close`)."""
        self._writers: weakref.WeakSet[Any] = weakref.WeakSet()
        """The streaming writers opened and not yet closed: `close()` ends them (`_end_writers`)."""
        self._writers_lock = threading.Lock()
        """Makes a writer's registration (`_add_writer`) and `close()` one before the other: a sync
        client's close may come from another thread while a writer opens."""
        self._acknowledged = Acknowledged()
        """Where the unary appends' acknowledgements end, per lease token (`append`)."""
        self._unanswered = UnansweredOpens()
        """The request ids of writers' first opens that failed UNAVAILABLE, which the next writer
        on their session sends again (unanswered.py)."""
        self.channel, calls = self._open_channel(
            target, credentials or channel_credentials(ca_file), bearer_token(token)
        )
        self.stub = SessionServiceStub(calls)

    def _open_channel(self, target: str, credentials: Any, token: str | None) -> tuple[Any, Any]:
        """The channel to close, and the channel to make calls on (the same one, or it with the
        token interceptor); `credentials` None means a plain channel."""
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        """True once `close()` was called: every later call raises RuntimeError."""
        return self._closing.is_set()

    def _end_writers(self) -> None:
        """What `close()` does before the channel goes: mark the client closed and abandon its open
        writers, as their `cancel()` would: batches in flight fail as of unknown outcome, saying
        the client was closed, and later calls say the writer was closed by that."""
        with self._writers_lock:
            self._closing.set()
            writers = list(self._writers)
        error = closed_with_writer_open()
        for writer in writers:
            writer._abandon(error)

    def _add_writer(self, writer: Any) -> None:
        """Register a writer just opened, for `close()` to end (`_end_writers`). A close that came
        after its open and before this (from another thread) ends it here instead, as it ended
        the others, and the open raises the closed client's RuntimeError, as an open the close
        came during does: the writer was left out of the close, and went on to fail with gRPC's
        CANCELLED "Channel closed!" once its stream broke."""
        with self._writers_lock:
            if not self.closed:
                self._writers.add(writer)
                return
        writer._abandon(closed_with_writer_open())
        self._check_open()

    def _check_open(self) -> None:
        """A call on a closed client raises RuntimeError, in both clients alike (gRPC's own errors
        for it differ by kind of channel and name no sessionlog object)."""
        if self.closed:
            raise RuntimeError("the client is closed")


def closed_with_writer_open() -> WriterClosed:
    """What a writer the client's close ended fails with (its batches in flight, and, told as an
    earlier error, its later calls): abandoned by the close (`_end_writers`, `_add_writer`), or,
    a sync writer whose stream the closing channel broke first, by its own reader. CANCELLED,
    not retryable: an Unavailable (STREAM_ENDED, as when the service ends a stream) read as
    worth retrying, on a client that is closed."""
    return WriterClosed(
        "CANCELLED",
        "the client was closed, and its writers with it: a batch not acknowledged may or may not be in the log",
    )


# --- unary calls ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One unary call: `stub.<method>(request)`, its response read by `read`."""

    method: str
    request: Any
    read: Callable[[Any], T]
    idempotent: bool


@dataclass(frozen=True, slots=True)
class Paged(Generic[T]):
    """A call read page by page: `request(token)` for each page, `read(response)` its items and
    the next page's token (empty on the last page)."""

    method: str
    request: Callable[[str], Any]
    read: Callable[[Any], tuple[list[T], str]]


def _same(response: Any) -> Any:
    return response


def create_session(
    session_id: str | None, cwd: str | None, metadata: dict[str, Any] | None
) -> Call[session_info.SessionInfo]:
    """A create is idempotent: it always names its session (a uuid when the caller gives no
    id), and the service answers a create asked for again, before anything was written to the
    session, with the session it made (SPEC §2), so a retry after an unknown outcome cannot
    create twice, nor mistake another's session for its own."""
    request = create_request(named_session(session_id, "session_id"), cwd, metadata)
    return Call("CreateSession", request, lambda r: session_info.session_from_pb(r.session), idempotent=True)


def get_session(session_id: str) -> Call[session_info.SessionInfo]:
    request = pb.GetSessionRequest(session_id=session_argument(session_id))
    return Call("GetSession", request, lambda r: session_info.session_from_pb(r.session), idempotent=True)


def list_sessions(parent_session_id: str | None, page_size: int) -> Paged[session_info.SessionInfo]:
    def request(token: str) -> pb.ListSessionsRequest:
        parent = session_argument(parent_session_id, "parent_session_id") if parent_session_id else ""
        return pb.ListSessionsRequest(page_size=page_size, page_token=token, parent_session_id=parent)

    return Paged(
        "ListSessions", request, lambda r: ([session_info.session_from_pb(s) for s in r.sessions], r.next_page_token)
    )


def acquire_lease(
    session_id: str, writer_id: str | None, takeover: bool, lease_token: str
) -> Call[session_info.LeaseInfo]:
    """The granted lease holds its token; `lease_token` (of a live lease held) takes it again.

    A grant is idempotent: it carries a request_id made here once (a random UUID, as secret as
    the token derived from it), sent again by every retry, so a retry after an unknown outcome
    gets the lease the lost answer granted, with its token (SPEC §7, AIP-155), where it was
    refused WRITER_HELD until that lease lapsed."""
    request = acquire_request(session_id, writer_id, takeover, lease_token, str(uuid.uuid4()))
    return Call("AcquireLease", request, acquire_from_pb, idempotent=True)


ACKNOWLEDGED_TOKENS = 4096
"""Lease tokens `Acknowledged` remembers at most (the least recently used go first)."""


class Acknowledged:
    """Per lease token, the highest `next_seq` the service acknowledged to a client's unary
    appends under it: each append sends it (`acknowledged_next_seq`), so a database restored
    from a backup taken before some of them, which still holds the lease, refuses the writer
    with ACKNOWLEDGED_PAST_LOG instead of giving those seqs to other events. It only grows, so
    it holds for appends sent while others are in flight, where `expected_next_seq` cannot.

    A token forgotten (released, or pushed out past `ACKNOWLEDGED_TOKENS`) sends nothing: its
    appends are checked as an older client's are, not at all. Shared by a sync client's threads.
    """

    def __init__(self, capacity: int = ACKNOWLEDGED_TOKENS) -> None:
        self._capacity = capacity
        self._next_seqs: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str) -> int | None:
        """Where the acknowledgements under `token` end; None if none was seen (or remembered)."""
        with self._lock:
            return self._next_seqs.get(token)

    def saw(self, token: str, next_seq: int) -> None:
        """An append under `token` was acknowledged, the log's next seq after it `next_seq`."""
        if not token:
            return
        with self._lock:
            self._next_seqs[token] = max(next_seq, self._next_seqs.get(token, next_seq))
            self._next_seqs.move_to_end(token)
            while len(self._next_seqs) > self._capacity:
                self._next_seqs.popitem(last=False)

    def forget(self, token: str) -> None:
        """The lease under `token` was given back: nothing more is appended under it."""
        with self._lock:
            self._next_seqs.pop(token, None)


def append(
    session_id: str,
    lease: session_info.LeaseInfo,
    events: Iterable[EventLike],
    expected_next_seq: int | None,
    acknowledged: Acknowledged,
) -> Call[AppendResult]:
    """An append is idempotent: every event gets an eventId here, so a retry cannot append twice.
    It says where the acknowledgements under its lease end, and its own moves that on."""
    request = append_request(
        session_id, lease, with_event_ids(events), expected_next_seq, acknowledged.get(lease.token)
    )

    def read(response: pb.AppendEventsResponse) -> AppendResult:
        acknowledged.saw(lease.token, response.next_seq)
        return AppendResult(list(response.seqs), response.next_seq)

    return Call("AppendEvents", request, read, idempotent=True)


def renew_lease(lease: session_info.LeaseInfo) -> Call[session_info.LeaseInfo]:
    """A heartbeat; the renewed lease keeps its token."""
    return Call("RenewLease", renew_request(lease), lambda r: session_info.lease_from_pb(r.lease, lease.token), True)


def release_lease(lease: session_info.LeaseInfo) -> Call[None]:
    return Call("ReleaseLease", release_request(lease), lambda r: None, idempotent=False)


def report_header(session_id: str, lease: session_info.LeaseInfo, header: dict[str, Any]) -> Call[HeaderReport]:
    request = header_request(session_id, lease, header)
    return Call("ReportRequestHeader", request, header_report_from_pb, idempotent=False)


def resume(session_id: str, writer_id: str | None, takeover: bool, lease_token: str) -> Call[ResumeInfo]:
    """A resume is idempotent as a grant is (`acquire_lease`: a request_id made once): a retry
    after an unknown outcome takes the lease again and is answered as the lost answer was,
    its repairs and seed boundary not written twice (SPEC §8)."""
    request = resume_request(session_id, writer_id, takeover, lease_token, str(uuid.uuid4()))
    return Call("ResumeSession", request, resume_from_pb, idempotent=True)


def fork(session_id: str, at_seq: int, new_session_id: str | None) -> Call[ForkInfo]:
    """A fork is idempotent: it always names its new session (a uuid when the caller gives no
    id), and the service answers a fork asked for again with the fork it made (SPEC §8), so a
    retry after an unknown outcome cannot fork twice. The answer carries the repair seqs."""
    request = pb.ForkSessionRequest(
        session_id=session_argument(session_id),
        at_seq=seq_argument(at_seq, "at_seq"),
        new_session_id=session_argument(named_session(new_session_id, "new_session_id"), "new_session_id"),
    )
    return Call("ForkSession", request, fork_from_pb, idempotent=True)


def model_history(session_id: str, at_seq: int | None, with_repair: bool) -> Paged[dict[str, Any]]:
    return Paged(
        "GetModelHistory",
        lambda token: history_request(session_id, at_seq, with_repair, token),
        lambda r: (list(jsonvalue.loads_served(r.messages_json, what="messages")), r.next_page_token),
    )


def history_page(copy: HistoryCopy) -> Call[pb.GetModelHistoryResponse]:
    """The next request of a history copy's refresh (apply the response to the copy)."""
    return Call("GetModelHistory", copy.request(), _same, idempotent=True)


def transcript(session_id: str, at_seq: int | None, with_repair: bool) -> Paged[dict[str, Any]]:
    return Paged(
        "GetTranscript",
        lambda token: transcript_request(session_id, at_seq, with_repair, token),
        lambda r: (list(jsonvalue.loads_served(r.rows_json, what="rows")), r.next_page_token),
    )


def request_view(session_id: str, at_seq: int | None, with_repair: bool) -> Call[dict[str, Any]]:
    request = pb.GetRequestRequest(scope=scope(session_id, at_seq, with_repair))
    return Call("GetRequest", request, request_view_from_pb, idempotent=True)


def stats(session_id: str, at_seq: int | None, with_repair: bool) -> Call[dict[str, Any]]:
    request = pb.GetStatsRequest(scope=scope(session_id, at_seq, with_repair))
    return Call("GetStats", request, lambda r: dict(jsonvalue.loads(r.stats_json, what="stats")), idempotent=True)


def surface(session_id: str, at_seq: int | None, with_repair: bool) -> Call[dict[str, Any]]:
    request = pb.GetSurfaceRequest(scope=scope(session_id, at_seq, with_repair))
    return Call("GetSurface", request, surface_from_pb, idempotent=True)


def no_page(timeout: float) -> Unavailable:
    """The error of a read whose `ReadEvents` stream sent no page (nor its end) within the
    client's `timeout` of asking for one: TRANSPORT_ERROR, as a unary call that spent its
    timeout. The timeout bounds each page, not the whole read, which may take long for a long
    session; a read had no deadline at all, and one from a service that accepted the call and
    never answered waited forever."""
    return Unavailable(
        "TRANSPORT_ERROR",
        f"the read got no page within the client's timeout of {timeout:g} s (the service accepted the "
        "call and sent nothing more); the events before were delivered",
    )


class NoOpenAnswer(Unavailable):
    """A writer's open whose stream got no answer (`opened` or a refusal) within the client's
    timeout (`no_open_answer`): an Unavailable, TRANSPORT_ERROR, to its callers; a class of its
    own so the first open, whose attempts share the timeout, tells it once (`Budget.unanswered`)."""


def no_open_answer(timeout: float) -> NoOpenAnswer:
    """The error of a writer's open whose stream got no answer (`opened` or a refusal) within
    the client's `timeout`: TRANSPORT_ERROR, as a unary call that spent its timeout. A hung
    service (accepting connections, answering nothing) held an open until gRPC's keepalive gave
    the connection up, and then each retry of it, tens of seconds past any timeout."""
    return NoOpenAnswer(
        "TRANSPORT_ERROR",
        f"the writer's open got no answer within the client's timeout of {timeout:g} s",
    )


class EventCursor:
    """Where a `ReadEvents` stream stands, so a read broken by a transient failure goes on from
    the seq after the last event it delivered."""

    def __init__(self, session_id: str, from_seq: int, to_seq: int | None, page_size: int) -> None:
        self.session_id = session_id
        self.next_seq = from_seq
        self.to_seq = to_seq
        self.page_size = page_size

    def request(self) -> pb.ReadEventsRequest:
        return read_request(self.session_id, self.next_seq, self.to_seq, self.page_size)

    def attempts(self) -> Iterator[int]:
        """The attempt numbers to hand the retry policy: 1, 2, ..., and 1 again after an attempt
        that delivered events. A read broken after progress meets a new failure, not the same one
        again, so a long read that reopens now and then never runs out of retries while each
        failure still gets the policy's attempts (as the TypeScript client counts)."""
        attempt, seen = 0, self.next_seq
        while True:
            attempt = 1 if self.next_seq != seen else attempt + 1
            seen = self.next_seq
            yield attempt

    def events(self, response: pb.ReadEventsResponse) -> Iterator[Event]:
        for message in response.events:
            event = convert.event_from_pb(message)
            self.next_seq = event.seq + 1
            yield event


# --- unary writers ------------------------------------------------------------------------


MAX_HEARTBEAT_MS = 2**31 - 1
"""The longest heartbeat interval a unary writer takes, in milliseconds: the longest delay a
JavaScript timer keeps (a longer one fires at once, a busy loop), the same limit in both clients."""


def check_heartbeat(heartbeat: float | None) -> None:
    """A unary writer's heartbeat interval (seconds), when given, is a positive number of at most
    `MAX_HEARTBEAT_MS`: with 0 or less the writer renewed its lease in a busy loop, and NaN or
    infinity failed in the heartbeat itself, after the lease was taken (ValueError, before
    anything is sent)."""
    if heartbeat is None:
        return
    if (
        isinstance(heartbeat, bool)
        or not isinstance(heartbeat, (int, float))
        or not 0 < heartbeat * 1000 <= MAX_HEARTBEAT_MS
    ):
        raise ValueError(
            f"heartbeat must be a positive number of seconds, at most {MAX_HEARTBEAT_MS / 1000}, got {heartbeat!r}"
        )


def heartbeat_interval(lease: session_info.LeaseInfo, now_ms: int, every: float | None) -> float:
    """Seconds until a unary writer's next heartbeat: `every`, or a third of the lease's time left
    (so two heartbeats can fail before it lapses)."""
    if every is not None:
        return every
    return max(0.1, (lease.expire_time - now_ms) / 3000)


class LeaseKeeper:
    """A unary writer's state (sync and asyncio): its lease, renewed by heartbeats, what a resume
    returned, and the failure that ends it for good (nothing re-acquires the lease): OwnershipLost,
    or ACKNOWLEDGED_PAST_LOG (a restored database), after which the service released the lease."""

    def __init__(self, lease: session_info.LeaseInfo, resumed: ResumeInfo | None, heartbeat: float | None) -> None:
        self.lease = lease
        self.resumed = resumed
        self._every = heartbeat
        self._failure: SessionLogError | None = None
        self._closed = False

    def _failed(self, error: SessionLogError) -> None:
        """Note `error`, a call's, if it ends the writer: the first such one is what every later
        call raises (the heartbeat's OwnershipLost after a refusal released the lease is not)."""
        final = isinstance(error, OwnershipLost) or error.reason == "ACKNOWLEDGED_PAST_LOG"
        if final and self._failure is None:
            self._failure = error

    def _close_once(self) -> bool:
        """Mark the writer closed; False if it already was: a second close (one by hand inside
        a `with` block, then the block's) does nothing, instead of releasing a lease it no
        longer holds and failing with OwnershipLost."""
        first = not self._closed
        self._closed = True
        return first

    def _check(self) -> None:
        """Raise the loss that ended the writer, or RuntimeError once it is closed."""
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise RuntimeError("the writer is closed")

    def _next_beat(self) -> float:
        """Seconds until the next heartbeat."""
        return heartbeat_interval(self.lease, int(time.time() * 1000), self._every)


# --- the streaming writer's bookkeeping ----------------------------------------------------


class Settable(Protocol):
    """What WriterCore needs of a future: concurrent.futures.Future and asyncio.Future both."""

    def done(self) -> bool: ...
    def set_result(self, result: Any, /) -> None: ...
    def set_exception(self, exception: BaseException, /) -> None: ...


@dataclass(slots=True)
class Pending:
    """A batch or header report sent and not yet acknowledged."""

    batch_id: int
    request: pb.WriteRequest
    future: Settable


def check_max_in_flight(max_in_flight: int) -> None:
    """A streaming writer's in-flight limit is a positive integer: with 0 no batch would ever get
    a slot, and every append would wait forever (ValueError, before anything is sent)."""
    if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
        raise ValueError(f"max_in_flight must be a positive integer, got {max_in_flight!r}")


@dataclass
class WriterCore:
    """A streaming writer's state, without I/O (the clients hold their own lock or loop).

    Every batch keeps its request until acknowledged, so a reconnect re-sends exactly what is
    pending, with the same eventIds; acknowledgements resolve pendings by batch id. A reconnect
    presents the lease token; if another writer held the lease meanwhile (the service answers
    WRITER_HELD, or OWNERSHIP_LOST once that writer's lease is gone too; a service that granted
    a fresh token instead is caught by `_lost_meanwhile`) the writer fails with OwnershipLost
    instead of carrying on quietly.
    """

    session_id: str
    writer_id: str | None
    create_if_missing: bool
    lease_token: str = ""
    """The token of a live lease the caller already holds (`resume`'s or `acquire_lease`'s): the
    first `open` presents it, so the writer takes that lease again instead of finding the session
    held by it (WRITER_HELD) until it lapses. Empty: take the lease afresh."""
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    """What makes the first `open` safe to retry (AIP-155, as `acquire_lease`'s): made once per
    writer, sent by every attempt of its first open, so an attempt whose `opened` was lost is
    answered by the next with that lease, under the same token, a resume written once. As
    secret as the token derived from it; reconnects send none (`open_request`)."""
    pending: deque[Pending] = field(default_factory=deque)
    lease: session_info.LeaseInfo | None = None
    next_seq: int = 0
    resumed: ResumeInfo | None = None
    failure: SessionLogError | None = None
    closed: bool = False
    reconnects: int = 0
    """How many times the stream broke and was opened again (re-sending what was pending)."""
    reconnect_attempts: int = 0
    """Reconnect attempts spent since the writer last made progress (`Recovery`)."""
    opened_at: float = 0.0
    """When the stream last opened (monotonic seconds)."""
    max_message_bytes: int = MAX_MESSAGE_BYTES
    """The largest message the writer sends (its channel's limit, and the service's default)."""
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def check_open(self) -> None:
        """Raise the writer's failure (told as an earlier one), or RuntimeError once it is closed."""
        if self.failure is not None:
            raise failed_earlier(self.failure)
        if self.closed:
            raise RuntimeError("the writer is closed")

    def check_failure(self) -> None:
        """Raise the writer's failure, if it failed."""
        if self.failure is not None:
            raise self.failure

    def add_batch(self, events: Sequence[NewEvent], expected_next_seq: int | None, future: Settable) -> Pending:
        """The batch's request, pending; one over gRPC's message size is refused here, unsent
        (MESSAGE_TOO_LARGE): sent, the asyncio writer was told of an internal error, like a
        stream whose server died, and reconnected to send it again without end."""
        batch_id = next(self._ids)
        request = batch_request(batch_id, events, expected_next_seq)
        size = request.ByteSize()
        if size > self.max_message_bytes:
            raise LimitExceeded(
                "MESSAGE_TOO_LARGE",
                f"the batch takes {size} bytes, over the {self.max_message_bytes} a message may: "
                "send it in smaller batches",
            )
        pending = Pending(batch_id, request, future)
        self.pending.append(pending)
        return pending

    def add_header(self, header: dict[str, Any], future: Settable) -> Pending:
        """The header report's request, pending; a header the service would refuse (not an
        object, `tools: []`, a `config.messages`, ...: `check_header`, the service's own rule)
        is refused here, and the writer goes on: sent, the refusal ended the writer, and every
        later call said so (a harness with no tools sent `tools: []`)."""
        check_header(header)
        batch_id = next(self._ids)
        pending = Pending(batch_id, header_write_request(batch_id, dict(header)), future)
        self.pending.append(pending)
        return pending

    def open_request(self, takeover: bool, resume: bool) -> pb.WriteRequest:
        """The `open` message; a reconnect presents the token of the lease it held, so it takes
        that lease again (at a new epoch) instead of finding it held until it lapses, and the
        seq its acknowledgements reached, so the header reports it re-sends are answered from
        the log (decided again, a pending change A -> B -> A logged B and A twice).

        The first open, and every retry of it, carries `request_id`; a reconnect does not: its
        token was derived from that id, so a lease that passed to another writer and lapsed
        would come back under it again, where its own token is refused OWNERSHIP_LOST (by a
        service that grants a fresh one instead, `_lost_meanwhile` tells the loss)."""
        if self.lease is None:
            return open_request(
                self.session_id,
                self.writer_id,
                takeover,
                self.create_if_missing,
                resume,
                self.lease_token,
                request_id=self.request_id,
            )
        return open_request(
            self.session_id, self.writer_id, takeover, self.create_if_missing, resume, self.lease.token, self.next_seq
        )

    def refused(self, error: SessionLogError) -> SessionLogError:
        """What an `open` the service refused raises: its error, worded for the caller (the
        first open's SESSION_NOT_FOUND names `create_if_missing`; `writer_open_refused`)."""
        return writer_open_refused(error, self.create_if_missing) if self.lease is None else error

    def resend(self) -> list[pb.WriteRequest]:
        """What a new stream must carry after its open: every request not yet acknowledged."""
        return [pending.request for pending in self.pending]

    def opened(self, response: pb.WriteResponse | None) -> None:
        """Take the stream's first response (None: the server closed it while opening)."""
        if response is None or response.WhichOneof("kind") != "opened":
            raise Unavailable("STREAM_ENDED", "the server closed the writer stream while opening")
        lease = session_info.lease_from_pb(response.opened.lease, response.opened.lease_token)
        if self.lease is not None and self._lost_meanwhile(lease):
            raise OwnershipLost(
                "OWNERSHIP_LOST",
                f"session {self.session_id!r} had another writer (epoch {self.lease.epoch} -> {lease.epoch}) "
                "while this writer reconnected",
                session_id=self.session_id,
                epoch=lease.epoch,
            )
        if self.lease is not None:
            self.reconnects += 1
        self.opened_at = time.monotonic()
        self.lease = lease
        self.writer_id = lease.writer_id
        self.next_seq = response.opened.next_seq
        if response.opened.HasField("resumed"):
            self.resumed = resume_from_pb(response.opened.resumed)

    def _lost_meanwhile(self, granted: session_info.LeaseInfo) -> bool:
        """Whether the lease a reconnect got is not the one this writer held.

        The service keeps the holder's token when the holder takes its lease again, and refuses
        a token whose lease passed on; a service that grants a fresh token instead tells the
        loss by it, and what the other writer wrote is not ours to continue from. Without a
        token (a service that grants none)
        only the epoch tells: a jump past the next one means another writer came in between.
        """
        assert self.lease is not None
        if self.lease.token:
            return granted.token != self.lease.token
        return granted.epoch != self.lease.epoch + 1

    def lost(self, error: SessionLogError) -> SessionLogError:
        """What a failed reconnect means for the writer: another live holder is a lost lease."""
        if isinstance(error, WriterHeld):
            return OwnershipLost(
                "OWNERSHIP_LOST",
                f"{error.message}; this writer lost its lease",
                session_id=self.session_id,
                holder=error.metadata.get("holder"),
                epoch=error.metadata.get("epoch"),
            )
        return error

    def acknowledged(self, response: pb.WriteResponse) -> list[tuple[Pending, Any]]:
        """The pendings `response` acknowledges, each with its result (removed from `pending`)."""
        kind = response.WhichOneof("kind")
        if kind == "header_ack":
            report = header_report_from_pb(response.header_ack.result)
            results: list[tuple[int, Any]] = [(response.header_ack.batch_id, report)]
            if report.appended and report.header_seq is not None:  # a logged header is an event too
                self.next_seq = max(self.next_seq, report.header_seq + 1)
        else:
            acks = response.acks.acks if kind == "acks" else [response.ack]
            results = [(ack.batch_id, AppendResult(list(ack.seqs), ack.next_seq)) for ack in acks]
            if acks:  # the log only grows: a retry's ack says where the durable log ended then
                self.next_seq = max(self.next_seq, acks[-1].next_seq)
        out = []
        for batch_id, result in results:
            pending = self._take(batch_id)
            if pending is not None:
                out.append((pending, result))
        if out:
            self.reconnect_attempts = 0  # progress: a break after this starts its attempts over
        return out

    def _take(self, batch_id: int) -> Pending | None:
        for index, pending in enumerate(self.pending):
            if pending.batch_id == batch_id:
                del self.pending[index]
                return pending
        return None  # acknowledged before a reconnect re-sent it

    def fail(self, error: SessionLogError) -> list[Pending]:
        """Record the failure; returns the pendings to fail with it (removed)."""
        if self.failure is None:
            self.failure = error
        failed = list(self.pending)
        self.pending.clear()
        return failed


def failed_earlier(
    failure: SessionLogError, what: str = "nothing of this call was sent: open a new writer"
) -> SessionLogError:
    """What a writer that failed raises for each later batch or header: the failure's class and
    reason (so code that tells failures apart by them still can), a message saying it is the
    writer's earlier failure, not this call's, and the failure as `__cause__`. Its metadata
    stays with the failure: it describes that call's events (as the TypeScript writer does).
    The service ends a writer's stream on any error it reports, so a writer takes nothing more
    after one; raising the failure itself again read as if the new batch had that fault."""
    again = type(failure).__new__(type(failure))
    again.__dict__.update(vars(failure))
    again.metadata, again.field = {}, None
    again.message = f"the writer was closed by an earlier error ({failure.reason}: {failure.message}); {what}"
    again.args = (again.message,)
    again.__cause__ = failure
    return again


def stream_ended() -> Unavailable:
    """The service ended a writer stream the writer had not closed (without an error: a server
    that ends streams this way when it stops). Transient, like a cut: the writer reconnects."""
    return Unavailable("STREAM_ENDED", "the server ended the writer stream before the writer closed it")


STREAM_STABLE_S = 30.0
"""A stream that stayed open this long before it broke is no failed reconnect (`Recovery`)."""


class Recovery:
    """The reconnects of a writer whose stream broke: iterating gives the wait before each
    attempt, for as long as the failure is transient (and only if the writer was open when the
    stream broke); each failed attempt is told with `failed`. `error` is what the writer fails
    with when the attempts end without a stream.

    The policy's attempts count from the writer's last progress (an acknowledgement, or a
    stream that stayed open STREAM_STABLE_S), not from each break: a stream that opens and
    breaks again at once (the service grants the lease, then fails every commit) was tried
    again without end, each open renewing the budget, and its batches never failed."""

    def __init__(self, core: WriterCore, policy: RetryPolicy, error: SessionLogError) -> None:
        self._core = core
        self._policy = policy
        self._open = not core.closed
        self.error = error
        if time.monotonic() - core.opened_at >= STREAM_STABLE_S:
            core.reconnect_attempts = 0
        self._refusal = None if isinstance(error, Unavailable) else error
        """The service's refusal of a call on the stream, which it then ended (on any error it reports)."""

    def __iter__(self) -> Iterator[float]:
        while self._core.reconnect_attempts < self._policy.attempts:
            if not (self._open and isinstance(self.error, Unavailable)):
                return
            self._core.reconnect_attempts += 1
            yield self._policy.delay(self._core.reconnect_attempts)

    def failed(self, error: SessionLogError) -> None:
        """A reconnect failed with `error`: another transient failure is tried again, anything
        else (another writer holds the session: ownership lost) ends the recovery."""
        self.error = error if isinstance(error, Unavailable) else self._core.lost(error)

    def rejections(self, failed: list[Pending]) -> list[tuple[Pending, SessionLogError]]:
        """What each of the pending calls `failed` fails with, the recovery over without a stream:
        `error`, except after the service refused a call: the first pending, the refused one,
        gets the refusal, and those sent after it, never answered, an error saying so
        (`failed_earlier`) rather than one describing another call's events (the TypeScript
        writer's `refused`). They repeated the refusal word for word."""
        if self._refusal is None or self.error is not self._refusal or not failed:
            return [(pending, self.error) for pending in failed]
        first, *rest = failed
        later = failed_earlier(self._refusal, "this batch was not acknowledged")
        return [(first, self._refusal), *((pending, later) for pending in rest)]


class WriterView:
    """What both streaming writers (sync and asyncio) say about themselves, read from their
    `WriterCore`."""

    _core: WriterCore

    @property
    def session_id(self) -> str:
        return self._core.session_id

    @property
    def lease(self) -> session_info.LeaseInfo:
        assert self._core.lease is not None
        return self._core.lease

    @property
    def next_seq(self) -> int:
        return self._core.next_seq

    @property
    def resumed(self) -> ResumeInfo | None:
        return self._core.resumed

    @property
    def reconnects(self) -> int:
        """How many times the stream broke and the writer reconnected and re-sent."""
        return self._core.reconnects


def settle(pending: Pending, result: Any) -> None:
    if not pending.future.done():
        pending.future.set_result(result)


def reject(pending: Pending, error: BaseException) -> None:
    if not pending.future.done():
        pending.future.set_exception(error)
