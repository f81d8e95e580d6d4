"""Which writer stream's lease the service renews while two grants on a session overlap.

Two opens on one session may both be granted, one after the other (a client's retry of an open
it gave up, beside that open reaching the service late): the later grant fences the earlier.
Their streams may then come to hold their leases in either order; the earlier one's, coming
second, took the later one's place, and the later lease, left unrenewed, lapsed under its live
stream (and was not given back when that stream closed).
"""

from __future__ import annotations

from sessionlog.client import SessionLogClient
from tests.support.servers import ServerThread


def test_an_earlier_grants_stream_does_not_take_the_later_ones_place(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    client.create_session(sid)
    leases = server.service.leases
    key = client.get_session(sid).id
    earlier = server.call(leases.grant(key, "first", takeover=False)).holder
    later = server.call(leases.grant(key, "second", takeover=True)).holder
    assert later.epoch == earlier.epoch + 1

    leases.hold_for_stream(later)
    leases.hold_for_stream(earlier)  # came late: fenced by the later grant
    server.call(leases.end_stream(earlier, broken=False))  # the earlier stream is refused, and ends

    lease = client.get_session(sid).lease
    assert lease is not None and lease.epoch == later.epoch  # still the later stream's
    server.call(leases.end_stream(later, broken=False))  # the writer closes it: given back
    assert client.get_session(sid).lease is None
