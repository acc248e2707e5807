"""CSRF defence for every state-changing form: the request must come from our own origin
(`Origin`, or `Referer` where a browser sent no `Origin`), and carry the session's token.

`SameSite=Lax` already keeps the cookie off cross-site POSTs in current browsers; these checks
hold where it does not (older browsers, a sibling site on the same registrable domain).
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from starlette.requests import Request

from inboxd.config import Settings
from inboxd.errors import Forbidden

FIELD = "csrf_token"


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else ""


def check_origin(request: Request, settings: Settings) -> None:
    """Refuse a POST whose `Origin` (or, when a browser sent none, `Referer`) is not the
    dashboard's own origin. `Origin: null` is refused: browsers send it from sandboxed frames,
    `data:` pages and some cross-site redirects, none of which is our page."""
    expected = settings.resolved_web_origin.lower()
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        origin = _origin_of(referer) if referer else None
    if origin is None or origin.lower() != expected:
        raise _refused()


def check_token(expected: str, submitted: str | None) -> None:
    if not submitted or not hmac.compare_digest(expected.encode(), submitted.encode()):
        raise _refused()


def _refused() -> Forbidden:
    return Forbidden(
        "This form could not be accepted: it did not come from this page, or the page is stale "
        "(for instance after you signed out and in again in another tab). Reload the page and try again.",
        code="csrf_failed",
    )
