"""`SmtpTally`: the SMTP metrics of a listener, counted in plain integers per connection and per
transaction and handed to the Prometheus metrics when `/metrics` is scraped (as `HttpTally` in
`api/observe.py` does for HTTP): a Prometheus update takes a lock (and a labelled one a label
lookup), and a message over a fresh connection made six of them."""

from __future__ import annotations

import bisect

from inboxd.metrics import LATENCY, Metrics


class SmtpTally:
    """`inboxd_smtp_connections`, `inboxd_smtp_sessions_open`, `inboxd_smtp_transactions`,
    `inboxd_smtp_received_bytes` and `inboxd_smtp_ingest_seconds`.

    With `PROMETHEUS_MULTIPROC_DIR` another process's scrape answers for this one, which it cannot
    ask to hand over its counts: there every update goes to the metrics at once.
    """

    __slots__ = ("_bytes", "_connections", "_direct", "_ingest", "_metrics", "_sessions", "_transactions")

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._direct = metrics.multiprocess
        self._connections = 0
        self._sessions = 0  # opened less closed since the last hand-over
        self._transactions: dict[tuple[str, str], int] = {}
        self._bytes = 0
        # The count in each bucket of `inboxd_smtp_ingest_seconds` (the last is +Inf), then the sum.
        self._ingest = [0.0] * (len(LATENCY) + 2)
        if not self._direct:
            metrics.on_scrape(self.flush)

    def connection(self) -> None:
        if self._direct:
            self._metrics.smtp_connections.inc()
        else:
            self._connections += 1

    def session(self, change: int) -> None:
        """A session counted in (1) or out (-1) of those open."""
        if self._direct:
            self._metrics.smtp_sessions.inc(change)
        else:
            self._sessions += change

    def transaction(self, outcome: str, code: str, size: int, seconds: float) -> None:
        """A transaction's end; an accepted one's size and seconds count too."""
        if self._direct:
            self._metrics.smtp_transactions.labels(outcome, code).inc()
            if outcome == "accepted":
                self._metrics.smtp_bytes.inc(size)
                self._metrics.smtp_ingest.observe(seconds)
            return
        key = (outcome, code)
        self._transactions[key] = self._transactions.get(key, 0) + 1
        if outcome == "accepted":
            self._bytes += size
            ingest = self._ingest
            # A bucket holds the values up to and including its bound, as Histogram.observe counts them.
            ingest[bisect.bisect_left(LATENCY, seconds)] += 1
            ingest[-1] += seconds

    async def flush(self) -> None:
        metrics = self._metrics
        if self._connections:
            metrics.smtp_connections.inc(self._connections)
            self._connections = 0
        if self._sessions:
            metrics.smtp_sessions.inc(self._sessions)
            self._sessions = 0
        transactions, self._transactions = self._transactions, {}
        for (outcome, code), n in transactions.items():
            metrics.smtp_transactions.labels(outcome, code).inc(n)
        if self._bytes:
            metrics.smtp_bytes.inc(self._bytes)
            self._bytes = 0
        ingest, self._ingest = self._ingest, [0.0] * (len(LATENCY) + 2)
        # prometheus_client has no public way to add many observations at once; these are the
        # per-bucket values `observe` increments (non-cumulative; `collect` adds them up).
        histogram = metrics.smtp_ingest
        for bucket, observed in zip(histogram._buckets, ingest[:-1], strict=True):
            if observed:
                bucket.inc(observed)
        if ingest[-1]:
            histogram._sum.inc(ingest[-1])
