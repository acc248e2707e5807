"""Who is at the other end of a request, as the per-IP limits key it."""

from __future__ import annotations

from starlette.requests import Request


def client_ip(request: Request) -> str:
    # The peer address: inboxd trusts no forwarding header (a proxy in front limits by itself).
    return request.client.host if request.client else "unknown"
