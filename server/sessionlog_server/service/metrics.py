"""Prometheus metrics of one service instance (its own registry, so several can share a process).

Exposed over HTTP at `SESSIONLOG_METRICS_LISTEN` (`/metrics`); the README lists every series.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sessionlog_server.service.loop_series import LoopSeries

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


@dataclass
class Metrics:
    """Every series the service records."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        # Updated once or more per committed batch, on the event loop only: see loop_series.py.
        hot = LoopSeries(r)
        self.events_appended = hot.counter(
            "sessionlog_events_appended", "Events committed (service-written repair events included)."
        )
        self.batches_appended = hot.counter("sessionlog_batches_appended", "Batches committed.")
        self.batch_size = hot.histogram("sessionlog_batch_size_events", "Events per committed batch.", _SIZE_BUCKETS)
        self.group_size = hot.histogram(
            "sessionlog_group_commit_batches", "Batches per database transaction.", _SIZE_BUCKETS
        )
        self.commit_latency = hot.histogram(
            "sessionlog_commit_latency_seconds",
            "Time from a batch's submission to its durable commit.",
            _LATENCY_BUCKETS,
        )
        self.backlog_waits = Counter(
            "sessionlog_backlog_waits",
            "Appends that waited for the commit backlog to drain before being planned (commit_backlog_bytes).",
            registry=r,
        )
        self.batches_refused = Counter(
            "sessionlog_batches_refused", "Batches refused, by reason.", ["reason"], registry=r
        )
        self.open_writers = Gauge("sessionlog_open_writers", "Writer streams open on this instance.", registry=r)
        self.leases_taken_over = Counter(
            "sessionlog_leases_taken_over", "Leases taken from a live writer with takeover.", registry=r
        )
        self.repairs_written = Counter(
            "sessionlog_repairs_written", "Open turns completed by crash repair, by trigger.", ["trigger"], registry=r
        )
        self.subscribers = Gauge("sessionlog_subscribers", "Live subscriptions on this instance.", registry=r)
        self.subscription_lag = Histogram(
            "sessionlog_subscription_lag_seconds",
            "Time from an event's commit to its delivery to a live subscriber.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
