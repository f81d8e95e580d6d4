"""Errors worded for a person at a terminal: readable times and what to do next.

The server's messages are written for logs and programs (times in epoch milliseconds, reasons
and metadata for matching). The CLI keeps the reason and rewords only what a person reads.
"""

from __future__ import annotations

import shlex
import socket
import ssl
import time
from datetime import UTC, datetime

from sessionlog.core.errors import SessionLogError
from sessionlog.requests import CREATE_IF_MISSING_HINT

TLS_PROBE_TIMEOUT_S = 2.0


def readable_time(epoch_ms: int, now_ms: int | None = None) -> str:
    """`2026-11-30 17:42:05 UTC (in 23 s)`, or `(23 s ago)` for a time that has passed."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    stamp = datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    seconds = round(abs(epoch_ms - now) / 1000)
    return f"{stamp} (in {seconds} s)" if epoch_ms >= now else f"{stamp} ({seconds} s ago)"


def readable_message(error: SessionLogError) -> str:
    """The error's message, with a lease expiry in epoch milliseconds shown as a time, and
    without the Python writer's `create_if_missing` advice (no command takes it; `hint` names
    the command that creates a session)."""
    expires = error.metadata.get("expires_at", "")
    if error.reason == "WRITER_HELD" and expires.isdigit():
        holder = error.metadata.get("holder", "?")
        session = error.metadata.get("session_id")
        whose = f"session {session!r}" if session else "the session"
        return f"{whose} is held by writer {holder!r} until {readable_time(int(expires))}"
    return error.message.removesuffix(f"; {CREATE_IF_MISSING_HINT}")


def hint(error: SessionLogError, *, ca_file: str | None, target: str) -> str | None:
    """What to do next, where the error alone does not say it."""
    if error.reason == "WRITER_HELD":
        return "--takeover takes the session over (the holder is fenced out and must reopen)"
    if error.reason == "SESSION_NOT_FOUND":
        session = error.metadata.get("session_id")
        create = f"sessionlog create --id {shlex.quote(session)}" if session else "sessionlog create --id ID"
        # Reads meet it as often as writes: the listing comes first, the command that creates second.
        return f"`sessionlog sessions` lists the sessions there are; `{create}` creates this one"
    if error.reason == "TOKEN_MISSING":
        return (
            "the server takes bearer tokens: pass it with --token TOKEN (or set SESSIONLOG_TOKEN); "
            "its operator makes one with `sessionlog token new`"
        )
    if error.reason == "TOKEN_UNKNOWN":
        return "the server's tokens file holds no such token: check --token (or SESSIONLOG_TOKEN)"
    if error.reason == "TRANSPORT_ERROR" and listening(target) is False:
        return (
            f"nothing listens at {target}: start the service (`sessionlog serve`) or give its address "
            "with --server HOST:PORT (or SESSIONLOG_SERVER)"
        )
    if error.code == "UNAVAILABLE" and ca_file is None and speaks_tls(target):
        return f"{target} speaks TLS: pass --ca-file PEM (or set SESSIONLOG_CA_FILE) to connect with TLS"
    return None


def _host_port(target: str) -> tuple[str, int] | None:
    """The host and port of a `HOST:PORT` target (`[::1]:50051` too); None for anything else
    (a `dns:///` or `unix:` target), which the probes below leave alone."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or "/" in host:
        return None
    return host.strip("[]"), int(port)


def listening(target: str, timeout: float = TLS_PROBE_TIMEOUT_S) -> bool | None:
    """Whether anything accepts a TCP connection at `HOST:PORT` (None: not a target to probe),
    to tell "no service there" from a service that failed the call."""
    address = _host_port(target)
    if address is None:
        return None
    try:
        with socket.create_connection(address, timeout=timeout):
            return True
    except OSError:
        return False


def speaks_tls(target: str, timeout: float = TLS_PROBE_TIMEOUT_S) -> bool:
    """Whether `HOST:PORT` completes a TLS handshake (certificate not checked: this only tells a
    TLS server from a plaintext one, to explain a refused plaintext connection)."""
    address = _host_port(target)
    if address is None:
        return False
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with (
            socket.create_connection(address, timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=address[0] or None),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False
