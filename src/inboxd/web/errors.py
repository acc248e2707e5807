"""The one table from errors to pages: a title, the error's message and a way back.

Nothing a visitor can send ends in a bare 500: our own errors become their status with a page
that says what happened; a storage fault says to try again. Sign-in problems are logged once here.
Every page's error reaches `on_page_failed`, the dashboard's one exception handler (a page wrapper
raises `PageFailed`; `web/app.py` registers the handler), so the pages never import this module.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from inboxd.errors import Forbidden, Gone, InboxdError, NotFound, ProviderError, RateLimited, SignInRefused
from inboxd.http.pipeline import Call
from inboxd.web.pages import PageFailed, finish, page, render

log = logging.getLogger("inboxd.web")

_TITLES: dict[str, str] = {
    "csrf_failed": "This form has expired",
    "email_not_verified": "Your email address is not verified",
    "sign_up_closed": "Sign-up is closed",
    "link_required": "Link this provider from your account first",
    "identity_taken": "This provider account is linked to someone else",
    "account_revoked": "This account is suspended",
    "link_used": "This sign-in link was already used",
    "link_expired": "This sign-in link has expired",
    "link_unknown": "This sign-in link is not valid",
    "provider_error": "Sign-in did not complete",
    "rate_limit_exceeded": "Too many attempts",
    "ops_quota_exceeded": "This month's operations are used up",
    "account_limit_reached": "No more mailboxes on this plan",
    "token_limit_reached": "Too many API tokens",
}


def _title(error: InboxdError) -> str:
    if error.code in _TITLES:
        return _TITLES[error.code]
    if isinstance(error, NotFound):
        return "Not found"
    if isinstance(error, Forbidden):
        return "Not allowed"
    if error.status >= 500:
        return "Something went wrong"
    return "That did not work"


def error_page(request: Request, call: Call, error: InboxdError) -> Response:
    if isinstance(error, SignInRefused | ProviderError | Gone) or error.code == "csrf_failed":
        log.warning(
            "web %s %s refused: %s (%s)%s",
            request.method,
            request.url.path,
            error.code,
            error.message,
            f": {error.__cause__!r}" if error.__cause__ else "",
        )
    elif error.status >= 500:
        log.warning("web %s %s failed: %r", request.method, request.url.path, error.__cause__ or error)
    signed_in = call.session is not None and call.session.user is not None
    back = ("/account", "Back to your account") if signed_in else ("/auth/sign-in", "Back to sign-in")
    response = render(
        request,
        call,
        "error.html",
        status=error.status,
        title=_title(error),
        message=error.message
        if error.status < 500 or isinstance(error, ProviderError)
        else "An unexpected error occurred. Please try again in a moment.",
        back_path=back[0],
        back_label=back[1],
    )
    response.headers.update(error.headers)  # the limits' RateLimit-* after an admitted form
    if isinstance(error, RateLimited):
        response.headers["Retry-After"] = str(max(1, int(error.retry_after + 0.999)))
    return response


async def on_page_failed(request: Request, exc: Exception) -> Response:
    """The exception handler of every page: its error as a page, with the page's cookie upkeep and
    security headers."""
    assert isinstance(exc, PageFailed)
    return finish(error_page(request, exc.call, exc.error), exc.call, cookie=exc.cookie)


@page("public")
async def _not_found(request: Request, call: Call) -> Response:
    raise NotFound("There is no page at this address.")


async def not_found_page(request: Request) -> Response:
    """The page for an unknown address, with the visitor's navigation if they are signed in. It is
    called from Starlette's own exception handler, past the one `on_page_failed` is, so it answers
    its page's failure itself."""
    try:
        return await _not_found(request)
    except PageFailed as exc:
        return await on_page_failed(request, exc)
