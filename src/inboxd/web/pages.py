"""The shape every page shares: find the session, admit the request, guard the page, check CSRF
on a POST, run the handler, answer HTML with the security headers.

`page(...)` wraps a handler `(request, call) -> Response`. Every page request passes the
dashboard's rate (per signed-in user, or per client IP); a form that does what an API call does
(`operation=True`) then runs through the API's own admission (`http.pipeline.admitted`): the
user's request rate, the mailbox-creation interval, the monthly count and the free-space guard.
A signed-out visitor of a guarded page is sent to the sign-in page (with `next`, so they come
back); a POST is refused unless it comes from our origin with the session's CSRF token; any
`InboxdError` leaves the wrapper as a `PageFailed`, which the dashboard's one exception handler
(`errors.on_page_failed`, registered by `web/app.py`) turns into the error page: this module never
imports the error pages, which render through it. Every answer is `no-store`, so the back button
after sign-out asks the server again.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parseaddr
from functools import lru_cache
from importlib import resources
from typing import Any, Literal
from urllib.parse import quote, urlsplit

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inboxd.auth import cookies, csrf
from inboxd.errors import Forbidden, InboxdError
from inboxd.http.body import read_form, services_of
from inboxd.http.client_address import client_ip
from inboxd.http.pipeline import WRITES, Call, Endpoint, Gate, Handler, admitted
from inboxd.model import Principal
from inboxd.services.registry import Services
from inboxd.web.layout import nav_for

log = logging.getLogger("inboxd.web")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; frame-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
SIGN_IN_PATH = "/auth/sign-in"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("inboxd.web", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["static"] = static_url
    env.filters["when"] = when
    env.filters["provider_label"] = provider_label
    env.filters["filesize"] = filesize
    env.filters["display_name"] = display_name
    return env


def when(ts: float | None, empty: str = "") -> str:
    """A timestamp as the page shows it: `2026-11-23 20:51 UTC`."""
    if ts is None:
        return empty
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def filesize(size: int) -> str:
    """Bytes as people read them: `812 B`, `4.1 KB`, `25.0 MB` (powers of 1024, as mail clients show)."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def display_name(from_: str) -> str:
    """`Shop <orders@shop.example>` as a list shows it: the name, or the address when there is none."""
    name, address = parseaddr(from_)
    return name or address or from_


def provider_label(key: str) -> str:
    return {"github": "GitHub", "google": "Google", "oidc": "Single sign-on"}.get(key, key)


@lru_cache(maxsize=64)
def static_url(name: str) -> str:
    """`/static/<name>?v=<hash>`: a new release never serves a stale cached asset."""
    data = resources.files("inboxd.web").joinpath("static", name).read_bytes()
    return f"/static/{name}?v={hashlib.sha256(data).hexdigest()[:10]}"


def render(request: Request, call: Call | None, template: str, *, status: int = 200, **context: Any) -> Response:
    session = call.session if call else None
    user = session.user if session else None
    html = (
        environment()
        .get_template(template)
        .render(
            user=user,
            nav=nav_for(user),
            csrf_token=session.csrf_token if session and user else "",
            path=request.url.path,
            **context,
        )
    )
    return HTMLResponse(html, status_code=status)


def redirect(path: str) -> Response:
    return RedirectResponse(path, status_code=303)


def safe_next(value: str | None, default: str = "/") -> str:
    """A path on this site to go to after sign-in; anything else becomes `default`: another
    origin (`//host`, `/\\host`, a scheme), and any control or invisible character, which
    browsers drop from a URL (`/<TAB>/host` is `//host` to them)."""
    if not value or len(value) > 2000 or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return default
    if not value.isprintable():
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return default
    return value


def sign_in_redirect(request: Request, *, reason: str = "") -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    query = f"next={quote(target, safe='')}" if request.method == "GET" and target != "/" else ""
    if reason:
        query = f"{query}&reason={reason}" if query else f"reason={reason}"
    return redirect(SIGN_IN_PATH + (f"?{query}" if query else ""))


Access = Literal["public", "user", "admin"]


class PageFailed(Exception):
    """A page handler's `InboxdError` on its way to the dashboard's exception handler, with what
    that handler needs to answer as the page would have: the request's call (who is signed in, for
    the navigation and the way back) and the session cookie the request came with."""

    def __init__(self, error: InboxdError, *, call: Call, cookie: str) -> None:
        super().__init__(error.message)
        self.error = error
        self.call = call
        self.cookie = cookie


def page(
    access: Access = "user", *, csrf_session: bool = True, operation: bool = False, creates_mailbox: bool = False
) -> Callable[[Handler], Endpoint]:
    """Wrap a page handler with the session, the limits, the guard of `access`, and CSRF checks on POST.

    csrf_session: a POST needs the session's CSRF token (pages for the signed-out, such as the
    sign-in link form, have no session and rely on the origin check and their own secret).
    operation: the page does what an API call does, and is admitted and counted as that call.
    creates_mailbox: the page creates a mailbox, and holds to the creation interval.
    """
    operation = operation or creates_mailbox

    def wrap(handler: Handler) -> Endpoint:
        async def run(request: Request) -> Response:
            services = services_of(request)
            settings = services.settings
            value = cookies.read(request, settings)
            call = Call(services)
            try:
                call.session = await services.sessions.resolve(value) if value else None
                user = call.session.user if call.session is not None else None
                if user is not None:
                    call.principal = Principal(user=user, session=True)
                await services.admission.admit_page(caller=f"user:{user.id}" if user else f"ip:{client_ip(request)}")
                response = await _guarded(
                    request,
                    call,
                    handler,
                    access=access,
                    csrf_session=csrf_session,
                    operation=operation,
                    creates_mailbox=creates_mailbox,
                )
            except InboxdError as exc:
                raise PageFailed(exc, call=call, cookie=value) from exc
            return finish(response, call, cookie=value)

        run.__name__ = handler.__name__
        run.__doc__ = handler.__doc__
        return run

    return wrap


async def _guarded(
    request: Request,
    call: Call,
    handler: Handler,
    *,
    access: Access,
    csrf_session: bool,
    operation: bool,
    creates_mailbox: bool,
) -> Response:
    signed_in = call.session is not None and call.session.user is not None
    if access != "public" and not signed_in:
        # A cookie that opens nothing, or a form sent from a page that was signed in: say why.
        ended = bool(cookies.read(request, call.services.settings)) or request.method == "POST"
        return sign_in_redirect(request, reason="expired" if ended else "")
    if access == "admin" and call.user.role != "admin":
        raise Forbidden("This page is for administrators.", code="access_denied")
    if request.method == "POST":
        csrf.check_origin(request, call.services.settings)
        call.form = await read_form(request)
        if csrf_session:
            if call.session is None:
                return sign_in_redirect(request, reason="expired")
            csrf.check_token(call.session.csrf_token, call.form.get(csrf.FIELD))
    if not (operation and signed_in):
        return await handler(request, call)
    services = call.services

    async def work(gate: Gate) -> Response:
        if request.method in WRITES:
            services.space.check()
        call.admit_creation = gate.admit_creation
        return await handler(request, call)

    return await admitted(services, call.principal, work, creates_mailbox=creates_mailbox)


def finish(response: Response, call: Call, *, cookie: str) -> Response:
    """Every page's answer, an error page's too: the session cookie kept up, the security headers."""
    _maintain_cookie(response, call, value=cookie, services=call.services)
    return with_security_headers(response)


def _maintain_cookie(response: Response, call: Call, *, value: str, services: Services) -> None:
    """Slide a signed-in session's cookie; drop a cookie that opens nothing. A handler that set
    or cleared the cookie itself (sign-in, sign-out) is left alone."""
    settings = services.settings
    name = cookies.cookie_name(settings)
    if any(h.startswith(name + "=") for h in response.headers.getlist("set-cookie")):
        return
    session = call.session
    if session is not None and session.user is not None:
        cookies.put(response, settings, value, max_age=session.expires_at - services.clock())
    elif value and session is None:
        cookies.clear(response, settings)


class SecurityHeaders:
    """ASGI middleware: the security headers on every answer of the pages it wraps (static files)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message["headers"] = [*message.get("headers", []), *(h for h in extra if h[0] not in present)]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def with_security_headers(response: Response) -> Response:
    for key, value in SECURITY_HEADERS.items():
        response.headers.setdefault(key, value)
    response.headers.setdefault("Cache-Control", "no-store")
    return response
