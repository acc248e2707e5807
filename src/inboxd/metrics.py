"""Prometheus metrics: what inboxd counts, and `/metrics`' text.

One `Metrics` per running inboxd, built in `app.py` and handed to the parts that count. Without
`PROMETHEUS_MULTIPROC_DIR` the metrics live in this object's own registry. With it (several
processes behind one address: set it to an empty directory shared by them), prometheus_client
keeps every value in files there and `/metrics` in any process answers the sum over all of
them; live gauges (open connections) count only processes still running.

Gauges that describe shared state (the webhook queue, the database pool) are read when
`/metrics` is scraped, through the refreshers `app.py` registers.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WEBHOOK_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def multiprocess_dir() -> str:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


class Metrics:
    def __init__(self) -> None:
        self.multiprocess = bool(multiprocess_dir())
        # In multi-process mode the values live in files and a fresh registry collects them.
        self.registry = CollectorRegistry() if not self.multiprocess else None
        r = self.registry
        self.smtp_connections = Counter("inboxd_smtp_connections", "SMTP connections accepted.", registry=r)
        self.smtp_sessions = Gauge(
            "inboxd_smtp_sessions_open", "SMTP sessions open now.", registry=r, multiprocess_mode="livesum"
        )
        self.smtp_transactions = Counter(
            "inboxd_smtp_transactions",
            "SMTP transactions that reached the end of DATA (or were refused at MAIL), by outcome and reply code.",
            ["outcome", "code"],
            registry=r,
        )
        self.smtp_bytes = Counter("inboxd_smtp_received_bytes", "Message bytes accepted over SMTP.", registry=r)
        self.smtp_ingest = Histogram(
            "inboxd_smtp_ingest_seconds", "End of DATA to the final reply.", buckets=LATENCY, registry=r
        )
        self.db_batch = Histogram(
            "inboxd_db_commit_batch_size", "Units of work per group commit.", buckets=BATCH, registry=r
        )
        self.http_requests = Counter(
            "inboxd_http_requests",
            "HTTP requests by route template and status.",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_latency = Histogram(
            "inboxd_http_request_seconds", "HTTP request latency.", ["method", "route"], buckets=LATENCY, registry=r
        )
        self.ws_connections = Gauge(
            "inboxd_websocket_connections",
            "Authenticated WebSocket connections open now.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.webhook_deliveries = Counter(
            "inboxd_webhook_deliveries", "Webhook attempts by outcome (ok, failed).", ["outcome"], registry=r
        )
        self.webhook_latency = Histogram(
            "inboxd_webhook_delivery_seconds", "Webhook attempt duration.", buckets=WEBHOOK_LATENCY, registry=r
        )
        self.webhook_queue = Gauge(
            "inboxd_webhook_queue_depth",
            "Webhook jobs waiting (due or scheduled).",
            registry=r,
            multiprocess_mode="max",
        )
        self.db_pool_size = Gauge(
            "inboxd_db_pool_size", "Database connections held.", registry=r, multiprocess_mode="livesum"
        )
        self.db_pool_in_use = Gauge(
            "inboxd_db_pool_in_use", "Database connections in use.", registry=r, multiprocess_mode="livesum"
        )
        self.db_write_queue = Gauge(
            "inboxd_db_write_queue", "Units of work waiting for the writer.", registry=r, multiprocess_mode="livesum"
        )
        self._refreshers: list[Callable[[], Awaitable[None]]] = []

    def on_scrape(self, refresh: Callable[[], Awaitable[None]]) -> None:
        self._refreshers.append(refresh)

    async def render(self) -> bytes:
        for refresh in self._refreshers:
            await refresh()
        if self.registry is not None:
            return generate_latest(self.registry)
        collected = CollectorRegistry()
        multiprocess.MultiProcessCollector(collected)  # type: ignore[no-untyped-call]
        return generate_latest(collected)

    def process_exited(self) -> None:
        """Drop this process's live gauges from the shared files (at a clean stop)."""
        if self.multiprocess:
            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]
