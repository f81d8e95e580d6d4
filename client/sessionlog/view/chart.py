"""The request chart of a long session page, bucketed per `width` seqs so the page carries at
most MAX_BUCKETS points whatever the session's length.

A short page draws one point per request (the requests are all on it); a windowed page
(page.py `windowed`) lists its requests a window at a time, so its chart is drawn from these
buckets instead. The width starts at one seq and doubles, merging neighbours, each time the
buckets would pass MAX_BUCKETS: one rule, fed part by part, that needs no event count up front.

A bucket keeps what a reader looks for in the chart: the largest context and output, the
smallest cache read and cache-read share (a cache-read drop inside the bucket stays visible),
and the cumulative cost at its end. Markers are kept once per kind (and header reason) per
bucket, at the bucket's first seq.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sessionlog.core.events import JsonObject

MAX_BUCKETS = 512
"""Points a windowed page's chart draws at most (each series)."""


@dataclass(slots=True)
class _Bucket:
    context: Any
    cache_read: Any
    output: Any
    share: Any
    cost: Any
    requests: int

    def merge(self, other: _Bucket) -> None:
        """`other` (a later bucket) folded into this one."""
        self.context = max(self.context, other.context)
        self.cache_read = min(self.cache_read, other.cache_read)
        self.output = max(self.output, other.output)
        self.share = min(self.share, other.share)
        self.cost = max(self.cost, other.cost)
        self.requests += other.requests


class ChartBuckets:
    """The chart's points and markers, bucketed per `width` seqs (a power of two)."""

    def __init__(self) -> None:
        self.width = 1
        self.buckets: dict[int, _Bucket] = {}
        self.markers: dict[int, dict[tuple[str, Any], None]] = {}
        """Per bucket, the `(kind, reason)` of its markers in the order they came."""

    def add(self, requests: Iterable[JsonObject], markers: Iterable[JsonObject]) -> None:
        """A page part's requests (only those with usage are drawn) and markers, in seq order."""
        for request in requests:
            usage = request["usage"]
            if usage is None:
                continue
            point = _Bucket(
                usage["context"], usage["cacheRead"], usage["output"], usage["cacheShare"], request["cumulativeCost"], 1
            )
            index = self._index(request["seq"])
            bucket = self.buckets.get(index)
            if bucket is None:
                self.buckets[index] = point
            else:
                bucket.merge(point)
        for marker in markers:
            kinds = self.markers.setdefault(self._index(marker["seq"]), {})
            kinds[(marker["kind"], marker.get("reason"))] = None

    def _index(self, seq: int) -> int:
        """The bucket of `seq`, doubling the width first while it would be past MAX_BUCKETS."""
        while seq // self.width >= MAX_BUCKETS:
            self._double()
        return seq // self.width

    def _double(self) -> None:
        self.width *= 2
        merged: dict[int, _Bucket] = {}
        for index in sorted(self.buckets):
            bucket = self.buckets[index]
            into = merged.get(index // 2)
            if into is None:
                merged[index // 2] = bucket
            else:
                into.merge(bucket)
        self.buckets = merged
        markers: dict[int, dict[tuple[str, Any], None]] = {}
        for index in sorted(self.markers):
            markers.setdefault(index // 2, {}).update(self.markers[index])
        self.markers = markers

    def result(self) -> JsonObject:
        """`{"width", "points", "markers"}`: points shaped as the page's requests (`seq`,
        `usage`, `cumulativeCost`, and how many `requests` the bucket holds) and markers as the
        timeline's (`seq`, `kind`, `reason` of a header), so the page draws them as it draws a
        short page's."""
        points = [
            {
                "seq": index * self.width,
                "requests": bucket.requests,
                "cumulativeCost": bucket.cost,
                "usage": {
                    "context": bucket.context,
                    "cacheRead": bucket.cache_read,
                    "output": bucket.output,
                    "cacheShare": bucket.share,
                },
            }
            for index, bucket in sorted(self.buckets.items())
        ]
        markers = [
            {"seq": index * self.width, "kind": kind, **({"reason": reason} if kind == "header" else {})}
            for index, kinds in sorted(self.markers.items())
            for kind, reason in kinds
        ]
        return {"width": self.width, "points": points, "markers": markers}
