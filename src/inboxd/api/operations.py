"""`/metrics`: Prometheus text, behind `INBOXD_METRICS_TOKEN` when the operator set one."""

from __future__ import annotations

import hmac

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api.openapi import describe
from inboxd.errors import Unauthorized
from inboxd.http.body import services_of
from inboxd.metrics import CONTENT_TYPE, Metrics


@describe(
    "Prometheus metrics",
    tag="operations",
    description="SMTP, HTTP, WebSocket, webhook, queue and database figures in Prometheus' text format. "
    "With `INBOXD_METRICS_TOKEN` set, send it as a bearer token.",
    media_type="text/plain",
    access="metrics",
    extension=True,
)
async def metrics(request: Request) -> Response:
    expected = services_of(request).settings.metrics_token
    if expected:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
            raise Unauthorized("Send 'Authorization: Bearer <INBOXD_METRICS_TOKEN>'.", code="invalid_token")
    collected: Metrics = request.app.state.metrics
    return Response(await collected.render(), media_type=CONTENT_TYPE)


routes = [Route("/metrics", metrics, methods=["GET"])]
