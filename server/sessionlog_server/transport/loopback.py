"""Which listen addresses stay on this machine (the gRPC and the admin HTTP listener share it)."""

from __future__ import annotations

from sessionlog_server.transport.address import split_listen

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "ip6-localhost"})


def listen_host(listen: str) -> str:
    """The host part of `HOST:PORT` (`[::1]:PORT` too)."""
    return split_listen(listen)[0]


def is_loopback(listen: str) -> bool:
    """True when `HOST:PORT` listens on a loopback address only."""
    return listen_host(listen) in LOOPBACK_HOSTS
