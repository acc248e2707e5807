"""The one table from errors to HTTP answers: `{error, message}` with the error's status.

The dashboard renders its own errors as pages (`web/errors.py`); an unknown address asked for by
a browser reaches its "not found" page through the `not_found_page` the composition hands over.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inboxd.errors import InboxdError, MethodNotAllowed, NotFound, PayloadTooLarge, RateLimited, Unavailable
from inboxd.http.responses import json_response

log = logging.getLogger("inboxd.api")


def error_response(error: InboxdError) -> Response:
    if isinstance(error, RateLimited):
        retry = str(max(1, int(error.retry_after + 0.999)))
        body: dict[str, str] = {"error": error.code}
        if error.code != "rate_limit_exceeded":
            body["message"] = error.message
        return json_response(body, error.status, headers={**error.headers, "Retry-After": retry})
    return json_response({"error": error.code, "message": error.message}, error.status, headers=error.headers or None)


async def on_inboxd_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InboxdError)
    # A wait ended by shutdown (503 unavailable) is expected, not a fault worth a log line.
    if exc.status >= 500 and not isinstance(exc, Unavailable):
        log.warning("request failed: %s %s: %r", request.method, request.url.path, exc.__cause__ or exc)
    return error_response(exc)


def _wants_a_page(request: Request) -> bool:
    """A browser asking for a path outside the API gets the dashboard's "not found" page."""
    path = request.url.path
    return not (path == "/api" or path.startswith("/api/")) and "text/html" in request.headers.get("accept", "")


Page = Callable[[Request], Awaitable[Response]]


def on_http_error(not_found_page: Page | None = None) -> Callable[[Request, Exception], Awaitable[Response]]:
    """Starlette's own errors (unknown path, wrong method, ...) in our table; a browser asking for
    an unknown address outside the API gets `not_found_page`."""

    async def handle(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            if not_found_page is not None and _wants_a_page(request):
                return await not_found_page(request)
            return error_response(NotFound("No such endpoint."))
        if exc.status_code == 405:
            response = error_response(MethodNotAllowed())
            response.headers.update(exc.headers or {})
            return response
        if exc.status_code == 413:
            return error_response(PayloadTooLarge())
        return json_response({"error": "invalid_request", "message": str(exc.detail)}, exc.status_code)

    return handle


def unexpected_fault(scope: Scope) -> Response:
    """The answer to a fault no handler expected, logged once with its traceback (call it from
    the `except` that caught the fault)."""
    log.exception("unexpected fault on %s %s", scope.get("method"), scope.get("path"))
    return json_response({"error": "internal_error", "message": "An unexpected error occurred."}, 500)


class AnswerUnexpected:
    """ASGI middleware: a fault no handler expected becomes 500 `internal_error`, logged once.

    Starlette's own outermost error middleware answers such a fault too but then re-raises it, so
    uvicorn logged the traceback a second time and closed the client's kept-alive connection: the
    next request on it failed with a reset. Placed inside that middleware, this one answers and
    swallows. A fault after the response has started cannot be answered, and goes on up.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception:
            if started:
                raise
            await unexpected_fault(scope)(scope, receive, send)
