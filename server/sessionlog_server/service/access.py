"""Who is calling: tenants (namespaces) and token kinds, checked at every session access.

The transport authenticates each call (see transport/auth.py) and binds its `Principal` to the
call's context; the use cases check it wherever they touch a session, so no RPC can reach a
session of another namespace, whatever path it takes. Without configured tokens every call
is the `default` namespace with full access (the server then listens on loopback only).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from sessionlog.core.errors import NotFound, PermissionDenied

DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True, slots=True)
class Principal:
    """A caller: the namespace its sessions live in, and whether it may write."""

    namespace: str
    can_write: bool = True
    name: str = ""


ANONYMOUS = Principal(DEFAULT_NAMESPACE, True, "anonymous")

_current: contextvars.ContextVar[Principal] = contextvars.ContextVar("sessionlog_principal", default=ANONYMOUS)


def current() -> Principal:
    """The principal of the call being served (ANONYMOUS outside of calls)."""
    return _current.get()


def bind(principal: Principal) -> contextvars.Token[Principal]:
    """Make `principal` the caller for the rest of this context."""
    return _current.set(principal)


def check_namespace(session_id: str, namespace: str) -> None:
    """A session of another namespace is reported as not found: its existence is not leaked."""
    if namespace != current().namespace:
        raise NotFound("SESSION_NOT_FOUND", f"session {session_id!r} not found", session_id=session_id)


def require_write(action: str) -> None:
    """Read-only tokens (auditors) may read everything in their namespace and change nothing."""
    principal = current()
    if not principal.can_write:
        raise PermissionDenied(
            "READ_ONLY_TOKEN",
            f"{action} needs a writer token; this token ({principal.name or principal.namespace}) is read-only",
            namespace=principal.namespace,
        )
