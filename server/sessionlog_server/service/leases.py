"""Writer leases (SPEC §7): granting, proving, renewing and releasing them, and the leases that
open writer streams hold.

A lease is granted with a token known only to its holder: a secret returned once, of which the
database keeps only the sha256. It is random, or, for a grant asked for with a `request_id`
(AIP-155), derived from that id, so a retry of the grant whose answer was lost is told the same
token (`request_token`). Every later use of the lease (an append, a header
report, a renewal, a release) presents the token; the writer id is a label that takes nothing.
The epoch stays the fence: every grant gets a new one, and the commit transaction checks it.

Each use case has two faces, named for whether they check the caller's access:
`*_for_caller` methods check the calling principal (write access, namespace) before any
per-session work; the others are the service's own (repair, stream keeper) and check nothing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import secrets
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TypeVar

import structlog

from sessionlog.core import validate
from sessionlog.core.errors import OwnershipLost, SessionLogError, WriterHeld
from sessionlog.core.limits import Limits
from sessionlog_server.service import access, recent
from sessionlog_server.service.clock import now_ms
from sessionlog_server.service.committer import GroupCommitter
from sessionlog_server.service.live import LiveSession, LiveSessions
from sessionlog_server.service.metrics import Metrics
from sessionlog_server.service.reader import EventReader
from sessionlog_server.storage.recorder import EventRecorder, lease_not_held
from sessionlog_server.storage.records import SessionRecord

RENEWALS_PER_COMMIT = 200
"""Stream leases renewed in one transaction (a few milliseconds of the writer thread)."""

T = TypeVar("T")
log = structlog.get_logger("sessionlog.leases")

#: Random bytes in a lease token (256 bits: guessing one is not an attack).
TOKEN_BYTES = 32

REPAIR_WRITER = "sessionlog-repair"
"""The writer ids of the service's own repair leases are this, a dash and a random suffix."""
REPAIR_WAIT_S = 10.0
"""How long a caller's grant waits at most for a repair of the session to give its lease back
(at most the lease TTL: a repair whose instance died holds it until it lapses)."""
REPAIR_POLL_S = 0.05
"""How often a caller's grant looks again at a lease another instance's repair holds."""


def held_by_repair(error: WriterHeld) -> bool:
    """Whether WRITER_HELD names a repair lease of the service (this instance's or another's)."""
    return error.metadata.get("holder", "").startswith(f"{REPAIR_WRITER}-")


def new_token() -> str:
    """A fresh lease token (URL-safe text)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


REQUEST_TOKEN_PREFIX = b"sessionlog lease token from request_id v1\x00"
"""What `request_token` hashes first, so its digest is of no other use (a fixed domain)."""


def request_token(session_key: str, request_id: str) -> str:
    """The lease token a grant asked for with `request_id` (a UUID, checked) gets on the session
    keyed `session_key`: base64url of the sha256 of a fixed prefix, the key and the id (in lower
    case: one UUID, however spelt). One-way, so the hash the database keeps tells nothing of
    the id; the same for every retry of the call, so a retry whose first answer was lost finds
    the lease held under it and is told the token (`LeaseManager.grant`). As random as the id,
    and as secret: a random UUID has 122 random bits."""
    material = REQUEST_TOKEN_PREFIX + session_key.encode("utf-8") + b"\x00" + request_id.lower().encode("ascii")
    return base64.urlsafe_b64encode(hashlib.sha256(material).digest()).rstrip(b"=").decode("ascii")


def hash_token(token: str) -> str:
    """The hex sha256 the database keeps instead of the token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """A lease whose token was proven: its writer (a label) and its epoch (the fence)."""

    session_id: str
    namespace: str
    writer_id: str
    epoch: int
    token_hash: str


@dataclass(frozen=True, slots=True)
class Grant:
    """A lease just granted: the session row as it now stands and the holder's token."""

    record: SessionRecord
    token: str

    @property
    def holder(self) -> LeaseHolder:
        record = self.record
        return LeaseHolder(record.id, record.namespace, record.writer_id or "", record.epoch, hash_token(self.token))


@dataclass(eq=False, repr=False)
class LeaseManager:
    """Grants and checks writer leases, and keeps the leases of open writer streams alive."""

    recorder: EventRecorder
    committer: GroupCommitter
    reader: EventReader
    live: LiveSessions
    metrics: Metrics
    limits: Limits
    _: KW_ONLY
    catch_up: Callable[[LiveSession, SessionRecord], Awaitable[None]]
    """Brings a cached live session up to a row another instance may have moved on."""
    ttl_ms: int
    known_capacity: int
    """How many proven leases `_known` remembers (at least one)."""
    _known: OrderedDict[str, LeaseHolder] = field(init=False, default_factory=OrderedDict)
    """Leases proven or granted here, so an append checks its token without a database read."""
    _streams: dict[str, LeaseHolder] = field(init=False, default_factory=dict)
    """The lease each open writer stream holds, renewed by `keep_stream_leases`."""
    _repairs: dict[str, asyncio.Event] = field(init=False, default_factory=dict)
    """The sessions this instance is repairing, each set once its repair lease is given back."""

    # --- the caller's use cases (check access first) ----------------------------------------

    async def grant_for_caller(
        self, session_id: str, writer_id: str | None, *, takeover: bool, lease_token: str = "", request_id: str = ""
    ) -> Grant:
        """Grant the caller the lease (FAILED_PRECONDITION while another live writer holds it).

        Checks write access and the session's namespace before anything else. `lease_token`,
        if the caller still holds the live lease, takes it again at a new epoch; so does a
        `request_id` the lease was granted for (a retry: `grant`).
        """
        access.require_write("taking a writer lease")
        record = await self.reader.caller_session(session_id, self.limits)
        validate.check_writer_id(writer_id, self.limits)
        validate.check_request_id(request_id)
        return await self._grant_after_repair(
            record.id, writer_id, takeover=takeover, lease_token=lease_token, request_id=request_id
        )

    async def _grant_after_repair(
        self, session_id: str, writer_id: str | None, *, takeover: bool, lease_token: str, request_id: str
    ) -> Grant:
        """`grant`, after a repair of the session the service is making (SPEC §8: at start-up,
        or when a dead writer's lease lapsed) has given its lease back. The repair is no writer
        the caller could wait for: WRITER_HELD named it with its lease's expiry, a TTL away,
        though it ends within moments, and a harness resuming a crashed session (what the
        repair is for) waited that long or took the lease over. The wait is bounded
        (`REPAIR_WAIT_S`, at most the TTL); past it the caller hears WRITER_HELD as before."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(REPAIR_WAIT_S, self.ttl_ms / 1000)
        while True:
            try:
                return await self.grant(
                    session_id, writer_id, takeover=takeover, lease_token=lease_token, request_id=request_id
                )
            except WriterHeld as exc:
                left = deadline - loop.time()
                if not held_by_repair(exc) or left <= 0:
                    raise
            done = self._repairs.get(session_id)
            if done is None:  # another instance's repair: look again shortly
                await asyncio.sleep(min(REPAIR_POLL_S, left))
                continue
            with contextlib.suppress(TimeoutError):  # this instance's repair says when it ends
                async with asyncio.timeout(left):  # not wait_for: Python 3.11's can swallow a cancel
                    await done.wait()

    def repair_lease(self, session_id: str) -> RepairLease:
        """The service's own lease for repairing a session, held while `RepairLease.around`'s work
        runs and given back after it; a caller asking for the lease meanwhile waits for that
        (`grant_for_caller`)."""
        return RepairLease(self, session_id)

    async def prove_for_caller(self, session_id: str, lease_token: str, action: str) -> LeaseHolder:
        """The lease `lease_token` holds on the caller's session, or OWNERSHIP_LOST.

        Checks write access and the namespace first; a token granted or proven here before is
        checked in memory, any other against the session row (another instance may have
        granted it). A stale cache entry is harmless: the commit re-checks the epoch in SQL.
        """
        access.require_write(action)
        key = access.session_key(session_id, self.limits)
        presented = hash_token(lease_token) if lease_token else ""
        known = self._known.get(key)
        if known is not None:
            access.check_namespace(session_id, known.namespace)
            if presented and hmac.compare_digest(known.token_hash, presented):
                self._known.move_to_end(key)
                return known
        record = await self.reader.caller_session(session_id, self.limits)
        stored = record.lease_token_hash
        if not presented or stored is None or not hmac.compare_digest(stored, presented):
            raise lease_not_held(session_id, presented=bool(presented))
        holder = LeaseHolder(record.id, record.namespace, record.writer_id or "", record.epoch, stored)
        self._remember(holder)
        if self.live.peek(record.id) is not None:  # cached here before: it may name an older holder
            await self._adopt(record)
        return holder

    async def renew_for_caller(self, session_id: str, lease_token: str) -> SessionRecord:
        """Extend the caller's lease (a unary writer's heartbeat)."""
        holder = await self.prove_for_caller(session_id, lease_token, "renewing a lease")
        return await self.renew(holder)

    async def release_for_caller(self, session_id: str, lease_token: str) -> None:
        """Give the caller's lease back, so another writer can take it at once."""
        holder = await self.prove_for_caller(session_id, lease_token, "releasing a lease")
        await self.release(holder)

    # --- the service's own use cases (no caller check) ---------------------------------------

    async def grant(
        self, session_id: str, writer_id: str | None, *, takeover: bool, lease_token: str = "", request_id: str = ""
    ) -> Grant:
        """Grant a lease on the session keyed `session_id`, with no caller check (the service's
        own repairs use it directly; the caller's use cases pass the key of a checked session).

        With a `request_id` (checked by the caller) the new token is `request_token`'s, and it
        is presented as well as `lease_token`: a retry of a grant whose answer was lost finds
        the lease held under it and takes it again like its holder (a new epoch, the same
        token); a retry after another writer took the lease is refused like anyone else.
        """
        wid = writer_id or str(uuid.uuid4())
        fresh = request_token(session_id, request_id) if request_id else new_token()
        presented = [hash_token(token) for token in (lease_token, request_id and fresh) if token]
        now = now_ms()
        previous = await self.reader.session(session_id) if takeover else None
        record = await self.committer.run_in_writer(
            lambda: self.recorder.acquire_lease(
                session_id,
                wid,
                takeover=takeover,
                now=now,
                ttl_ms=self.ttl_ms,
                token_hash=hash_token(fresh),
                presented_hashes=presented,
                claims_lease=bool(lease_token),
            )
        )
        # The holder taking its own lease again keeps its token; anyone else gets the fresh one.
        token = fresh if record.lease_token_hash == hash_token(fresh) else lease_token
        if previous is not None and previous.lease_live(now) and previous.lease_token_hash != record.lease_token_hash:
            self.metrics.leases_taken_over.inc()
        grant = Grant(record, token)
        self._remember(grant.holder)
        self._streams.pop(session_id, None)  # a stream's older grant is fenced now
        await self._adopt(record)
        log.info(
            "lease granted",
            **access.session_log_fields(session_id),
            writer_id=wid,
            epoch=record.epoch,
            takeover=takeover,
        )
        return grant

    async def refresh(self, holder: LeaseHolder) -> bool:
        """Bring this instance's view of the holder's session to the database's row; whether
        its fold moved (it was not the log as it stands).

        A unary writer's calls may reach any instance (a load balancer, a reconnect that lands
        on another worker): the one answering may have cached the session before the writer's
        calls elsewhere moved its log on. The commit's fence keeps such a stale fold from
        writing; this is what lets the call be answered on the log as it stands instead.
        """
        return await self._adopt(await self.reader.session(holder.session_id))

    async def renew(self, holder: LeaseHolder) -> SessionRecord:
        """Extend a proven lease, with no caller check (the stream lease keeper uses it)."""
        session_id, token_hash, epoch = holder.session_id, holder.token_hash, holder.epoch
        try:
            return await self.committer.run_in_writer(
                lambda: self.recorder.renew_lease(session_id, token_hash, epoch, now=now_ms(), ttl_ms=self.ttl_ms)
            )
        except OwnershipLost:
            self._forget(holder)
            raise

    async def release(self, holder: LeaseHolder) -> None:
        """Give a lease back if it is still current, with no caller check."""
        self._forget(holder)
        await self.committer.run_in_writer(
            self.recorder.release_lease, holder.session_id, holder.token_hash, holder.epoch
        )
        live = self.live.peek(holder.session_id)
        if live is not None and live.writer_id == holder.writer_id and live.epoch == holder.epoch:
            self.live.set_writer(live, None)

    # --- writer streams ----------------------------------------------------------------------

    def hold_for_stream(self, holder: LeaseHolder) -> None:
        """An open writer stream holds this lease: renew it for as long as the stream lasts.

        Not over a later grant's stream: two opens granted one after the other (a retry of an
        open given up, beside that open reaching the service late) may come here in either
        order, and the later lease, left unrenewed, lapsed under its live stream."""
        current = self._streams.get(holder.session_id)
        if current is not None and current.epoch > holder.epoch:
            return  # this grant was fenced by that one: its stream's commits are refused
        self._streams[holder.session_id] = holder

    async def end_stream(self, holder: LeaseHolder, *, broken: bool) -> None:
        """A writer stream ended: give its lease back, or, if the stream broke, let it lapse.

        A stream the writer ended (or the service ended with an error it reported) releases
        its lease. A broken stream (the writer's process or connection died, the service is
        stopping, or its error was UNAVAILABLE: writer_stream.py) stops renewing it instead:
        the writer may reconnect with its token while the lease is live, and once it lapses,
        an open turn is repaired exactly as for a unary writer (SPEC §8).
        """
        if self._streams.get(holder.session_id) != holder:
            return  # taken over, or granted again by a reconnect
        del self._streams[holder.session_id]
        if broken:
            log.info(
                "writer stream ended without close; its lease is left to a reconnect or to lapse",
                **access.session_log_fields(holder.session_id),
                epoch=holder.epoch,
            )
            return
        await self.release(holder)

    async def keep_stream_leases(self) -> None:
        """Renew the leases of open writer streams, so they last as long as the stream (a task).

        Every TTL/3 all of them are renewed, `RENEWALS_PER_COMMIT` to a transaction: with
        thousands of open streams, one transaction each made the writer thread fsync thousands
        of times in a row while appends queued behind it (stalls of hundreds of milliseconds
        every few seconds); a chunk at a time lets group commits run in between.
        """
        interval = max(self.ttl_ms / 3000, 0.05)
        while True:
            await asyncio.sleep(interval)
            holders = list(self._streams.values())
            for start in range(0, len(holders), RENEWALS_PER_COMMIT):
                await self._renew_streams(holders[start : start + RENEWALS_PER_COMMIT])

    async def _renew_streams(self, holders: list[LeaseHolder]) -> None:
        leases = [(h.session_id, h.token_hash, h.epoch) for h in holders]
        try:
            held = await self.committer.run_in_writer(
                self.recorder.renew_leases, leases, now=now_ms(), ttl_ms=self.ttl_ms
            )
        except SessionLogError as exc:
            log.warning("lease renewal failed", streams=len(holders), error=str(exc))
            return
        for holder, current in zip(holders, held, strict=True):
            if not current:  # taken over or released: the stream's next write is refused
                self._forget(holder)
                if self._streams.get(holder.session_id) == holder:
                    del self._streams[holder.session_id]

    @property
    def open_stream_leases(self) -> int:
        return len(self._streams)

    # --- internals ---------------------------------------------------------------------------

    async def _adopt(self, record: SessionRecord) -> bool:
        """Make the live session match `record`, a session row just read or written: its fold
        caught up with what other instances appended, its lease holder the row's. Whether the
        fold moved (its next seq was not the row's).

        Who holds a lease is learned here from grants; a lease granted by another instance
        (a takeover there) is learned from the row, else this instance would go on refusing
        the new holder in favour of the one it last granted.
        """
        session_id = record.id
        live = await self.live.get(session_id)
        async with live.lock:
            await live.wait_idle()
            before = live.fold.next_seq
            if before > record.next_seq:
                self.live.invalidate(session_id)  # ahead of the log: batches this instance lost
                live = await self.live.get(session_id)
            await self.catch_up(live, record)  # another instance wrote meanwhile
            moved = live.fold.next_seq != before
        live.record = record
        live.epoch = record.epoch
        self.live.set_writer(live, record.writer_id)
        return moved

    def _remember(self, holder: LeaseHolder) -> None:
        recent.remember(self._known, holder.session_id, holder, self.known_capacity)

    def _forget(self, holder: LeaseHolder) -> None:
        if self._known.get(holder.session_id) == holder:
            del self._known[holder.session_id]


class RepairLease:
    """`LeaseManager.repair_lease`: the grant before `around`'s work, its release after it, and,
    for a caller's grant that meets the repair's lease, an event set once it is given back. No
    `async with` block: compiled, one whose exit awaits re-raises the wrong exception (`around`)."""

    def __init__(self, leases: LeaseManager, session_id: str) -> None:
        self._leases = leases
        self._session_id = session_id
        self._done = asyncio.Event()
        self._grant: Grant | None = None

    async def _take(self) -> Grant:
        repairs = self._leases._repairs
        repairs.setdefault(self._session_id, self._done)
        try:
            writer_id = f"{REPAIR_WRITER}-{uuid.uuid4().hex[:8]}"
            self._grant = await self._leases.grant(self._session_id, writer_id, takeover=False)
        except BaseException:
            self._end()
            raise
        return self._grant

    async def _give_back(self) -> None:
        try:
            if self._grant is not None:
                await self._leases.release(self._grant.holder)
        finally:
            self._end()

    async def around(self, work: Callable[[Grant], Awaitable[T]]) -> T:
        """`work(grant)` under the lease, given back after it however it ended: the block
        `async with` would be, for compiled callers. Compiled, an `async with` whose exit awaits
        while an exception leaves the block raises whatever exception the thread handles by then
        (None, which corrupts memory, or another coroutine's; docs/architecture/compiled-build.md),
        so the release is awaited here outside the handler and the exception raised by name."""
        grant = await self._take()
        try:
            result = await work(grant)
        except BaseException as exc:
            failure: BaseException | None = exc
        else:
            failure = None
        await self._give_back()
        if failure is not None:
            raise failure
        return result

    def _end(self) -> None:
        """Tell the callers waiting on this repair (if it was the session's first) it ended."""
        if self._leases._repairs.get(self._session_id) is self._done:
            del self._leases._repairs[self._session_id]
            self._done.set()
