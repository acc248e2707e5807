"""The one table from errors to HTTP answers: `{error, message}` with the error's status."""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from inboxd.api.http import json_response
from inboxd.errors import InboxdError, MethodNotAllowed, NotFound, PayloadTooLarge, RateLimited

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
    if exc.status >= 500:
        log.warning("request failed: %s %s: %r", request.method, request.url.path, exc.__cause__ or exc)
    return error_response(exc)


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error_response(NotFound("No such endpoint."))
    if exc.status_code == 405:
        response = error_response(MethodNotAllowed())
        response.headers.update(exc.headers or {})
        return response
    if exc.status_code == 413:
        return error_response(PayloadTooLarge())
    return json_response({"error": "invalid_request", "message": str(exc.detail)}, exc.status_code)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected fault on %s %s", request.method, request.url.path, exc_info=exc)
    return json_response({"error": "internal_error", "message": "An unexpected error occurred."}, 500)
