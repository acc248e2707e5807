"""`/metrics`: Prometheus text, behind `INBOXD_METRICS_TOKEN` when the operator set one, on the
main HTTP port or, with `INBOXD_METRICS_LISTEN`, on a listener of its own (`metrics_app`)."""

from __future__ import annotations

import hmac

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api.openapi import describe
from inboxd.errors import InboxdError, NotFound, Unauthorized
from inboxd.http.body import services_of
from inboxd.http.errors import on_inboxd_error
from inboxd.metrics import CONTENT_TYPE, Metrics
from inboxd.services.registry import Services


@describe(
    "Prometheus metrics",
    tag="operations",
    description="SMTP, HTTP, WebSocket, webhook, queue and database figures in Prometheus' text format. "
    "With `INBOXD_METRICS_TOKEN` set, send it as a bearer token. With `INBOXD_METRICS_LISTEN` set, "
    "this answers on that address only (404 here).",
    media_type="text/plain",
    access="metrics",
    extension=True,
)
async def metrics(request: Request) -> Response:
    settings = services_of(request).settings
    if settings.metrics_listen and not getattr(request.app.state, "metrics_listener", False):
        raise NotFound("No such endpoint.")
    expected = settings.metrics_token
    if expected:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
            raise Unauthorized("Send 'Authorization: Bearer <INBOXD_METRICS_TOKEN>'.", code="invalid_token")
    collected: Metrics = request.app.state.metrics
    return Response(await collected.render(), media_type=CONTENT_TYPE)


routes = [Route("/metrics", metrics, methods=["GET"])]


def metrics_app(services: Services, *, metrics: Metrics) -> Starlette:
    """The `INBOXD_METRICS_LISTEN` listener's application: `/metrics` and nothing else."""
    app = Starlette(routes=routes, exception_handlers={InboxdError: on_inboxd_error})
    app.state.services = services
    app.state.metrics = metrics
    app.state.metrics_listener = True
    return app
