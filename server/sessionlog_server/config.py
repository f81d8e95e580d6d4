"""Service configuration: one dataclass, filled from flags and `SESSIONLOG_*` environment variables.

Every field has a default that runs a single embedded instance safely (SQLite file under
./var, loopback only). The table in deploy/CONFIGURATION.md lists each setting; a test keeps
the two in step.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from sessionlog.core.formats.otlp import is_traces_url
from sessionlog.core.limits import DEFAULT_LIMITS, Limits
from sessionlog_server.logging import LEVELS
from sessionlog_server.storage.sqlite_settings import BUSY_TIMEOUT_MS, SYNCHRONOUS_MODES
from sessionlog_server.transport.address import split_listen
from sessionlog_server.transport.collector import DEFAULT_THRESHOLDS

ENV_PREFIX = "SESSIONLOG_"

AT_LEAST_ONE = (
    "group_commit_max_batches",
    "commit_backlog_bytes",
    "lease_ttl_ms",
    "max_event_bytes",
    "max_batch_events",
    "max_batch_bytes",
    "max_json_containers",
    "max_json_values",
    "max_message_bytes",
    "read_page_bytes",
    "session_cache_size",
    "snapshot_every_events",
    "snapshot_every_bytes",
    "subscription_poll_ms",
    "subscriber_buffer_bytes",
)
"""Settings for which 0 or less has no meaning: a group of no batches commits nothing (the
writer thread would spin on its queue), a backlog bound of 0 lets one batch through at a
time, a lease of no time is over before its holder writes (a second writer got a lease while
the first still held one), a limit of nothing refuses every event. Every other number must not
be negative: for those, 0 means off (no limit, one worker per core, no grace)."""


INT32_MAX = 2**31 - 1
"""The most a number setting may be: gRPC takes its options as C ints (a client ping interval or
message size past it was an OverflowError traceback at start-up), and a lease of more ms than
this (24 days) is no lease anyone waits out (10^23 ms started, then failed every write: SQLite
stores no such integer)."""

MEMORY_BYTES_MAX = 2**53
"""The most a memory bound may be (`LARGE_SETTINGS`): a cache or buffer may outgrow 2 GiB."""

LARGE_SETTINGS = (
    "session_cache_bytes",
    "message_cache_bytes",
    "commit_backlog_bytes",
    "subscriber_buffer_bytes",
    "snapshot_every_bytes",
)
"""Memory and byte bounds of the service's own, which gRPC never sees, up to MEMORY_BYTES_MAX."""

WORKERS_MAX = 64
"""The most server processes `serve` starts. Each holds its own caches (up to SESSION_CACHE_BYTES
plus MESSAGE_CACHE_BYTES) and database pool, and the default takes at most 8: `--workers 1000`,
a slip of the keyboard, started a thousand processes that took the machine's memory and
PostgreSQL's connections before any of them served."""

CEILINGS = {**{name: MEMORY_BYTES_MAX for name in LARGE_SETTINGS}, "workers": WORKERS_MAX}
"""Settings whose most is not INT32_MAX."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the service can be told; see deploy/CONFIGURATION.md."""

    db: str = "sqlite:///var/sessionlog.db"
    """Database URL: `sqlite:///PATH` (embedded default) or `postgresql://USER@HOST/DB`."""
    listen: str = "127.0.0.1:50051"
    """Address the gRPC server binds (`HOST:PORT`; port 0 picks a free one)."""
    migrate: bool = True
    """Run the migration chain on start."""
    sqlite_synchronous: str = "FULL"
    """SQLite `synchronous` pragma: FULL (durable on power loss), NORMAL (durable on a process crash),
    EXTRA (as FULL in WAL mode) or OFF (no fsync: not durable on an OS crash or power loss)."""
    sqlite_busy_timeout_ms: int = BUSY_TIMEOUT_MS
    """How long a write waits for the SQLite file while another worker or program writes it; past
    that it fails with STORAGE_UNAVAILABLE (nothing written, retry)."""
    lease_ttl_ms: int = 30_000
    """How long a writer lease lasts without a renewal (streaming leases are renewed by the service)."""
    client_ping_ms: int = 20_000
    """How long a client's connection may stay quiet before the service sends it a PING; one not
    answered within half that (at least 1 s) ends the connection. A writer whose host went silent
    (power loss, a dropped network, a stopped process) then loses its stream, and its lease lapses
    after `lease_ttl_ms`, where the service renewed it for as long as the stream seemed open: for
    hours. 0: no pings (gRPC's own default, one every 2 hours)."""
    blob_threshold_bytes: int = 256 * 1024
    """Payload strings longer than this are stored once as content-addressed blobs."""
    max_event_bytes: int = DEFAULT_LIMITS.max_event_bytes
    """Largest `data` of one event, and largest reported request header (it is logged as one event)."""
    max_batch_events: int = DEFAULT_LIMITS.max_batch_events
    """Most events in one batch."""
    max_batch_bytes: int = DEFAULT_LIMITS.max_batch_bytes
    """Largest total `data` of one batch."""
    max_metadata_bytes: int = DEFAULT_LIMITS.max_metadata_bytes
    """Largest serialised session metadata (ListSessions returns it with every session)."""
    max_cwd_bytes: int = DEFAULT_LIMITS.max_cwd_bytes
    """Longest session `cwd`, in UTF-8 bytes."""
    max_json_containers: int = DEFAULT_LIMITS.max_json_containers
    """Most objects and arrays, together, in one event's data, reported header or session metadata
    (counted before it is decoded: decoding costs per value, on the event loop all sessions share)."""
    max_json_values: int = DEFAULT_LIMITS.max_json_values
    """Most values in the arrays and objects of one event's data, reported header or session metadata,
    together (each element and each member counts once; counted before it is decoded, like
    `max_json_containers`)."""
    max_events_per_second: int = 0
    """Events per second per namespace (a token bucket with one second of burst; logged request
    headers count) in each server process: every `serve` worker and every instance keeps its own
    bucket, so N of them let a namespace append up to N times this; 0: no limit."""
    max_sessions_per_namespace: int = 0
    """Sessions one namespace may hold; 0: no limit."""
    max_open_streams: int = 10_000
    """Writer and subscription streams open at once on this instance (counted from their first byte)."""
    max_open_streams_per_namespace: int = 0
    """Of those, the streams one namespace may hold open at once, so one tenant cannot take them
    all and leave the others' writers and subscriptions refused; 0: no share of its own."""
    writer_open_timeout_s: float = 10.0
    """How long a writer stream may stay open without sending its `open` message."""
    subscription_poll_ms: int = 1000
    """With nothing published for this long, a live tail reads the log (a safety net: other
    processes' appends arrive through the change feed, PostgreSQL LISTEN/NOTIFY or SQLite's data_version)."""
    subscriber_buffer_bytes: int = 32 * 1024 * 1024
    """Payload bytes queued for one subscriber; one that falls further behind is cut off (SUBSCRIBER_TOO_SLOW)."""
    tokens_file: str = ""
    """Bearer tokens (hashed) and their namespaces, JSON Lines; see `sessionlog token new`. Empty: no auth."""
    tokens: str = ""
    """The same entries as a JSON array, inline (added to `tokens_file`)."""
    tls_cert_file: str = ""
    """PEM certificate chain; with `tls_key_file`, the server speaks TLS only."""
    tls_key_file: str = ""
    """PEM private key of `tls_cert_file`."""
    otlp_endpoint: str = ""
    """OTLP/HTTP traces URL (e.g. `http://collector:4318/v1/traces`; `http://` or `https://` with a
    host): every session's spans are sent there as its turns end, all but its root span, which
    `sessionlog otlp` sends (the `otlp` extra); empty: off."""
    metrics_listen: str = "127.0.0.1:9464"
    """`HOST:PORT` of the HTTP listener: `/metrics` and the session page `/sessions/ID` (port 0 picks
    a free one; the `serving` log line names the address bound); empty disables it."""
    max_message_bytes: int = 256 * 1024 * 1024
    """Largest gRPC message the server accepts or sends."""
    read_page_bytes: int = 4 * 1024 * 1024
    """A read page stops growing past this many payload bytes (at least one event per page)."""
    session_cache_size: int = 1024
    """How many sessions' folded state the service keeps in memory (see also `session_cache_bytes`);
    also how many sessions' proven lease tokens and origins (parent and cut) it remembers."""
    session_cache_bytes: int = 256 * 1024 * 1024
    """Bytes the cached sessions' folded state may take (estimated; about 120 bytes a surface node)."""
    message_cache_bytes: int = 64 * 1024 * 1024
    """Bytes of projected message JSON kept for model histories, shared by all sessions."""
    snapshot_every_events: int = 1000
    """A fold snapshot is stored once this many events (or, for a large surface, an eighth of its
    nodes) have been appended since the last one; loading a session folds at most about that many."""
    snapshot_every_bytes: int = 16 * 1024 * 1024
    """A fold snapshot is also stored once this many payload bytes have been appended since the last one."""
    group_commit_max_batches: int = 512
    """Most batches one group commit may carry."""
    commit_backlog_bytes: int = 4 * 1024 * 1024
    """Planned batches waiting for their commit, in stored bytes plus 1 KiB an event; past this,
    appends wait before they are planned (flow control pushes back on the writers), which bounds
    the memory work in flight takes. A batch is admitted whenever the backlog is at or under it."""
    workers: int = 0
    """Server processes sharing the listen address (SO_REUSEPORT); 0, the default: one per core
    (at most 8); at most WORKERS_MAX when given. One event loop saturates one core; with many
    harness connections (one writer stream each) more processes take more of them
    (bench/PROFILE.md, round 5)."""
    repair_on_start: bool = True
    """Complete open turns of sessions without a live writer at start-up (docs/repair.md)."""
    shutdown_grace_s: float = 10.0
    """How long SIGTERM waits for in-flight calls (batches, reads) before cutting them; streams
    that cannot end by themselves (a subscription whose subscriber stopped reading, a health
    watch) are cut as soon as the rest are done."""
    log_level: str = "info"
    """structlog level: debug, info, warning, error."""
    event_loop: str = "auto"
    """The event loop: uvloop, asyncio, or auto (uvloop when installed, else asyncio); see
    transport/event_loop.py."""
    gc_thresholds: str = DEFAULT_THRESHOLDS
    """Python's collector thresholds in each `serve` process, `YOUNG,MIDDLE,OLD`; empty keeps
    Python's own (700,10,10); see transport/collector.py."""

    def __post_init__(self) -> None:
        split_listen(self.listen, "SESSIONLOG_LISTEN (--listen)")
        if self.metrics_listen:
            split_listen(self.metrics_listen, "SESSIONLOG_METRICS_LISTEN")
        if self.otlp_endpoint:
            _http_url("otlp_endpoint", self.otlp_endpoint)
        _one_of("sqlite_synchronous", self.sqlite_synchronous, SYNCHRONOUS_MODES)
        _one_of("log_level", self.log_level, LEVELS)
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if value != value:  # NaN: no comparison holds, so no range check would catch it
                raise ValueError(f"{ENV_PREFIX}{item.name.upper()}={value} is not a number")
            floor = 1 if item.name in AT_LEAST_ONE else 0
            if value < floor:
                raise ValueError(f"{ENV_PREFIX}{item.name.upper()}={value} must be at least {floor}")
            ceiling = CEILINGS.get(item.name, INT32_MAX)
            if value > ceiling:  # infinity too: a grace of `inf` s crashed the stop
                raise ValueError(f"{ENV_PREFIX}{item.name.upper()}={value} must be at most {ceiling}")

    @property
    def limits(self) -> Limits:
        return Limits(
            max_event_bytes=self.max_event_bytes,
            max_batch_events=self.max_batch_events,
            max_batch_bytes=self.max_batch_bytes,
            max_metadata_bytes=self.max_metadata_bytes,
            max_cwd_bytes=self.max_cwd_bytes,
            max_json_containers=self.max_json_containers,
            max_json_values=self.max_json_values,
        )

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then `SESSIONLOG_<FIELD>` variables, then explicit (non-None) overrides."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = _parse(f.type, raw, f.name)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def read_setting_file(path: str, variable: str) -> bytes:
    """The file a setting names; an OSError naming the setting (`variable`) when it cannot be
    read: `serve` said only "PATH: No such file or directory", not which setting named it."""
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise OSError(exc.errno, f"{variable}: {path}: {exc.strerror or exc}") from None


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """A word setting must be one of `allowed`, in any case."""
    if value.lower() not in {word.lower() for word in allowed}:
        raise ValueError(f"{ENV_PREFIX}{name.upper()}={value!r} is not one of {', '.join(allowed)}")


def _http_url(name: str, value: str) -> None:
    """A URL setting must be an http(s) URL with a host (`is_traces_url`)."""
    if not is_traces_url(value):
        raise ValueError(
            f"{ENV_PREFIX}{name.upper()}={value!r} is not an http(s) URL (e.g. http://collector:4318/v1/traces)"
        )


def _parse(kind: Any, raw: str, name: str) -> Any:
    kind = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    try:
        if kind == "bool":
            lowered = raw.strip().lower()
            if lowered not in {"1", "0", "true", "false", "yes", "no", "on", "off"}:
                raise ValueError(raw)
            return lowered in {"1", "true", "yes", "on"}
        if kind == "int":
            return int(raw.replace("_", ""))
        if kind == "float":
            return float(raw)
    except ValueError:
        raise ValueError(f"{ENV_PREFIX}{name.upper()}={raw!r} is not a valid {kind}") from None
    return raw


SETTING_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Settings))

OTHER_VARIABLES = frozenset({"SERVER", "TOKEN", "CA_FILE", "LEASE_TOKEN", "MIGRATIONS_DIR", "MYPYC"})
"""`SESSIONLOG_*` variables that are no setting of the service's but are read all the same: the
CLI's and clients' (`--server`, `--token`, `--ca-file`, `--lease-token`), where the migrations
live, and the build's."""

OTHER_PREFIXES = ("TEST_", "BENCH_")
"""`SESSIONLOG_*` prefixes of the test suite's and the benchmarks' own variables."""


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The `SESSIONLOG_*` variables of `environ` that nothing reads (a typo such as
    `SESSIONLOG_LISTNE` was ignored without a word, the service serving on its default), each
    with the setting its name is closest to, if any."""
    known = [ENV_PREFIX + name.upper() for name in SETTING_NAMES]
    found = []
    for variable in sorted(environ):
        rest = variable.removeprefix(ENV_PREFIX)
        if rest == variable or variable in known or rest in OTHER_VARIABLES or rest.startswith(OTHER_PREFIXES):
            continue
        close = difflib.get_close_matches(variable, known, n=1, cutoff=0.8)
        found.append((variable, close[0] if close else None))
    return found
