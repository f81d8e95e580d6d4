"""Per-namespace rate limiting: a token bucket per namespace, refilled continuously.

Checked before a batch is planned, so a refused batch writes nothing; the refusal is
RESOURCE_EXHAUSTED with the limit in its details. A write that planning then refuses (a bad
event, a stale expected seq; a header report as a batch) gets its tokens back (`spending`), and
so does one the commit's fence refuses as planned on a stale fold (`Charge`: nothing was
written, and a unary append is planned once more, charged then): only what is committed, or
may be, is charged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import TracebackType

from sessionlog.core.errors import LimitExceeded


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float


@dataclass(slots=True, init=False)
class Charge:
    """The tokens one write spent, given back at most once (the write was refused with nothing
    written, whichever step learnt it first).

    Also the block that plans the write (`RateLimiter.spending`): leaving it by an exception
    gives the tokens back. A class of its own rather than a generator-based context manager:
    it is made for every batch, and a generator's set-up cost ~2 % of an event's instructions
    at the bench's 16-stream load (bench/PROFILE.md, round 26)."""

    limiter: RateLimiter
    namespace: str
    events: int

    # Written out: one is built per batch (docs/architecture/compiled-build.md).
    def __init__(self, limiter: RateLimiter, namespace: str, events: int) -> None:
        self.limiter = limiter
        self.namespace = namespace
        self.events = events

    def give_back(self) -> None:
        if self.events:
            self.limiter.give_back(self.namespace, self.events)
            self.events = 0

    def __enter__(self) -> Charge:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is not None:  # planning refused the write, or it failed before the commit had it
            self.give_back()


class RateLimiter:
    """At most `rate` events per second per namespace, with bursts up to `burst` events."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = burst if burst is not None else rate
        self._buckets: dict[str, _Bucket] = {}

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, namespace: str, events: int) -> None:
        """Spend `events` tokens of `namespace`'s bucket, or refuse the whole batch."""
        if not self.enabled or events == 0:
            return
        if events > self.burst:  # no wait makes it fit: say so once, without a retry time
            raise LimitExceeded(
                "BATCH_OVER_RATE_BURST",
                f"a batch of {events} events can never fit namespace {namespace!r}'s rate limit "
                f"({self.rate:g} events per second, bursts of {self.burst:g}); send smaller batches",
                field="events",
                limit=f"{self.burst:g}",
                namespace=namespace,
            )
        now = time.monotonic()
        bucket = self._buckets.get(namespace)
        if bucket is None:
            bucket = self._buckets[namespace] = _Bucket(self.burst, now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate)
        bucket.stamp = now
        if events > bucket.tokens:
            raise LimitExceeded(
                "RATE_LIMITED",
                f"namespace {namespace!r} is over its limit of {self.rate:g} events per second; retry later",
                limit=f"{self.rate:g}",
                namespace=namespace,
                retry_after_ms=int(1000 * (events - bucket.tokens) / self.rate),
            )
        bucket.tokens -= events

    def spending(self, namespace: str, events: int) -> Charge:
        """`take` for a write planned and queued for commit in a `with` block: if the block
        raises (planning refused the write, or anything failed before the commit had it),
        nothing was sent to commit, and the tokens are given back. Every write of a namespace is
        charged through here, so none keeps tokens for what it never wrote; the `Charge` goes
        with the write to its commit, which gives it back if the fence refuses it."""
        self.take(namespace, events)
        return Charge(self, namespace, events)

    def give_back(self, namespace: str, events: int) -> None:
        """Return what `take` spent for a batch that was then refused before it was committed."""
        bucket = self._buckets.get(namespace)
        if bucket is not None and self.enabled:
            bucket.tokens = min(self.burst, bucket.tokens + events)
