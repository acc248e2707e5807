"""ASGI middleware around the whole HTTP face: a request id, one log line, the metrics.

The request id is the client's `X-Request-ID` when it is a plausible one (1-64 characters of
letters, digits, `.`, `_`, `-`), otherwise a fresh one; it is set for the log lines written
while the request runs and returned in `X-Request-ID`. The route label is the matched route's
template (`/api/accounts/{mailbox}`), never the raw path, so the metrics' label set stays small;
an unmatched path counts as `unmatched`. The templates of every route the application serves (the
API's, given at construction, and the dashboard's pages, read from the application's own route
list the first time a request reaches it) are looked up by the endpoint the router matched: one
dictionary lookup a request.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterable

from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inboxd.logs import request_id
from inboxd.metrics import Metrics

log = logging.getLogger("inboxd.http")
_PLAUSIBLE = re.compile(r"[A-Za-z0-9._-]{1,64}")
HEADER = b"x-request-id"


def route_templates(routes: Iterable[BaseRoute]) -> dict[object, str]:
    """Each route's endpoint (or mounted app) → its path template."""
    out: dict[object, str] = {}
    for route in routes:
        if isinstance(route, Route):
            out[route.endpoint] = route.path
        elif isinstance(route, Mount):
            out[route.app] = route.path + "/{path}"
    return out


def _incoming_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == HEADER:
            text: str = value.decode("latin-1")
            if _PLAUSIBLE.fullmatch(text):
                return text
            break
    return uuid.uuid4().hex


class Observe:
    def __init__(self, app: ASGIApp, *, metrics: Metrics, routes: Iterable[BaseRoute]) -> None:
        self.app = app
        self.metrics = metrics
        self.templates = route_templates(routes)
        self._learned: set[int] = set()

    def _learn(self, app: object) -> None:
        """Add the templates of `app`'s routes (the router sets `scope["app"]`), once per app."""
        if id(app) in self._learned:
            return
        self._learned.add(id(app))
        self.templates.update(route_templates(getattr(app, "routes", ())))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _incoming_id(scope)
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500
        size = 0

        async def send_observed(message: Message) -> None:
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (HEADER, rid.encode())]
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        finally:
            elapsed = time.perf_counter() - started
            endpoint = scope.get("endpoint")
            route = self.templates.get(endpoint)
            if route is None:
                if endpoint is not None and "app" in scope:
                    self._learn(scope["app"])
                route = self.templates.get(endpoint, "unmatched")
            method = scope["method"]
            self.metrics.http_requests.labels(method, route, str(status)).inc()
            self.metrics.http_latency.labels(method, route).observe(elapsed)
            if log.isEnabledFor(logging.INFO):
                log.info(
                    "%s %s %d",
                    method,
                    scope["path"],
                    status,
                    extra={
                        "fields": {
                            "client": (scope.get("client") or ("-",))[0],
                            "route": route,
                            "bytes": size,
                            "ms": round(elapsed * 1000, 2),
                        }
                    },
                )
            request_id.reset(token)
