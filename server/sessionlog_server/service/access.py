"""Who is calling: tenants (namespaces) and token kinds, checked at every session access.

The transport authenticates each call (see transport/auth.py) and binds its `Principal` to the
call's context; the use cases check it wherever they touch a session, so no RPC can reach a
session of another namespace, whatever path it takes. Without configured tokens every call
is the `default` namespace with full access (the server then listens on loopback only).

Session ids are scoped by namespace: two namespaces may each have a session `s1`. Inside the
service and storage a session is known by its key, `namespace:id` (just `id` in the default
namespace, so a deployment without tokens keeps its keys); callers only ever see their ids
(`public_id`). A URL-safe id has no `:`, so a key cannot be mistaken for an id.
"""

from __future__ import annotations

import contextvars
import re
from dataclasses import dataclass

from sessionlog.core import validate
from sessionlog.core.errors import NotFound, PermissionDenied, SessionLogError, ValidationError
from sessionlog.core.formats import otlp
from sessionlog.core.limits import DEFAULT_LIMITS, Limits

DEFAULT_NAMESPACE = "default"
GENERATED_ID_CHARS = 36
"""Length of a session id the service generates (a UUID in its text form)."""
MAX_NAMESPACE_CHARS = DEFAULT_LIMITS.max_id_chars - 1 - GENERATED_ID_CHARS
"""Longest namespace: a session's key (`namespace:id`) keeps room for a generated id."""


@dataclass(frozen=True, slots=True)
class Principal:
    """A caller: the namespace its sessions live in, and whether it may write."""

    namespace: str
    can_write: bool = True
    name: str = ""


ANONYMOUS = Principal(DEFAULT_NAMESPACE, True, "anonymous")

_current: contextvars.ContextVar[Principal] = contextvars.ContextVar("sessionlog_principal", default=ANONYMOUS)


def log_fields(principal: Principal) -> dict[str, str]:
    """Who called, for a call's log line: the token's namespace and name (`token new --name`);
    nothing for the anonymous caller of a service without tokens, where every call is its."""
    if principal is ANONYMOUS:
        return {}
    return {"namespace": principal.namespace, **({"caller": principal.name} if principal.name else {})}


def current() -> Principal:
    """The principal of the call being served (ANONYMOUS outside of calls)."""
    return _current.get()


def bind(principal: Principal) -> contextvars.Token[Principal]:
    """Make `principal` the caller for the rest of this context."""
    return _current.set(principal)


def namespace_problem(namespace: str) -> str | None:
    """What is wrong with a token's namespace, or None: it must be non-empty and short enough
    that the keys of its sessions (`session_key`) hold a generated id."""
    if not namespace:
        return "namespace must be a non-empty string"
    if len(namespace) > MAX_NAMESPACE_CHARS:
        return (
            f"namespace must be at most {MAX_NAMESPACE_CHARS} characters, so its sessions' keys hold "
            f"their ids (it has {len(namespace)})"
        )
    return None


def session_key(session_id: str, limits: Limits) -> str:
    """The key of the caller's session `session_id` (validated: URL-safe, and short enough that
    the key fits the key columns)."""
    validate.check_session_id(session_id, limits)
    namespace = current().namespace
    if namespace == DEFAULT_NAMESPACE:
        return session_id
    key = f"{namespace}:{session_id}"
    if len(key) > limits.max_id_chars:
        room = max(limits.max_id_chars - len(namespace) - 1, 0)
        raise ValidationError(
            "BAD_SESSION_ID",
            f"session ids of namespace {namespace!r} may be at most {room} characters",
            field="session_id",
        )
    return key


def public_id(key: str) -> str:
    """The id a caller knows a session by (its key without the namespace)."""
    return key.rpartition(":")[2]


def namespace_of(key: str) -> str:
    """The namespace of the session of key `key`: what comes before its last `:` (an id has
    none), or the default namespace for a key without one."""
    return key.rpartition(":")[0] or DEFAULT_NAMESPACE


def trace_id(key: str) -> str:
    """The OpenTelemetry trace id of the session of key `key`: its key hashed, not its id, so two
    namespaces' sessions of one id are two traces. The transport tells it to callers
    (`Session.trace_id`), whose exports of the session then carry it, and the service's live
    OTLP export sends under it: one trace per session, whoever sends its spans."""
    return otlp.trace_id(key)


def logged_id(session_id: str) -> str:
    """A session id as a caller sent it, for the log line of its call or page request: whole up
    to the longest an id can be (`max_id_chars`), else cut there, with its length. Such a line
    names the session as it was asked for, valid or not, and the caller makes the "id" as long
    as a message (256 MB by default over gRPC) or a URL (64 KB, before any token is checked):
    copied whole, a 1 MB id made a 1 MB line."""
    longest = DEFAULT_LIMITS.max_id_chars
    if len(session_id) <= longest:
        return session_id
    return f"{session_id[:longest]}… ({len(session_id)} characters)"


def session_log_fields(key: str, error: BaseException | None = None) -> dict[str, str]:
    """How a log line names the session of key `key`: by the id its caller knows it by, with
    its namespace, as a call's `rpc` line does (`log_fields`), so filtering a tenant's log on
    `namespace` and `session_id` finds the service's own lines on its sessions too (leases,
    repairs, forks, snapshots, commits), which run outside any call or for another caller
    (`public_id`, `namespace_of`). With `error`, what failed, as its words say it (`error`): a
    sessionlog error names the session by its id there too (`public_error`), where storage's
    words give the key."""
    fields = {"session_id": public_id(key), "namespace": namespace_of(key)}
    if error is not None:
        fields["error"] = str(public_error(error, fields["namespace"]) if isinstance(error, SessionLogError) else error)
    return fields


def public_error(error: SessionLogError, namespace: str | None = None) -> SessionLogError:
    """`error` as the caller may read it: the service and storage raise errors naming a session
    by its key, so a key of the caller's namespace (`namespace`, else the bound caller's) is told
    as the caller's id (`public_id`), as responses tell it: in the `session_id` metadata and where
    the message says `session '<key>'` (writer ids and eventIds, which may hold a `:`, are left
    as they are). The error is changed in place and returned."""
    namespace = current().namespace if namespace is None else namespace
    if namespace == DEFAULT_NAMESPACE:
        return error  # keys of the default namespace are the ids
    key = f"{re.escape(namespace)}:({validate.SESSION_ID})"
    stated = error.metadata.get("session_id")
    keyed = re.fullmatch(key, stated) if stated is not None else None
    if keyed is not None:
        error.metadata["session_id"] = keyed[1]
    error.message = re.sub(f"session '{key}'", r"session '\1'", error.message)
    error.args = (error.message,)
    return error


def check_namespace(session_id: str, namespace: str) -> None:
    """A session of another namespace is reported as not found: its existence is not leaked."""
    if namespace != current().namespace:
        raise session_not_found(session_id)


def session_not_found(session_id: str) -> NotFound:
    """The one answer for a session the caller cannot see, named by the caller's id."""
    return NotFound("SESSION_NOT_FOUND", f"session {session_id!r} not found", session_id=session_id)


def require_write(action: str) -> None:
    """Read-only tokens (auditors) may read everything in their namespace and change nothing."""
    principal = current()
    if not principal.can_write:
        raise PermissionDenied(
            "READ_ONLY_TOKEN",
            f"{action} needs a writer token; this token ({principal.name or principal.namespace}) is read-only",
            namespace=principal.namespace,
        )
