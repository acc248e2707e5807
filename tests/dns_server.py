"""A real DNS server for tests (dnslib, UDP and TCP on 127.0.0.1) whose records a test changes.

Names answer NXDOMAIN unless they hold a record; a name can be made to answer SERVFAIL, or to
stay silent so the client times out.
"""

from __future__ import annotations

import threading
from typing import Any

from dnslib import MX, QTYPE, RCODE, RR, TXT, DNSRecord
from dnslib.server import DNSHandler, DNSLogger, DNSServer


def _name(name: str) -> str:
    return name.lower().rstrip(".")


class FakeDns:
    """The zone the server answers from; tests call `set_txt`, `set_mx`, `servfail`, `silence`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._txt: dict[str, list[list[str]]] = {}
        self._mx: dict[str, list[tuple[int, str]]] = {}
        self._servfail: set[str] = set()
        self._silent: set[str] = set()
        self._release = threading.Event()
        # (name, type, "udp" or "tcp") of every question asked.
        self.queries: list[tuple[str, str, str]] = []

    def set_txt(self, name: str, *records: list[str]) -> None:
        """Each record is a list of strings (one TXT record may hold several)."""
        with self._lock:
            self._txt[_name(name)] = [list(r) for r in records]

    def set_mx(self, name: str, *hosts: tuple[int, str]) -> None:
        with self._lock:
            self._mx[_name(name)] = list(hosts)

    def servfail(self, name: str) -> None:
        with self._lock:
            self._servfail.add(_name(name))

    def silence(self, name: str) -> None:
        with self._lock:
            self._silent.add(_name(name))

    def clear(self, name: str) -> None:
        with self._lock:
            for table in (self._txt, self._mx):
                table.pop(_name(name), None)
            self._servfail.discard(_name(name))
            self._silent.discard(_name(name))

    def release(self) -> None:
        self._release.set()

    def resolve(self, request: DNSRecord, handler: Any) -> DNSRecord:
        reply = request.reply()
        qname = str(request.q.qname)
        name, qtype = _name(qname), QTYPE[request.q.qtype]
        with self._lock:
            self.queries.append((name, qtype, handler.protocol))
            silent, failing = name in self._silent, name in self._servfail
            txt, mx = list(self._txt.get(name, [])), list(self._mx.get(name, []))
        if silent:
            # Hold the answer past the client's timeout; released when the server stops.
            self._release.wait(30)
            return reply
        if failing:
            reply.header.rcode = RCODE.SERVFAIL
            return reply
        if not txt and not mx:
            reply.header.rcode = RCODE.NXDOMAIN
            return reply
        if qtype == "TXT":
            for strings in txt:
                reply.add_answer(RR(qname, QTYPE.TXT, rdata=TXT([s.encode() for s in strings]), ttl=60))
        elif qtype == "MX":
            for preference, host in mx:
                reply.add_answer(RR(qname, QTYPE.MX, rdata=MX(host, preference), ttl=60))
        return reply


class ClassicUdpHandler(DNSHandler):  # type: ignore[misc]
    """Truncates UDP answers over 512 bytes (TC bit), as plain DNS does, so clients retry over TCP.

    dnslib's own truncation drops the question too, which resolvers reject as a mismatched answer.
    """

    def get_reply(self, data: bytes) -> bytes:
        request = DNSRecord.parse(data)
        packed: bytes = self.server.resolver.resolve(request, self).pack()
        if self.protocol == "udp" and len(packed) > 512:
            truncated = request.reply()
            truncated.header.tc = 1
            packed = truncated.pack()
        return packed


class DnsServerPair:
    """UDP and TCP servers on one free port of 127.0.0.1, answering from one `FakeDns`."""

    def __init__(self, zone: FakeDns) -> None:
        self.zone = zone
        self._servers: list[DNSServer] = []

    def start(self) -> None:
        logger = DNSLogger("-request,-reply,-truncated,-error", logf=lambda _s: None)
        for _ in range(20):
            udp = DNSServer(self.zone, address="127.0.0.1", port=0, logger=logger, handler=ClassicUdpHandler)
            port = udp.server.server_address[1]
            try:
                tcp = DNSServer(self.zone, address="127.0.0.1", port=port, tcp=True, logger=logger)
            except OSError:
                udp.server.server_close()
                continue
            self._servers = [udp, tcp]
            for server in self._servers:
                # A short poll interval keeps `stop` quick (the default waits up to 0.5 s per server).
                threading.Thread(
                    target=server.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
                ).start()
            self.port = port
            return
        raise RuntimeError("no free port for the test DNS server")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.zone.release()
        for server in self._servers:
            server.stop()
            server.server.server_close()
