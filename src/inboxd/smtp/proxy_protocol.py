"""The PROXY protocol header (HAProxy's spec, versions 1 and 2) a trusted proxy sends first.

Read once per connection, before the greeting, and only from a trusted peer: `parse` takes the
bytes received so far and answers the header (its length and the client address it names), None
while more bytes are needed, or raises `ProxyHeaderError`. It is strict where the spec is:
version 1 is one line of at most 107 bytes with single spaces, addresses of its family and
ports without leading zeros; version 2 needs its 12-byte signature, version 2, a known command, and
an address block as long as its family needs. TLVs (version 2) are skipped. `LOCAL` (v2) and
`UNKNOWN` (v1, and v2's unspecified or UNIX families) name no client: the socket peer stands.

Hand-written rather than taken from the `proxy-protocol` package (README, "Behind a proxy"):
that package is alpha, has had no release since April 2024, reads ports with `int()` (so
`+25` and `2_5` pass), sets no bound on a version 1 line, and lets `struct.error` escape from a
short version 2 address block.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

V1_SIGNATURE = b"PROXY "
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V1_MAX = 107  # the longest version 1 line, CRLF included
V2_HEADER = 16
# Version 2 address families over TCP, and the bytes their addresses take (sources, destinations, ports).
_TCP4, _TCP6 = 0x11, 0x21
_ADDRESS_BYTES = {_TCP4: 12, _TCP6: 36}
_NO_ADDRESS = {0x00, 0x31}  # unspecified, UNIX stream: the socket peer stands


class ProxyHeaderError(ValueError):
    """The connection does not start with a PROXY header this parser accepts."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    length: int  # bytes the header took; the SMTP session starts after them
    client: str | None  # the address the proxy reports, None when it names none


def parse(data: bytes | bytearray) -> ProxyHeader | None:
    """The PROXY header at the start of `data`, or None while it may still be incomplete."""
    if data[:1] == V1_SIGNATURE[:1]:
        return _v1(data)
    if data[:1] == V2_SIGNATURE[:1]:
        return _v2(data)
    if data:
        raise ProxyHeaderError("no PROXY header")
    return None


def _v1(data: bytes | bytearray) -> ProxyHeader | None:
    if not data.startswith(V1_SIGNATURE[: len(data)]):
        raise ProxyHeaderError("no PROXY header")
    end = data.find(b"\r\n", 0, V1_MAX)
    if end < 0:
        if len(data) >= V1_MAX or b"\n" in data[:V1_MAX]:
            raise ProxyHeaderError("a version 1 PROXY line longer than 107 bytes or without CRLF")
        return None
    try:
        line = bytes(data[len(V1_SIGNATURE) : end]).decode("ascii")
    except UnicodeDecodeError:
        raise ProxyHeaderError("a version 1 PROXY line that is not ASCII") from None
    parts = line.split(" ")
    if parts[0] == "UNKNOWN":
        return ProxyHeader(length=end + 2, client=None)
    if len(parts) != 5 or parts[0] not in ("TCP4", "TCP6"):
        raise ProxyHeaderError("a malformed version 1 PROXY line")
    family, source, destination, source_port, destination_port = parts
    kind = ipaddress.IPv4Address if family == "TCP4" else ipaddress.IPv6Address
    for address in (source, destination):
        try:
            kind(address)
        except ValueError:
            raise ProxyHeaderError(f"not a {family} address in a PROXY line") from None
    for port in (source_port, destination_port):
        if not (port.isascii() and port.isdigit()) or (port[0] == "0" and port != "0") or int(port) > 65535:
            raise ProxyHeaderError("not a port in a PROXY line")
    return ProxyHeader(length=end + 2, client=str(kind(source)))


def _v2(data: bytes | bytearray) -> ProxyHeader | None:
    if not data.startswith(V2_SIGNATURE[: len(data)]):
        raise ProxyHeaderError("no PROXY header")
    if len(data) < V2_HEADER:
        return None
    version, command = data[12] >> 4, data[12] & 0x0F
    if version != 2 or command > 1:
        raise ProxyHeaderError("an unknown PROXY protocol version or command")
    family = data[13]
    length = V2_HEADER + int.from_bytes(data[14:16], "big")
    if len(data) < length:
        return None
    if command == 0:  # LOCAL: the proxy's own connection (a health check)
        return ProxyHeader(length=length, client=None)
    if family in _NO_ADDRESS:
        return ProxyHeader(length=length, client=None)
    needed = _ADDRESS_BYTES.get(family)
    if needed is None:
        raise ProxyHeaderError("a PROXY header for a transport other than TCP")
    if length - V2_HEADER < needed:
        raise ProxyHeaderError("a PROXY header whose address block is too short")
    start = V2_HEADER
    source = (
        ipaddress.IPv4Address(bytes(data[start : start + 4]))
        if family == _TCP4
        else ipaddress.IPv6Address(bytes(data[start : start + 16]))
    )
    return ProxyHeader(length=length, client=str(source))
