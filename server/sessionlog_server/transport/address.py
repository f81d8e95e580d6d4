"""Listen addresses: their form (`HOST:PORT`, checked when the settings are read) and whether
one is free, asked before anything else starts: a service that cannot listen must fail before
it migrates or creates a database, and say which address it could not have."""

from __future__ import annotations

import socket
import time

MAX_PORT = 65535
"""The highest TCP port."""


def split_listen(listen: str, setting: str = "SESSIONLOG_LISTEN") -> tuple[str, int]:
    """The host (brackets of an IPv6 address removed) and port of `HOST:PORT`; a ValueError
    naming `setting` for anything else (no port, a port that is not a number from 0 to 65535,
    no host)."""
    host, _, port = listen.rpartition(":")
    if not host.strip("[]") or not port.isdigit() or int(port) > MAX_PORT:
        expected = f"HOST:PORT (a host and a port from 0 to {MAX_PORT}, e.g. 127.0.0.1:50051)"
        raise ValueError(f"{setting}: {listen!r} is not {expected}")
    return host.strip("[]"), int(port)


def join_listen(host: str, port: int) -> str:
    """`HOST:PORT` again from `split_listen`'s parts (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_address_free(listen: str) -> str:
    """`listen` as the server will bind it (port 0 becomes a concrete free port). Raises OSError
    naming the address when the port is taken or the address is not this host's; with
    SO_REUSEPORT (several workers) the service would otherwise join a stranger's listener."""
    host, port = split_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            # As gRPC does: connections of a killed service linger in TIME_WAIT; only a
            # listener on the port means it is taken.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
            bound = probe.getsockname()[1]
    except OSError as exc:
        raise OSError(f"could not bind {listen}: {exc.strerror or exc}") from None
    return join_listen(host, bound)


def wait_address_free(listen: str, patience_s: float) -> str:
    """`check_address_free`, retried for up to `patience_s` while the workers of a service that
    was just killed are still draining (they leave within the shutdown grace)."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return check_address_free(listen)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise OSError(f"{exc} (still taken after {patience_s:.0f} s)") from None
            time.sleep(0.2)


__all__ = ["check_address_free", "join_listen", "split_listen", "wait_address_free"]
