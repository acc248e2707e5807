"""http/client_address.py: who the client is behind trusted proxies (over real HTTP in
tests/test_limits_http.py and tests/test_nginx_fleet.py; the reading of the header here)."""

from __future__ import annotations

import pytest

from inboxd.http.client_address import TrustedProxies, parse_address

PROXIES = TrustedProxies(["10.0.0.0/8", "2001:db8:ffff::/48", "127.0.0.1"])


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        ("203.0.113.5", ["198.51.100.1"], "203.0.113.5"),  # an untrusted peer names no one
        ("10.0.0.1", [], "10.0.0.1"),
        ("10.0.0.1", ["198.51.100.1"], "198.51.100.1"),
        ("10.0.0.1", ["192.0.2.66, 198.51.100.1"], "198.51.100.1"),  # the client wrote the left one
        ("10.0.0.1", ["198.51.100.1, 10.1.1.1, 10.2.2.2"], "198.51.100.1"),  # trusted hops skipped
        ("10.0.0.1", ["198.51.100.1", "10.1.1.1"], "198.51.100.1"),  # several headers, in order
        ("10.0.0.1", ["10.1.1.1, 10.2.2.2"], "10.1.1.1"),  # all trusted: the leftmost
        ("10.0.0.1", ["198.51.100.1, junk, 10.2.2.2"], "10.2.2.2"),  # a non-address stops the walk
        ("10.0.0.1", ["[2001:db8::1]:443"], "2001:db8::1"),
        ("10.0.0.1", ["198.51.100.1:5555"], "198.51.100.1"),
        ("10.0.0.1", ["::ffff:198.51.100.1"], "198.51.100.1"),
        ("2001:db8:ffff:1::9", ["2001:db8:1::1"], "2001:db8:1::1"),
        ("::ffff:127.0.0.1", ["198.51.100.1"], "198.51.100.1"),
    ],
)
def test_the_rightmost_untrusted_hop_is_the_client(peer: str, forwarded: list[str], client: str) -> None:
    assert PROXIES.client(peer, forwarded) == client


def test_nothing_is_trusted_by_default() -> None:
    none = TrustedProxies([])
    assert not none and not none.trusts("127.0.0.1")
    assert none.client("127.0.0.1", ["198.51.100.1"]) == "127.0.0.1"


def test_addresses_as_proxies_write_them() -> None:
    assert str(parse_address(" [::1] ")) == "::1"
    assert parse_address("unknown") is None and parse_address("[::1") is None and parse_address("") is None
    with pytest.raises(ValueError, match="not a network"):
        TrustedProxies(["10.0.0.0/33"])
