"""Who the client is when proxies stand in front: `INBOXD_TRUSTED_PROXIES`.

Only a socket peer inside one of the trusted networks may name another client address: over
HTTP through `X-Forwarded-For`, on the SMTP listeners through a PROXY protocol header
(`smtp/proxy_protocol.py`). Any other peer is the client itself, whatever it sends.

In `X-Forwarded-For` each proxy appends the address it saw, so the list is read from the right:
trusted hops are skipped and the first untrusted one is the client (the rightmost untrusted hop).
Everything left of it was written by the client and is ignored. When every hop is trusted, the
leftmost is taken; a hop that is not an address stops the walk at the last address read.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Sequence

from starlette.requests import HTTPConnection, Request

from inboxd.http.body import services_of

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# Peers remembered as trusted or not; a per-request check is then one dictionary look-up.
_REMEMBERED = 4096


def parse_address(text: str) -> Address | None:
    """An IP address as peers and proxies write it (`[v6]`, `[v6]:port`, `v4:port` too); IPv4
    mapped into IPv6 is the IPv4 address. None when it is not an address."""
    text = text.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.partition(":")[0]  # IPv4 with a port
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class TrustedProxies:
    """The networks whose peers may name the client address."""

    __slots__ = ("_networks", "_seen")

    def __init__(self, cidrs: Iterable[str]) -> None:
        networks = []
        for cidr in cidrs:
            try:
                networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
            except ValueError as exc:
                raise ValueError(f"not a network: {cidr!r}") from exc
        self._networks = tuple(networks)
        self._seen: dict[str, bool] = {}

    def __bool__(self) -> bool:
        return bool(self._networks)

    def trusts(self, peer: str) -> bool:
        if not self._networks:
            return False
        known = self._seen.get(peer)
        if known is None:
            address = parse_address(peer)
            known = address is not None and any(address in network for network in self._networks)
            if len(self._seen) >= _REMEMBERED:
                self._seen.clear()
            self._seen[peer] = known
        return known

    def client(self, peer: str, forwarded_for: Sequence[str]) -> str:
        """The client of a request from `peer` that carried these `X-Forwarded-For` values."""
        if not self.trusts(peer) or not forwarded_for:
            return peer
        client = peer
        for hop in reversed([hop for value in forwarded_for for hop in value.split(",")]):
            address = parse_address(hop)
            if address is None:
                break
            client = str(address)
            if not self.trusts(client):
                break
        return client


@functools.lru_cache(maxsize=8)
def trusted_proxies(cidrs: tuple[str, ...]) -> TrustedProxies:
    """One `TrustedProxies` per configured list, built at its first use and kept."""
    return TrustedProxies(cidrs)


def client_address(request: HTTPConnection, cidrs: Sequence[str]) -> str:
    """The client address of an HTTP request (or WebSocket), given `INBOXD_TRUSTED_PROXIES`."""
    peer = request.client.host if request.client else "unknown"
    if not cidrs:
        return peer  # the default: no proxy is trusted, nothing to read
    forwarded = [value.decode("latin-1") for name, value in request.scope["headers"] if name == b"x-forwarded-for"]
    return trusted_proxies(tuple(cidrs)).client(peer, forwarded)


def client_ip(request: Request) -> str:
    """The client address the per-IP limits key: the peer, or what a trusted proxy reports."""
    return client_address(request, services_of(request).settings.trusted_proxies)
