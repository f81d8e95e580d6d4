"""The bearer tokens and TLS credentials a server is configured with, read and checked: by each
server as it starts, and first by `serve`'s parent (workers.py), which loads only this of the
transport, so that a mistake is one line before any worker starts."""

from __future__ import annotations

import ssl

import grpc

from sessionlog_server.config import Settings, read_setting_file
from sessionlog_server.tokens import TokenStore
from sessionlog_server.transport.loopback import is_loopback


def check_exposure(settings: Settings, tokens: TokenStore) -> None:
    """Without tokens anyone who can connect may do anything: allow that on loopback only."""
    if not tokens.enabled and not is_loopback(settings.listen):
        raise ValueError(
            f"refusing to listen on {settings.listen} without bearer tokens: configure SESSIONLOG_TOKENS_FILE "
            "(see `sessionlog token new`) or listen on loopback"
        )


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials when a certificate and key are configured (both or neither)."""
    if bool(settings.tls_cert_file) != bool(settings.tls_key_file):
        raise ValueError("TLS needs both SESSIONLOG_TLS_CERT_FILE and SESSIONLOG_TLS_KEY_FILE")
    if not settings.tls_cert_file:
        return None
    key = read_setting_file(settings.tls_key_file, "SESSIONLOG_TLS_KEY_FILE")
    cert = read_setting_file(settings.tls_cert_file, "SESSIONLOG_TLS_CERT_FILE")
    check_key_pair(settings.tls_cert_file, settings.tls_key_file)
    return grpc.ssl_server_credentials([(key, cert)])


def check_key_pair(cert_file: str, key_file: str) -> None:
    """The certificate and key are PEM and belong together, else ValueError saying so. gRPC
    finds out only when it binds, logs it in its own format, and `serve` reported a port in use
    (its workers died and were started again without end)."""
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_file, key_file)
    except ssl.SSLError as exc:
        raise ValueError(
            f"SESSIONLOG_TLS_CERT_FILE ({cert_file}) and SESSIONLOG_TLS_KEY_FILE ({key_file}) are not a "
            f"PEM certificate and its private key: {exc.reason or exc}"
        ) from None


def configured_access(settings: Settings) -> tuple[TokenStore, grpc.ServerCredentials | None]:
    """The bearer tokens and TLS credentials `settings` name, read and checked (a tokens file or
    certificate that cannot be read, 0.0.0.0 without tokens: OSError or ValueError saying so).

    `serve`'s parent calls it before it starts any worker (workers.py), as each worker's
    `start_server` does again: a mistake here is one line from the parent, not workers that
    die at start-up and are started again for ever."""
    tokens = TokenStore.load(settings.tokens_file or None, settings.tokens or None)
    check_exposure(settings, tokens)
    return tokens, server_credentials(settings)
