"""Two tenants of one server: alice and mallory, each a token of its own namespace.

The security tests that check what one namespace can learn about or do to another's sessions
(tests/security/test_namespace_ids.py, test_tenant_probing.py, test_tenant_streams.py) use this server through the
`tenants` fixture of tests/security/conftest.py.
"""

from __future__ import annotations

from typing import Any

from sessionlog_server.tokens import config_line, new_token
from tests.support.servers import ServerThread

ALICE, MALLORY = new_token(), new_token()


def tenants_server(db_url: str, **settings: Any) -> ServerThread:
    """A server on `db_url` (with `settings` of its own) that knows ALICE (namespace `alice`)
    and MALLORY (`mallory`), both allowed to write."""
    lines = [
        config_line(ALICE, "alice", read_only=False, name="a"),
        config_line(MALLORY, "mallory", read_only=False, name="m"),
    ]
    return ServerThread(db_url, tokens="[" + ",".join(lines) + "]", **settings)
