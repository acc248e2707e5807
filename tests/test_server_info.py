"""`GET /api/server`: the version, and an SMTP address a client can deliver to, over real HTTP and SMTP."""

from __future__ import annotations

import asyncio
import smtplib
from importlib import metadata
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.services.mailboxes import reachable_host
from tests.conftest import Clock, Harness, simple_message

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


async def test_the_server_says_where_mail_is_delivered(harness: Harness) -> None:
    answer = await harness.http.get("/api/server", headers=harness.auth())
    assert answer.status_code == 200
    assert answer.json() == {
        "version": metadata.version("inboxd"),
        "smtp": {"host": "127.0.0.1", "port": harness.server.smtp_port},  # the bound port, not the setting's 0
    }
    assert (await harness.http.get("/api/server")).json()["error"] == "invalid_token"

    # The address is one mail can be delivered to, as given.
    box = await harness.new_mailbox()
    smtp = answer.json()["smtp"]

    def deliver() -> None:
        with smtplib.SMTP(smtp["host"], smtp["port"], timeout=30) as client:
            client.send_message(simple_message(subject="Through the advertised address"), to_addrs=[box["address"]])

    await asyncio.to_thread(deliver)
    listed = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())
    assert [m["subject"] for m in listed.json()["messages"]] == ["Through the advertised address"]


@sqlite_only
async def test_the_operators_smtp_hostname_comes_first(make_settings: Any, clock: Clock) -> None:
    server = Inboxd(make_settings(smtp_hostname="mx.example.test"), clock=clock)
    await server.start()
    try:
        assert server.bootstrap_token is not None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
            answer = await http.get("/api/server", headers={"Authorization": f"Bearer {server.bootstrap_token}"})
        assert answer.json()["smtp"] == {"host": "mx.example.test", "port": server.smtp_port}
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("listener", "hostname", "asked", "advertised"),
    [
        ("127.0.0.1", "", "localhost", "127.0.0.1"),  # bound to one address: that address
        ("192.0.2.7", "", "inboxd.example.test", "192.0.2.7"),
        ("0.0.0.0", "", "inboxd.example.test", "inboxd.example.test"),  # every address: the host the client used
        ("::", "", "::1", "::1"),
        ("[::]", "", "10.1.2.3", "10.1.2.3"),
        ("", "", "", "localhost"),
        ("0.0.0.0", "mx.example.test", "10.1.2.3", "mx.example.test"),  # INBOXD_SMTP_HOSTNAME wins
        ("127.0.0.1", "mx.example.test", "localhost", "mx.example.test"),
    ],
)
def test_the_advertised_host_is_one_the_client_can_reach(
    listener: str, hostname: str, asked: str, advertised: str
) -> None:
    assert reachable_host(listener, hostname=hostname, asked_host=asked) == advertised
