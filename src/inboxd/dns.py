"""Custom-domain checks over a configurable resolver: the TXT strings and MX hosts of a name.

Every failure to get an answer (timeout, SERVFAIL, NXDOMAIN, no answer, no resolver configured)
counts as "no records": verifying a domain then answers pending, never a server error.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

# dnspython is imported at the first lookup: most servers never check a custom domain, and its
# modules cost resident memory in every idle process.
if TYPE_CHECKING:
    import dns.asyncresolver
    import dns.nameserver
    import dns.rdatatype
    import dns.resolver


def _host_port(spec: str) -> tuple[str, int]:
    """`ip`, `ip:port`, `[ipv6]:port` or a bare IPv6 address → (host, port); ValueError if not."""
    host, port = _split(spec.strip())
    ipaddress.ip_address(host)
    if not 0 < port < 65536:
        raise ValueError(f"{spec!r}: port out of range")
    return host, port


def _split(spec: str) -> tuple[str, int]:
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        port = rest.removeprefix(":")
        return host, int(port) if port else 53
    if spec.count(":") == 1:
        host, _, port = spec.partition(":")
        return host, int(port)
    return spec, 53


def parse_nameserver(spec: str) -> dns.nameserver.Do53Nameserver:
    """`ip`, `ip:port`, `[ipv6]:port` or a bare IPv6 address → a plain-DNS nameserver."""
    import dns.nameserver

    return dns.nameserver.Do53Nameserver(*_host_port(spec))


class DnsLookup:
    """Looks up TXT and MX records through `nameservers` (the system's when empty)."""

    def __init__(self, *, nameservers: list[str], timeout: float) -> None:
        # Checked now, so a malformed setting fails at start rather than at the first lookup.
        self._nameservers = [_host_port(s) for s in nameservers]
        self._timeout = timeout
        self._resolver: dns.asyncresolver.Resolver | None = None

    def _get_resolver(self) -> dns.asyncresolver.Resolver:
        # Built on first use: reading the system's configuration is I/O, and may fail where
        # there is none (then every lookup finds nothing).
        if self._resolver is None:
            import dns.asyncresolver
            import dns.nameserver

            resolver = dns.asyncresolver.Resolver(configure=not self._nameservers)
            if self._nameservers:
                resolver.nameservers = [dns.nameserver.Do53Nameserver(h, p) for h, p in self._nameservers]
            resolver.timeout = self._timeout
            resolver.lifetime = self._timeout
            resolver.cache = None
            self._resolver = resolver
        return self._resolver

    async def _answer(self, name: str, rdtype: dns.rdatatype.RdataType) -> dns.resolver.Answer | None:
        import dns.exception

        try:
            return await self._get_resolver().resolve(name, rdtype, search=False)
        except (dns.exception.DNSException, OSError):
            return None

    async def txt(self, name: str) -> list[str]:
        """Each TXT record's strings joined into one text (a long value may be split)."""
        import dns.rdatatype

        answer = await self._answer(name, dns.rdatatype.TXT)
        if answer is None:
            return []
        return [b"".join(rdata.strings).decode("utf-8", "replace") for rdata in answer]

    async def mx(self, name: str) -> list[str]:
        """The MX exchange hosts, lower-cased, without the trailing dot."""
        import dns.rdatatype

        answer = await self._answer(name, dns.rdatatype.MX)
        if answer is None:
            return []
        return [rdata.exchange.to_text(omit_final_dot=True).lower() for rdata in answer]
