"""`SmtpTally` hands Prometheus, at a scrape, what updating the metrics at once would have shown."""

from __future__ import annotations

import asyncio

from inboxd.metrics import Metrics
from inboxd.smtp.tally import SmtpTally

# (outcome, code, size, seconds): bucket bounds exactly (a bound holds its own value), between
# them, past the last, and refusals, whose size and seconds do not count.
TRANSACTIONS = [
    ("accepted", "250", 4233, 0.005),
    ("accepted", "250", 100, 0.0007),
    ("accepted", "250", 1, 12.0),
    ("accepted", "250", 77, 0.0005),
    ("rejected", "550", 999, 0.3),
    ("deferred", "452", 0, 0.0),
    ("deferred", "421", 5, 1.5),
]


def _direct(metrics: Metrics) -> None:
    """The updates as `smtp/` made them before the tally."""
    for _ in range(3):
        metrics.smtp_connections.inc()
    metrics.smtp_sessions.inc()
    metrics.smtp_sessions.inc()
    metrics.smtp_sessions.dec()
    for outcome, code, size, seconds in TRANSACTIONS:
        metrics.smtp_transactions.labels(outcome, code).inc()
        if outcome == "accepted":
            metrics.smtp_bytes.inc(size)
            metrics.smtp_ingest.observe(seconds)


def _tallied(tally: SmtpTally) -> None:
    for _ in range(3):
        tally.connection()
    tally.session(1)
    tally.session(1)
    tally.session(-1)
    for transaction in TRANSACTIONS:
        tally.transaction(*transaction)


def _scrape(metrics: Metrics) -> str:
    text = asyncio.run(metrics.render()).decode()
    # The `_created` stamps differ between two registries made a moment apart.
    return "\n".join(line for line in text.splitlines() if "_created" not in line)


def test_a_scrape_shows_what_direct_updates_show() -> None:
    direct, tallied = Metrics(), Metrics()
    tally = SmtpTally(tallied)
    _direct(direct)
    _tallied(tally)
    assert _scrape(tallied) == _scrape(direct)
    # Counts go on from what was handed over, not twice.
    _direct(direct)
    _tallied(tally)
    assert _scrape(tallied) == _scrape(direct)
    assert 'inboxd_smtp_transactions_total{code="250",outcome="accepted"} 8.0' in _scrape(tallied)
    assert "inboxd_smtp_sessions_open 2.0" in _scrape(tallied)


def test_nothing_is_counted_before_a_scrape_asks() -> None:
    metrics = Metrics()
    tally = SmtpTally(metrics)
    _tallied(tally)
    assert metrics.smtp_connections._value.get() == 0
    assert "inboxd_smtp_connections_total 3.0" in _scrape(metrics)
