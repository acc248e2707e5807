"""The session cookie: only a random value, `HttpOnly`, `SameSite=Lax`, `Secure` on https.

On https the name takes the `__Host-` prefix, so the browser refuses it unless it is Secure, set
by this host itself and valid for the whole site: a sibling subdomain cannot plant one.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from inboxd.config import Settings


def cookie_name(settings: Settings) -> str:
    return "__Host-inboxd_session" if settings.secure_cookies else "inboxd_session"


def read(request: Request, settings: Settings) -> str:
    return request.cookies.get(cookie_name(settings), "")


def put(response: Response, settings: Settings, value: str, *, max_age: float) -> None:
    response.set_cookie(
        cookie_name(settings),
        value,
        max_age=max(1, int(max_age)),
        path="/",
        secure=settings.secure_cookies,
        httponly=True,
        samesite="lax",
    )


def clear(response: Response, settings: Settings) -> None:
    response.delete_cookie(
        cookie_name(settings), path="/", secure=settings.secure_cookies, httponly=True, samesite="lax"
    )
