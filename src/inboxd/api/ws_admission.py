"""Admission of `/api/ws` connections before they authenticate.

A connection that has not yet authenticated costs the server a socket, a coroutine and a timer
for up to `ws_auth_timeout` seconds, and anyone can open one. At most `ws_max_unauthenticated`
are held at once and `ws_max_unauthenticated_per_ip` from one client address (the socket peer);
one more is refused at the handshake with HTTP 429 before any WebSocket exists. Authenticated
connections are capped per mailbox elsewhere (`ws_max_connections`).

The counts are per process, like the SMTP session caps: what they protect (sockets, memory, the
event loop) belongs to each process, and a shared count would put a Redis round trip in front of
every handshake and leave places behind when a process dies. With `--workers N` one address may
hold up to N times the per-address cap, spread by the kernel over the workers.
"""

from __future__ import annotations

from collections import Counter

from starlette.types import Scope


def client_ip(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class Unauthenticated:
    """The connections of this process that have not authenticated yet, by client address."""

    def __init__(self, *, total: int, per_ip: int) -> None:
        self._total = total
        self._per_ip = per_ip
        self._by_ip: Counter[str] = Counter()
        self.count = 0

    def enter(self, ip: str) -> bool:
        """Take a place for a new connection from `ip`; False when a cap is reached."""
        if self.count >= self._total or self._by_ip[ip] >= self._per_ip:
            return False
        self.count += 1
        self._by_ip[ip] += 1
        return True

    def leave(self, ip: str) -> None:
        """The connection authenticated, was refused, or went away."""
        self.count -= 1
        self._by_ip[ip] -= 1
        if self._by_ip[ip] <= 0:
            del self._by_ip[ip]
