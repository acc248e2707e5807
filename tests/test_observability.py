"""Metrics, logs and request ids, against `inboxd serve` as an operator runs it."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import smtplib
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inboxd.app import Inboxd
from tests.conftest import Clock, send_mail
from tests.serverproc import ServerProcess

PASSWORD = "hunter2-correct-horse"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def _mailbox(http: httpx.AsyncClient, token: str, local: str) -> dict[str, Any]:
    response = await http.post(
        "/api/accounts",
        json={"address": f"{local}@inboxd.localhost", "password": PASSWORD},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_logs_metrics_and_request_ids(tmp_path: Path) -> None:
    server = await ServerProcess.start(
        tmp_path / "data",
        INBOXD_LOG_LEVEL="info",
        INBOXD_LOG_FORMAT="json",
        INBOXD_METRICS_TOKEN="metrics-secret-value",
        INBOXD_PRO_RPS="1000",
        INBOXD_PRO_CREATE_INTERVAL="0",
    )
    try:
        token = server.bootstrap_token
        assert token is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            created = await _mailbox(http, token, "ops")
            await asyncio.to_thread(send_mail, server.smtp_port, created["address"])
            listed = await http.get(
                f"/api/accounts/{created['address']}/messages",
                headers={"Authorization": f"Bearer {created['token']}", "X-Request-ID": "req-from-client.1"},
            )
            assert listed.status_code == 200
            assert listed.headers["x-request-id"] == "req-from-client.1"
            # A header that is not a plausible id is replaced, never echoed.
            odd = await http.get("/healthz", headers={"X-Request-ID": "bad id\twith spaces"})
            assert len(odd.headers["x-request-id"]) == 32 and " " not in odd.headers["x-request-id"]
            missing = await http.get(
                "/api/accounts/nobody@inboxd.localhost", headers={"Authorization": f"Bearer {token}"}
            )
            assert missing.status_code == 404
            # SMTP refused at RCPT: a transaction that never reaches DATA is not logged as one.
            with smtplib.SMTP("127.0.0.1", server.smtp_port, timeout=30) as client:
                client.ehlo()
                assert client.mail("x@example.org")[0] == 250
                assert client.rcpt("nobody@inboxd.localhost")[0] == 550

            assert (await http.get("/metrics")).status_code == 401
            assert (await http.get("/metrics", headers={"Authorization": "Bearer wrong"})).status_code == 401
            scraped = await http.get("/metrics", headers={"Authorization": "Bearer metrics-secret-value"})
            assert scraped.status_code == 200
            assert scraped.headers["content-type"].startswith("text/plain")
            found = samples(scraped.text)
        assert value(found, "inboxd_smtp_transactions_total", outcome="accepted", code="250") == 1
        assert value(found, "inboxd_smtp_connections_total") == 2
        assert value(found, "inboxd_smtp_received_bytes_total") > 100
        assert value(found, "inboxd_smtp_ingest_seconds_count") == 1
        assert value(found, "inboxd_db_commit_batch_size_count") >= 2
        route = "/api/accounts/{mailbox}/messages"
        assert value(found, "inboxd_http_requests_total", method="GET", route=route, status="200") == 1
        assert (
            value(found, "inboxd_http_requests_total", method="GET", route="/api/accounts/{mailbox}", status="404") == 1
        )
        assert value(found, "inboxd_http_request_seconds_count", method="GET", route=route) == 1
        for name in (
            "inboxd_websocket_connections",
            "inboxd_webhook_queue_depth",
            "inboxd_db_pool_size",
            "inboxd_db_pool_in_use",
            "inboxd_db_write_queue",
            "inboxd_smtp_sessions_open",
        ):
            assert (name, ()) in found, name
        assert value(found, "inboxd_db_pool_size") >= 1
    finally:
        await server.stop()
    lines = [json.loads(line) for line in server.output if line.startswith("{")]
    http_lines = [line for line in lines if line["logger"] == "inboxd.http"]
    tied = [line for line in http_lines if line.get("request_id") == "req-from-client.1"]
    assert len(tied) == 1 and tied[0]["route"] == route and tied[0]["level"] == "info"
    assert tied[0]["message"].startswith("GET /api/accounts/") and tied[0]["message"].endswith(" 200")
    assert {"client", "bytes", "ms", "time"} <= tied[0].keys()
    smtp_lines = [line for line in lines if line["logger"] == "inboxd.smtp" and "transaction" in line["message"]]
    assert len(smtp_lines) == 1
    smtp = smtp_lines[0]
    assert smtp["client"] == "127.0.0.1" and smtp["from"] == "alice@example.org"
    assert smtp["mailbox"] == created["address"] and smtp["reply"].startswith("250 ") and smtp["size"] > 100
    assert smtp["ms"] >= 0
    everything = "".join(server.output)
    for secret in (token, created["token"], PASSWORD, "metrics-secret-value"):
        assert secret not in everything


async def test_text_log_format_is_the_default(tmp_path: Path) -> None:
    server = await ServerProcess.start(tmp_path / "data", INBOXD_LOG_LEVEL="info")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
            answer = await http.get("/healthz")
    finally:
        await server.stop()
    rid = answer.headers["x-request-id"]
    line = next(line for line in server.output if "inboxd.http" in line)
    assert line.split(" ")[2] == "INFO" and "GET /healthz 200" in line
    assert f"request_id={rid}" in line and "route=/healthz" in line


async def test_metrics_add_up_over_processes(tmp_path: Path) -> None:
    """Two processes sharing PROMETHEUS_MULTIPROC_DIR: either one's /metrics counts both."""
    shared = tmp_path / "prometheus"
    shared.mkdir()
    servers = [await ServerProcess.start(tmp_path / f"data{i}", PROMETHEUS_MULTIPROC_DIR=str(shared)) for i in range(2)]
    try:
        for i, server in enumerate(servers):
            assert server.bootstrap_token is not None
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
                box = await _mailbox(http, server.bootstrap_token, f"multi{i}")
            await asyncio.to_thread(send_mail, server.smtp_port, box["address"])
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{servers[0].http_port}") as http:
            found = samples((await http.get("/metrics")).text)
        assert value(found, "inboxd_smtp_transactions_total", outcome="accepted", code="250") == 2
        assert value(found, "inboxd_http_requests_total", method="POST", route="/api/accounts", status="201") == 2
    finally:
        for server in servers:
            await server.stop()


async def test_what_answers_without_authentication(tmp_path: Path) -> None:
    """`/api/openapi.json` and `/api/docs` are public and describe the API, not this instance's
    data. `INBOXD_METRICS_LISTEN` moves `/metrics` to an address of its own (the main port
    answers 404), where `INBOXD_METRICS_TOKEN`, when set, is still required."""
    server = await ServerProcess.start(
        tmp_path / "data",
        INBOXD_METRICS_LISTEN="127.0.0.1:0",
        INBOXD_METRICS_TOKEN="metrics-secret-value",
        INBOXD_PRO_CREATE_INTERVAL="0",
    )
    try:
        found = re.search(r"metrics on 127\.0\.0\.1:(\d+)", "".join(server.output))
        assert found, server.output
        assert server.bootstrap_token is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            box = await _mailbox(http, server.bootstrap_token, "private-box")
            bearer = {"Authorization": "Bearer metrics-secret-value"}
            assert (await http.get("/metrics", headers=bearer)).status_code == 404
            spec = await http.get("/api/openapi.json")
            docs = await http.get("/api/docs")
        assert spec.status_code == 200 and docs.status_code == 200
        for public in (spec.text, docs.text):
            assert box["address"] not in public and "private-box" not in public
            assert "metrics-secret-value" not in public and server.bootstrap_token not in public
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{found.group(1)}", timeout=30) as metrics:
            assert (await metrics.get("/metrics")).status_code == 401
            scraped = await metrics.get("/metrics", headers=bearer)
            assert scraped.status_code == 200 and "inboxd_http_requests_total" in scraped.text
            assert (await metrics.get("/api/openapi.json")).status_code == 404  # /metrics alone
            assert (await metrics.get("/healthz")).status_code == 404
    finally:
        await server.stop()


async def test_the_access_log_names_the_client_a_trusted_proxy_reports(
    make_settings: Any, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(trusted_proxies=["127.0.0.1/32"])
    caplog.set_level(logging.INFO, logger="inboxd.http")
    async with Inboxd(settings, clock=clock) as server:
        for source, forwarded_for in (("127.0.0.1", "203.0.113.5"), ("127.0.0.2", "192.0.2.9")):
            transport = httpx.AsyncHTTPTransport(local_address=source)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", transport=transport) as http:
                answer = await http.get("/healthz", headers={"X-Forwarded-For": forwarded_for})
                assert answer.status_code == 200
    clients = [
        record.fields["client"]  # type: ignore[attr-defined]
        for record in caplog.records
        if record.name == "inboxd.http" and record.getMessage() == "GET /healthz 200"
    ]
    # From the trusted proxy, the client it names; from anyone else, the peer whatever it claims.
    assert clients == ["203.0.113.5", "127.0.0.2"]
