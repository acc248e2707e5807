"""Custom-domain checks over a configurable resolver: the TXT strings and MX hosts of a name.

Every failure to get an answer (timeout, SERVFAIL, NXDOMAIN, no answer, no resolver configured)
counts as "no records": verifying a domain then answers pending, never a server error.
"""

from __future__ import annotations

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.rdatatype
import dns.resolver


def parse_nameserver(spec: str) -> dns.nameserver.Do53Nameserver:
    """`ip`, `ip:port`, `[ipv6]:port` or a bare IPv6 address → a plain-DNS nameserver."""
    spec = spec.strip()
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        port = rest.removeprefix(":")
        return dns.nameserver.Do53Nameserver(host, int(port) if port else 53)
    if spec.count(":") == 1:
        host, _, port = spec.partition(":")
        return dns.nameserver.Do53Nameserver(host, int(port))
    return dns.nameserver.Do53Nameserver(spec, 53)


class DnsLookup:
    """Looks up TXT and MX records through `nameservers` (the system's when empty)."""

    def __init__(self, *, nameservers: list[str], timeout: float) -> None:
        self._nameservers = [parse_nameserver(s) for s in nameservers]
        self._timeout = timeout
        self._resolver: dns.asyncresolver.Resolver | None = None

    def _get_resolver(self) -> dns.asyncresolver.Resolver:
        # Built on first use: reading the system's configuration is I/O, and may fail where
        # there is none (then every lookup finds nothing).
        if self._resolver is None:
            resolver = dns.asyncresolver.Resolver(configure=not self._nameservers)
            if self._nameservers:
                resolver.nameservers = list(self._nameservers)
            resolver.timeout = self._timeout
            resolver.lifetime = self._timeout
            resolver.cache = None
            self._resolver = resolver
        return self._resolver

    async def _answer(self, name: str, rdtype: dns.rdatatype.RdataType) -> dns.resolver.Answer | None:
        try:
            return await self._get_resolver().resolve(name, rdtype, search=False)
        except (dns.exception.DNSException, OSError):
            return None

    async def txt(self, name: str) -> list[str]:
        """Each TXT record's strings joined into one text (a long value may be split)."""
        answer = await self._answer(name, dns.rdatatype.TXT)
        if answer is None:
            return []
        return [b"".join(rdata.strings).decode("utf-8", "replace") for rdata in answer]

    async def mx(self, name: str) -> list[str]:
        """The MX exchange hosts, lower-cased, without the trailing dot."""
        answer = await self._answer(name, dns.rdatatype.MX)
        if answer is None:
            return []
        return [rdata.exchange.to_text(omit_final_dot=True).lower() for rdata in answer]
