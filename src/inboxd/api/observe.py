"""A request id, one log line and the metrics of every HTTP request.

The request id is the client's `X-Request-ID` when it is a plausible one (1-64 characters of
letters, digits, `.`, `_`, `-`), otherwise a fresh one; it is set for the log lines written
while the request runs and returned in `X-Request-ID`. The route label is the matched route's
template (`/api/accounts/{mailbox}`), never the raw path, so the metrics' label set stays small;
an unmatched path counts as `unmatched`. The templates of every route the application serves (the
API's, given at construction, and the dashboard's pages, read from the application's own route
list the first time a request reaches it) are looked up by the endpoint the router matched: one
dictionary lookup a request.
The log line's `client` is the client address as the limits see it (`http/client_address.py`:
what a trusted proxy reports, else the peer).

`Observe` is the ASGI middleware around the routes Starlette answers; the hot routes
(`api/hot_routes.py`) call the same pieces (`incoming_id`, `HttpTally.count`, `log_access`)
directly, one call each.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import time
import weakref
from collections.abc import Iterable, Sequence

from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inboxd.http.client_address import scope_client_address
from inboxd.logs import request_id, write_info
from inboxd.metrics import LATENCY, Metrics

log = logging.getLogger("inboxd.http")
_PLAUSIBLE = re.compile(r"[A-Za-z0-9._-]{1,64}")
HEADER = b"x-request-id"
_ACCESS = "%s %s %d"


def route_templates(routes: Iterable[BaseRoute]) -> dict[object, str]:
    """Each route's endpoint (or mounted app) → its path template."""
    out: dict[object, str] = {}
    for route in routes:
        if isinstance(route, Route):
            out[route.endpoint] = route.path
        elif isinstance(route, Mount):
            out[route.app] = route.path + "/{path}"
    return out


class RequestIds:
    """Fresh request ids, each the hex of a random (version 4) UUID, as `uuid.uuid4().hex` gives
    it, cut from random bytes read 4 KiB at a time: a read of the system's random source and a
    `UUID` object per request were a share of a hot request's time. A process made by `fork`
    reads its own bytes."""

    __slots__ = ("__weakref__", "_at", "_random")

    _BATCH = 4096

    def __init__(self) -> None:
        self._random = b""
        self._at = 0
        forget = weakref.WeakMethod(self._forget)
        os.register_at_fork(after_in_child=lambda: (method := forget()) is not None and method())

    def _forget(self) -> None:
        self._random = b""
        self._at = 0

    def fresh(self) -> str:
        at = self._at
        if at >= len(self._random):
            self._random = os.urandom(self._BATCH)
            at = 0
        self._at = at + 16
        value = int.from_bytes(self._random[at : at + 16])
        # The variant (RFC 4122) and version (4) bits, set as `uuid.UUID(..., version=4)` sets them.
        value = (value & ~(0xC000 << 48) | (0x8000 << 48)) & ~(0xF000 << 64) | (4 << 76)
        return f"{value:032x}"


def incoming_id(scope: Scope, ids: RequestIds) -> str:
    for name, value in scope.get("headers", ()):
        if name == HEADER:
            text: str = value.decode("latin-1")
            if _PLAUSIBLE.fullmatch(text):
                return text
            break
    return ids.fresh()


def log_access(
    scope: Scope, *, status: int, route: str, size: int, elapsed: float, trusted_proxies: Sequence[str] = ()
) -> None:
    """The request's one log line (at info).

    Under the text set-up `serve` makes, the line is written straight to its handler
    (`logs.write_info`); under any other, the record is made and handed to the logger's handlers
    as `log.info` would, without its look up the stack for the caller's file and line, which no
    formatter here writes (`logs.py`) and which cost as much as the rest of the line."""
    if log.isEnabledFor(logging.INFO):
        fields = {
            "client": scope_client_address(scope, trusted_proxies),
            "route": route,
            "bytes": size,
            "ms": round(elapsed * 1000, 2),
        }
        args = (scope["method"], scope["path"], status)
        if write_info(log, _ACCESS % args, fields):
            return
        record = log.makeRecord(log.name, logging.INFO, __file__, 0, _ACCESS, args, None, extra={"fields": fields})
        log.handle(record)


class HttpTally:
    """`inboxd_http_requests` and `inboxd_http_request_seconds`, counted in plain integers per
    request and handed to the Prometheus metrics when `/metrics` is scraped: a labelled
    Prometheus update takes a lock and a label lookup per series, several microseconds a request.

    With `PROMETHEUS_MULTIPROC_DIR` another process's scrape answers for this one, which it cannot
    ask to hand over its counts: there every request updates the metrics at once.
    """

    __slots__ = ("_counts", "_direct", "_latency", "_metrics")

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._direct = metrics.multiprocess
        self._counts: dict[tuple[str, str, int], int] = {}
        # Per (method, route): the count in each bucket (the last is +Inf), then the sum of seconds.
        self._latency: dict[tuple[str, str], list[float]] = {}
        metrics.on_scrape(self.flush)

    def count(self, method: str, route: str, status: int, elapsed: float) -> None:
        if self._direct:
            self._metrics.http_requests.labels(method, route, str(status)).inc()
            self._metrics.http_latency.labels(method, route).observe(elapsed)
            return
        key = (method, route, status)
        self._counts[key] = self._counts.get(key, 0) + 1
        tally = self._latency.get((method, route))
        if tally is None:
            tally = self._latency[(method, route)] = [0.0] * (len(LATENCY) + 2)
        # A bucket holds the values up to and including its bound, as Histogram.observe counts them.
        tally[bisect.bisect_left(LATENCY, elapsed)] += 1
        tally[-1] += elapsed

    async def flush(self) -> None:
        counts, self._counts = self._counts, {}
        latency, self._latency = self._latency, {}
        for (method, route, status), n in counts.items():
            self._metrics.http_requests.labels(method, route, str(status)).inc(n)
        for (method, route), tally in latency.items():
            child = self._metrics.http_latency.labels(method, route)
            # prometheus_client has no public way to add many observations at once; these are the
            # per-bucket values `observe` increments (non-cumulative; `collect` adds them up).
            for bucket, observed in zip(child._buckets, tally[:-1], strict=True):
                if observed:
                    bucket.inc(observed)
            child._sum.inc(tally[-1])


class Observe:
    def __init__(
        self,
        app: ASGIApp,
        *,
        tally: HttpTally,
        ids: RequestIds,
        routes: Iterable[BaseRoute],
        trusted_proxies: Sequence[str] = (),
    ) -> None:
        self.app = app
        self.tally = tally
        self.ids = ids
        self.templates = route_templates(routes)
        self.trusted_proxies = tuple(trusted_proxies)
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
        rid = incoming_id(scope, self.ids)
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
            self.tally.count(scope["method"], route, status, elapsed)
            log_access(
                scope, status=status, route=route, size=size, elapsed=elapsed, trusted_proxies=self.trusted_proxies
            )
            request_id.reset(token)
