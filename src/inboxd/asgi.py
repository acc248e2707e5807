"""The whole HTTP face: the REST API's and the dashboard's routes around one `Services`, composed
here, above both, so that `api` and `web` never import each other."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.types import ASGIApp

from inboxd.api import docs, ws
from inboxd.api.app import api_routes
from inboxd.api.hot_routes import with_hot_routes
from inboxd.api.observe import HttpTally, Observe, RequestIds
from inboxd.errors import InboxdError
from inboxd.http.errors import AnswerUnexpected, on_http_error, on_inboxd_error
from inboxd.metrics import Metrics
from inboxd.services.registry import Services
from inboxd.web import app as web
from inboxd.web.errors import not_found_page


def build_asgi(services: Services, *, metrics: Metrics | None = None) -> ASGIApp:
    """Request ids, logs and metrics around the WebSocket and the routes; the hot routes and the
    WebSocket answered ahead of Starlette."""
    metrics = metrics or Metrics()
    routes = api_routes()
    app = Starlette(
        routes=[*routes, *web.routes()],
        middleware=[Middleware(AnswerUnexpected)],
        exception_handlers={InboxdError: on_inboxd_error, HTTPException: on_http_error(not_found_page)},
    )
    # A trailing slash names no resource: 404 `not_found`, as for any unknown path, not a 307
    # that drops the body of a POST for clients that do not follow it.
    app.router.redirect_slashes = False
    app.state.services = services
    web.attach(app, services)
    settings = services.settings
    app.state.openapi = docs.openapi_bytes(routes, base_url=settings.base_url, metrics_open=not settings.metrics_token)
    app.state.metrics = metrics
    tally = HttpTally(metrics)
    proxies = services.settings.trusted_proxies
    ids = RequestIds()
    rest = Observe(
        ws.with_websocket(app, services, metrics=metrics), tally=tally, ids=ids, routes=routes, trusted_proxies=proxies
    )
    return with_hot_routes(rest, starlette=app, tally=tally, ids=ids, trusted_proxies=proxies)
