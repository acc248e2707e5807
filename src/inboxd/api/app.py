"""The ASGI application: every router's routes and the error table, around one `Services`."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.types import ASGIApp

from inboxd.api import accounts, messages, public, sandbox, user, webhooks, ws
from inboxd.api.errors import AnswerUnexpected, on_http_error, on_inboxd_error
from inboxd.errors import InboxdError
from inboxd.services.registry import Services


def build_asgi(services: Services) -> ASGIApp:
    app = Starlette(
        routes=[*public.routes, *messages.routes, *accounts.routes, *user.routes, *sandbox.routes, *webhooks.routes],
        middleware=[Middleware(AnswerUnexpected)],
        exception_handlers={InboxdError: on_inboxd_error, HTTPException: on_http_error},
    )
    # A trailing slash names no resource: 404 `not_found`, as for any unknown path, not a 307
    # that drops the body of a POST for clients that do not follow it.
    app.router.redirect_slashes = False
    app.state.services = services
    return ws.with_websocket(app, services)
