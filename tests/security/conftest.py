"""Fixtures of the security tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.servers import ServerThread
from tests.support.tenants import tenants_server


@pytest.fixture
def tenants(db_url: str) -> Iterator[ServerThread]:
    """A server with two tenants, alice and mallory (tests/support/tenants.py)."""
    server = tenants_server(db_url)
    yield server
    server.stop()
