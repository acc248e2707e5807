"""The address guard of every outgoing request to a URL someone else chose: webhooks
(worker/sender.py) and the link check (services/checks/links.py). It sits below both layers so
neither imports the other.

A webhook or a link URL is chosen by a user or a sender, so without a guard inboxd would connect
into its own network (server-side request forgery). At every attempt the host is resolved here,
each address is classified, and the request then connects only to the addresses that passed
(`PinnedResolver` hands these back to aiohttp instead of looking the name up a second time, so
DNS cannot answer differently in between).

Refused: private, loopback, link-local, multicast, reserved, unspecified, documentation and
shared (100.64.0.0/10) ranges, in IPv4 and IPv6, and the same ranges wrapped in IPv6 as
IPv4-mapped (::ffff:0:0/96), 6to4 (2002::/16) or NAT64 (64:ff9b::/96) addresses. IP literals
are recognised in every notation the C resolver accepts (`2130706433`, `0x7f000001`,
`0177.0.0.1`, `127.1`, `[::ffff:127.0.0.1]`), since the connecting side would accept them too.

Names are resolved with the loop's `getaddrinfo` (the default executor's threads) unless the
caller gives a `lookup`: the link check gives `AsyncLookup` (dnspython's asynchronous resolver
over `INBOXD_DNS_NAMESERVERS`), because a lookup of a black-holed name then holds no thread and
is cancelled with the fetch, where a `getaddrinfo` thread runs on for the resolver's whole
timeout and makes everything else that uses the default pool (ingest, password hashing) wait.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp.abc import AbstractResolver, ResolveResult

if TYPE_CHECKING:
    import dns.asyncresolver
    import dns.nameserver

# `lookup(host)`: the host's addresses as text; raises ResolutionFailed.
Lookup = Callable[[str], Awaitable[list[str]]]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_SHARED = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
# Characters of the numeric IPv4 notations inet_aton accepts (decimal, octal, hex parts).
_LEGACY_V4 = re.compile(r"[0-9a-fA-FxX.]+")


class AddressRefused(Exception):
    """The host is, or resolves to, an address webhooks may not reach."""


class ResolutionFailed(Exception):
    """The host name did not resolve (DNS failure or no address)."""


@dataclass(frozen=True, slots=True)
class Target:
    """The addresses a host was checked to have, for the connection to use."""

    host: str
    port: int
    addresses: tuple[tuple[int, str], ...]  # (socket family, address text)


def ip_literal(host: str) -> IPAddress | None:
    """The address `host` denotes when it is an IP literal in any notation, else None."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            return None
    text = text.removesuffix(".")
    if not text or not _LEGACY_V4.fullmatch(text):
        return None
    try:
        # inet_aton: the legacy forms (one to four parts, each decimal, 0-octal or 0x-hex).
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        return None


def unwrap(address: IPAddress) -> IPAddress:
    """The IPv4 address carried inside an IPv4-mapped, 6to4 or NAT64 IPv6 address, else itself."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def is_blocked(address: IPAddress) -> bool:
    """True when a webhook may not reach `address` (see the module docstring)."""
    inner = unwrap(address)
    if inner is not address:
        # The wrapper prefixes are global themselves; what is reached is the address inside.
        return is_blocked(inner)
    if isinstance(address, ipaddress.IPv6Address) and address in _NAT64_LOCAL:
        return True
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or (isinstance(address, ipaddress.IPv4Address) and address in _SHARED)
        or (isinstance(address, ipaddress.IPv6Address) and address.is_site_local)
        or not address.is_global
    )


class AsyncLookup:
    """A host's A and AAAA records through dnspython's asynchronous resolver (`nameservers`, parsed
    by the caller, e.g. `inboxd.dns.parse_nameserver`; the system's when empty): no thread,
    cancelled with its caller. `localhost` and `*.localhost` are
    loopback without asking (RFC 6761 §6.3), as the system's resolver answers them from its hosts
    file; other hosts-file names are not known here."""

    def __init__(self, *, nameservers: Sequence[dns.nameserver.Nameserver], timeout: float) -> None:
        self._nameservers = list(nameservers)
        self._timeout = timeout
        self._resolver: dns.asyncresolver.Resolver | None = None

    def _get_resolver(self) -> dns.asyncresolver.Resolver:
        # Built on first use (dnspython is loaded by the first link check, not at start).
        if self._resolver is None:
            import dns.asyncresolver

            resolver = dns.asyncresolver.Resolver(configure=not self._nameservers)
            if self._nameservers:
                resolver.nameservers = list(self._nameservers)
            resolver.timeout = self._timeout
            resolver.lifetime = self._timeout
            resolver.cache = None
            self._resolver = resolver
        return self._resolver

    async def __call__(self, host: str) -> list[str]:
        import dns.exception
        import dns.resolver

        name = host.rstrip(".").lower()
        if name == "localhost" or name.endswith(".localhost"):
            return ["127.0.0.1", "::1"]
        resolver = self._get_resolver()

        async def one(rdtype: str) -> list[str]:
            try:
                answer = await resolver.resolve(name, rdtype, search=False)
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
                return []
            return [r.address for r in answer]

        try:
            v4, v6 = await asyncio.gather(one("A"), one("AAAA"))
        except dns.exception.Timeout as exc:
            raise ResolutionFailed(f"{host}: the DNS lookup timed out") from exc
        except (dns.exception.DNSException, UnicodeError, ValueError) as exc:
            raise ResolutionFailed(f"{host}: {exc}") from exc
        return v4 + v6


async def _getaddrinfo(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolutionFailed(f"{host}: {exc}") from exc
    return [str(sockaddr[0]) for _family, _type, _proto, _name, sockaddr in infos]


async def resolve_checked(host: str, port: int, *, allow_private: bool, lookup: Lookup | None = None) -> Target:
    """Resolve `host` once and check every address; raises AddressRefused or ResolutionFailed.

    Every address must pass: a name with one public and one private address is refused, so the
    outcome never depends on which address a connection happens to try.
    """
    literal = ip_literal(host)
    if literal is not None:
        candidates: list[IPAddress] = [literal]
    else:
        found_text = await (lookup(host) if lookup is not None else _getaddrinfo(host, port))
        candidates = []
        for text in found_text:
            try:
                found = ipaddress.ip_address(text.split("%", 1)[0])
            except ValueError as exc:
                raise ResolutionFailed(f"{host}: {exc}") from exc
            if found not in candidates:
                candidates.append(found)
        if not candidates:
            raise ResolutionFailed(f"{host}: no address")
    if not allow_private and any(is_blocked(a) for a in candidates):
        raise AddressRefused(host)
    return Target(
        host=host,
        port=port,
        addresses=tuple((socket.AF_INET if a.version == 4 else socket.AF_INET6, str(a)) for a in candidates),
    )


def _key(host: str, port: int) -> tuple[str, int]:
    return host.rstrip(".").lower(), port


class PinnedResolver(AbstractResolver):
    """Answers aiohttp's lookups from the addresses the guard checked; never asks DNS."""

    def __init__(self) -> None:
        self._pins: dict[tuple[str, int], Target] = {}

    def pin(self, target: Target) -> None:
        # One entry per host and port, replaced on every attempt: every entry was checked.
        self._pins[_key(target.host, target.port)] = target

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        target = self._pins.get(_key(host, port))
        if target is None:
            raise OSError(f"{host}: not checked by the address guard")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=addr_family,
                proto=0,
                flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            )
            for addr_family, address in target.addresses
        ]

    async def close(self) -> None:
        self._pins.clear()
