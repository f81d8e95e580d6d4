"""One tenant cannot take every open stream of an instance (issue 11 §3: another namespace's
calls must not disturb a tenant's).

`max_open_streams` bounds an instance's writer and subscription streams together: a tenant that
opened that many subscriptions (which stay open for as long as their caller likes) left every
other tenant's writer and subscription refused with TOO_MANY_STREAMS until it let go.
`max_open_streams_per_namespace` bounds one namespace's share.
"""

from __future__ import annotations

import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import LimitExceeded
from tests.support.events import note
from tests.support.tenants import ALICE, MALLORY, tenants_server


def test_a_namespace_at_its_share_of_streams_leaves_the_others_theirs(db_url: str, sid: str) -> None:
    server = tenants_server(db_url, max_open_streams=4, max_open_streams_per_namespace=2)
    try:
        with (
            SessionLogClient(server.target, token=MALLORY) as mallory,
            SessionLogClient(server.target, token=ALICE) as alice,
        ):
            mallory.create_session(sid)
            held = [mallory.subscribe(sid) for _ in range(2)]
            open_streams = [iter(subscription) for subscription in held]  # kept: each holds its stream
            for stream in open_streams:
                next(stream)  # open: caught up at seq 0
            with pytest.raises(LimitExceeded) as refused:
                next(iter(mallory.subscribe(sid)))
            assert refused.value.reason == "TOO_MANY_NAMESPACE_STREAMS"
            assert refused.value.metadata == {"limit": "2", "namespace": "mallory"}
            alice.create_session(sid)
            with alice.writer(sid) as writer:  # a writer stream: the instance has room for alice
                writer.append([note(0)]).result()
            following = alice.subscribe(sid)
            assert next(iter(following)) is not None  # replayed: alice's event
            following.cancel()
            for subscription in held:
                subscription.cancel()
    finally:
        server.stop()
