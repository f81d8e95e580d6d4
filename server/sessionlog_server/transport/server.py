"""Build and run the gRPC server: SessionService plus the standard health and reflection services."""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass, replace
from urllib.parse import urlsplit, urlunsplit

import grpc
import structlog
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection

from sessionlog.v1 import session_service_pb2
from sessionlog_server.config import Settings
from sessionlog_server.service.app import SessionLogService
from sessionlog_server.service.committer import GroupCommitter
from sessionlog_server.service.otlp_live import LiveOtlpExport, start_live_export
from sessionlog_server.storage.factory import open_recorder, shown_url
from sessionlog_server.storage.recorder import EventRecorder
from sessionlog_server.storage.schema import prepare
from sessionlog_server.transport.address import check_address_free, join_listen, split_listen
from sessionlog_server.transport.admin_http import AdminHttp
from sessionlog_server.transport.auth import AuthInterceptor
from sessionlog_server.transport.calls import RunningCalls
from sessionlog_server.transport.collector import tune_collector
from sessionlog_server.transport.credentials import configured_access
from sessionlog_server.transport.event_loop import loop_name
from sessionlog_server.transport.keepalive import SERVER_PING_OPTIONS, client_ping_options
from sessionlog_server.transport.registration import register_services
from sessionlog_server.transport.servicer import SessionServicer
from sessionlog_server.transport.signals import STOP_SIGNALS, release_stop_signals

log = structlog.get_logger("sessionlog.server")
SERVICE_NAME = session_service_pb2.DESCRIPTOR.services_by_name["SessionService"].full_name


@dataclass
class RunningServer:
    """A started server: the gRPC server, the use cases behind it, and the port it bound."""

    server: grpc.aio.Server
    service: SessionLogService
    health: health.aio.HealthServicer
    port: int
    calls: RunningCalls
    """The service's calls while they run (the stop cuts those that cannot finish)."""
    admin: AdminHttp | None = None
    """The metrics/admin HTTP listener (`/metrics`, `/sessions/ID`), when configured."""
    otlp: LiveOtlpExport | None = None
    """The live OTLP export, when `otlp_endpoint` is set."""
    storage_watch: asyncio.Task[None] | None = None
    """Turns the health status NOT_SERVING once the storage is lost (`watch_storage`)."""

    async def stop(self, grace: float) -> None:
        """Stop accepting calls, end writer streams, let in-flight calls finish, commit what is queued."""
        if self.storage_watch is not None:
            self.storage_watch.cancel()
        loop = asyncio.get_running_loop()
        # In a thread, beside the drain: it waits for the listener's thread and for a window
        # being read, and on the loop it held every in-flight call meanwhile.
        admin_stopped = None if self.admin is None else loop.run_in_executor(None, self.admin.stop)
        await self.health.enter_graceful_shutdown()
        self.service.end_streams()
        await self._stop_calls(grace)
        await self.service.stop()
        if admin_stopped is not None:
            await admin_stopped
        if self.otlp is not None:
            # After the last commits were published; in a thread, as it may wait for the collector.
            await loop.run_in_executor(None, self.otlp.stop)
        self.service.recorder.close()

    async def _stop_calls(self, grace: float) -> None:
        """Let the service's calls in flight finish, for up to `grace` seconds, but not wait for
        those that cannot (`RunningCalls`): once the rest are done, subscriptions waiting on a
        subscriber that stopped reading, and other services' streams (health watches), are cut."""
        stopped = asyncio.ensure_future(self.server.stop(grace))
        while not stopped.done():
            settled = asyncio.ensure_future(self.calls.settled())
            await asyncio.wait((stopped, settled), return_when=asyncio.FIRST_COMPLETED)
            settled.cancel()
            # A moment for the server to end by itself (nothing left open), and for a call it
            # took just before the stop to reach its handler and be counted.
            await asyncio.wait((stopped,), timeout=CUT_AFTER_S)
            if not stopped.done() and self.calls.running == self.calls.sending:
                log.info("calls done; cutting the streams that cannot end", subscriptions_waiting=self.calls.sending)
                await self.server.stop(None)
        await stopped


CUT_AFTER_S = 0.2
"""How long a stop whose calls are all done (or wait on their peers) waits before it cuts what is
left open; a subscriber that reads again meanwhile gets its status, not a cut."""

STORAGE_WATCH_S = 1.0
"""How often the health service asks whether the storage is lost."""


async def watch_storage(
    recorder: EventRecorder, committer: GroupCommitter, health_servicer: health.aio.HealthServicer
) -> None:
    """Report NOT_SERVING (for the service and overall) once the recorder says its storage is
    lost for good (`EventRecorder.storage_lost`: a SQLite file deleted under the service):
    every write is refused until a restart, which a load balancer or an orchestrator reading
    the health service can then route around or do. A full disk or a lost connection is not
    lost storage: writes fail and are retried, and the status stays SERVING.

    While a database write goes unanswered (`GroupCommitter.stalled`: a hung host, a stalled
    link), the status is NOT_SERVING too, and SERVING again once it answers: every append waits
    behind that write, so a load balancer should send new writers elsewhere meanwhile."""
    loop = asyncio.get_running_loop()
    serving = True
    while True:
        await asyncio.sleep(STORAGE_WATCH_S)
        problem = await loop.run_in_executor(None, recorder.storage_lost)  # a stat: off the loop
        if problem is not None:
            log.error("storage lost: health is NOT_SERVING", error=problem)
            await _set_health(health_servicer, health_pb2.HealthCheckResponse.NOT_SERVING)
            return
        if committer.stalled == serving:
            serving = not serving
            if serving:
                log.info("database answers again: health is SERVING")
            else:
                log.warning("database write unanswered: health is NOT_SERVING until it answers")
            status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
            await _set_health(health_servicer, status)


async def _set_health(health_servicer: health.aio.HealthServicer, status: int) -> None:
    """`status` for the service and overall (the health service ignores it once shutdown began)."""
    for name in (SERVICE_NAME, ""):
        await health_servicer.set(name, status)


async def start_server(settings: Settings, *, reuse_port: bool = False) -> RunningServer:
    """Migrate (unless told not to), open storage, and start serving on `settings.listen`.

    `reuse_port` lets several worker processes bind the same address (see workers.py); alone,
    a server refuses a port that is in use, before it migrates or opens the database."""
    if not reuse_port and settings.workers == 0:
        # "One per core" is resolved by `serve`, which starts the workers; a server started on
        # its own (embedded, in tests) with the default is one process.
        settings = replace(settings, workers=1)
    tokens, credentials = configured_access(settings)
    if not reuse_port:  # a worker's parent checked the address and prepared the database (workers.py)
        check_address_free(settings.listen)
        await asyncio.get_running_loop().run_in_executor(None, prepare, settings.db, settings.migrate)
    recorder = open_recorder(
        settings.db,
        sqlite_synchronous=settings.sqlite_synchronous,
        sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms,
    )
    service = SessionLogService(recorder, settings)
    await service.start()
    otlp = start_live_export(service, settings.otlp_endpoint) if settings.otlp_endpoint else None
    options = [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        *SERVER_PING_OPTIONS,  # the clients' keepalive pings draw no GOAWAY
        *client_ping_options(settings.client_ping_ms),  # a silent client's connection ends
    ]
    server = grpc.aio.server(options=options, interceptors=[AuthInterceptor(tokens)])
    health_servicer = health.aio.HealthServicer()
    servicer = SessionServicer(service)
    register_services(server, servicer, health_servicer, [SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME])
    try:
        if credentials is not None:
            port = server.add_secure_port(settings.listen, credentials)
        else:
            port = server.add_insecure_port(settings.listen)
    except RuntimeError:  # gRPC's way of saying the address cannot be bound
        port = 0
    if port == 0:
        raise OSError(f"could not bind {settings.listen}: the port is in use or the address is not this host's")
    await server.start()
    # What start-up built (modules, descriptors, SQL metadata) lives as long as the process:
    # out of the collector's sight, a full collection has far fewer objects to walk (tail latency).
    gc.freeze()
    await _set_health(health_servicer, health_pb2.HealthCheckResponse.SERVING)
    storage_watch = asyncio.get_running_loop().create_task(
        watch_storage(recorder, service.committer, health_servicer), name="storage"
    )
    admin: AdminHttp | None = None
    metrics: str | None = None
    if settings.metrics_listen:
        admin = AdminHttp(service, tokens, asyncio.get_running_loop(), service.metrics.registry)
        try:
            tls = (settings.tls_cert_file, settings.tls_key_file) if credentials is not None else None
            bound = admin.start(settings.metrics_listen, tls)
            # The port bound, not the one asked for: with port 0 that is the only way to find it.
            metrics = join_listen(split_listen(settings.metrics_listen)[0], bound)
        except OSError as exc:
            admin = None
            log.warning("metrics endpoint not started", listen=settings.metrics_listen, error=str(exc))
    log.info(
        "serving",
        listen=settings.listen,
        port=port,
        db=shown_url(settings.db),
        tls=credentials is not None,
        auth="bearer tokens" if tokens.enabled else "none: no tokens configured, so listening on loopback only",
        namespaces=sorted({p.namespace for p in tokens.principals.values()}),
        # Only where this server answers (a busy port serves another server's pages and
        # metrics), and the port it bound (port 0 picks a free one).
        metrics=metrics,
        otlp=_redact_endpoint(settings.otlp_endpoint) if otlp is not None else None,
        event_loop=loop_name(asyncio.get_running_loop()),
        gc_thresholds=list(gc.get_threshold()),
    )
    return RunningServer(server, service, health_servicer, port, servicer.calls, admin, otlp, storage_watch)


async def serve(settings: Settings, *, reuse_port: bool = False) -> None:
    """Serve until SIGTERM, SIGINT or SIGHUP (`STOP_SIGNALS`), then shut down gracefully (this
    process is the server's: its collector is tuned for it).

    The handlers are in place before start-up, and only then are the stop signals released
    (held since the process started: `serve` command, a worker's spawn): one that comes while
    the server starts lets it finish starting, then drain, where it ended the process at once."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    release_stop_signals()
    tune_collector(settings.gc_thresholds)
    running = await start_server(settings, reuse_port=reuse_port)
    await stop.wait()
    log.info("shutting down", grace_s=settings.shutdown_grace_s)
    await running.stop(settings.shutdown_grace_s)
    log.info("stopped")


def _redact_endpoint(url: str) -> str:
    """An HTTP URL as the log shows it: a password in it masked, as `shown_url` masks the database's."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
