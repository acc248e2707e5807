"""The SMTP sandbox end to end through the `mailtd` 1.3.2 SDK's `client.sandbox`, unchanged: an
application configured only from `get_info()` sends with smtplib, the SDK reads what it sent."""

from __future__ import annotations

import asyncio
import json
import smtplib
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import pytest
from mailtd import MailTD
from mailtd.client import APIError

from inboxd.app import Inboxd
from tests.conftest import Clock, Harness
from tests.webhook_receiver import Receiver
from tests.wsclient import authed

# The end to end run is on both back ends; the rest on SQLite.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

PDF = b"%PDF-1.4 not really a pdf\x00\x01\x02"


def message(subject: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "Shop <shop@example.com>"
    msg["To"] = "customer@example.org"
    msg["Cc"] = "sales@example.net"
    msg["Subject"] = subject
    msg.set_content("Thanks for your order.")
    msg.add_attachment(PDF, maintype="application", subtype="pdf", filename="invoice.pdf")
    return msg


def sdk_session(base_url: str, token: str) -> dict[str, Any]:
    """What an application and its developer do, all through public clients."""
    out: dict[str, Any] = {}
    with MailTD(token, base_url=base_url) as client:
        info = client.sandbox.get_info()
        out["info"] = info
        # The application is configured from the info alone (the host is the server's name for
        # itself; this test reaches it on 127.0.0.1).
        with smtplib.SMTP("127.0.0.1", info.smtp_port, timeout=30) as smtp:
            smtp.login(info.username, token)
            smtp.send_message(
                message("Order 1"), to_addrs=["customer@example.org", "sales@example.net", "audit@example.com"]
            )
        messages, page = client.sandbox.list_messages(page=1)
        out["listed"], out["page"] = messages, page
        detail = client.sandbox.get_message(messages[0].id)
        out["detail"] = detail
        out["source"] = client.sandbox.get_message_source(detail.id)
        out["attachment"] = client.sandbox.get_attachment(detail.id, 0)
        client.sandbox.delete_message(detail.id)
        out["after_delete"] = client.sandbox.list_messages()[0]
        try:
            client.sandbox.get_message(detail.id)
        except APIError as exc:
            out["deleted_error"] = (exc.status, exc.code)
        with smtplib.SMTP("127.0.0.1", info.smtp_port, timeout=30) as smtp:
            smtp.login(info.username, token)
            for n in range(3):
                smtp.send_message(message(f"Order {n + 2}"))
        out["purged"] = client.sandbox.purge_messages()
        out["after_purge"] = client.sandbox.list_messages()[0]
    return out


async def test_sdk_sandbox_end_to_end(harness: Harness) -> None:
    token = await harness.new_user("pro")
    base_url = f"http://127.0.0.1:{harness.server.http_port}"
    out = await asyncio.to_thread(sdk_session, base_url, token)

    info = out["info"]
    assert info.enabled is True
    assert info.smtp_port == harness.server.submission_port
    assert info.username.startswith("sbx_") and info.auth_method == "api_token" and info.note
    assert info.account_id and info.address.endswith("@sandbox.invalid")
    assert info.quota == harness.server.settings.pro_mailbox_quota

    listed = out["listed"]
    assert out["page"] == 1 and len(listed) == 1
    assert listed[0].subject == "Order 1" and listed[0].sender and listed[0].from_ == "Shop <shop@example.com>"
    detail = out["detail"]
    assert detail.address == info.address and detail.text_body.startswith("Thanks for your order.")
    assert [(a.index, a.filename, a.content_type, a.size) for a in detail.attachments] == [
        (0, "invoice.pdf", "application/pdf", len(PDF))
    ]
    assert b"Subject: Order 1" in out["source"]
    assert out["attachment"] == PDF
    assert out["after_delete"] == []
    assert out["deleted_error"] == (404, "not_found")
    assert out["purged"] == 3 and out["after_purge"] == []


@sqlite_only
async def test_sdk_fields_beyond_the_sdk_types(harness: Harness) -> None:
    """`recipients`, `to`, `cc`, `bcc` are in the JSON (the SDK's dataclasses keep only theirs)."""
    token = await harness.new_user("pro")
    info = (await harness.http.get("/api/user/sandbox", headers=harness.auth(token))).json()

    def send() -> None:
        with smtplib.SMTP("127.0.0.1", info["smtp_port"], timeout=30) as smtp:
            smtp.login(info["username"], token)
            smtp.send_message(message("x"), to_addrs=["customer@example.org", "hidden@example.com"])

    await asyncio.to_thread(send)
    listed = (await harness.http.get("/api/user/sandbox/messages", headers=harness.auth(token))).json()
    assert listed["messages"][0]["recipients"] == ["customer@example.org", "hidden@example.com"]
    detail = (
        await harness.http.get(f"/api/user/sandbox/messages/{listed['messages'][0]['id']}", headers=harness.auth(token))
    ).json()
    assert (detail["to"], detail["cc"], detail["bcc"]) == (
        "customer@example.org",
        "sales@example.net",
        ["hidden@example.com"],
    )
    # The quota counts what was captured.
    again = (await harness.http.get("/api/user/sandbox", headers=harness.auth(token))).json()
    assert again["used"] == detail["size"] > 0


def sdk_errors(base_url: str, free: str, mailbox_token: str) -> list[tuple[int, str]]:
    found = []
    for token in (free, mailbox_token, "ibx_not-a-token"):
        with MailTD(token, base_url=base_url) as client:
            try:
                client.sandbox.get_info()
            except APIError as exc:
                found.append((exc.status, exc.code))
    return found


@sqlite_only
async def test_sdk_errors_as_other_user_paths(harness: Harness) -> None:
    free = await harness.new_user("free")
    box = await harness.new_mailbox()
    base_url = f"http://127.0.0.1:{harness.server.http_port}"
    assert await asyncio.to_thread(sdk_errors, base_url, free, box["token"]) == [
        (403, "pro_required"),
        (403, "access_denied"),
        (401, "invalid_token"),
    ]
    response = await harness.http.get("/api/user/sandbox/messages", params={"page": 0}, headers=harness.auth())
    assert response.status_code == 400


@sqlite_only
async def test_capture_is_live_on_the_websocket(harness: Harness) -> None:
    token = await harness.new_user("pro")
    user = (await harness.http.get("/api/user/me", headers=harness.auth(token))).json()
    found = await harness.server.services.users.user_by_email(user["email"])
    ws_token = await harness.server.services.sandboxes.mailbox_token(found)
    info = (await harness.http.get("/api/user/sandbox", headers=harness.auth(token))).json()
    async with authed(harness.server.http_port, ws_token) as ws:

        def send() -> None:
            with smtplib.SMTP("127.0.0.1", info["smtp_port"], timeout=30) as smtp:
                smtp.login(info["username"], token)
                smtp.send_message(message("live"), to_addrs=["someone@example.org"])

        await asyncio.to_thread(send)
        frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert frame["type"] == "new_email"
    assert frame["subject"] == "live"
    assert (frame["account_id"], frame["address"]) == (info["account_id"], info["address"])


@sqlite_only
async def test_capture_raises_the_email_received_webhook(make_settings: Any, clock: Clock, tmp_path: Path) -> None:
    receiver = Receiver.create(tmp_path)
    await receiver.start()
    settings = make_settings(
        webhook_ca_file=str(receiver.ca_path), webhook_allow_private=True, webhook_poll_interval=0.05
    )
    try:
        async with Inboxd(settings, clock=clock) as server:
            token = server.bootstrap_token
            assert token is not None
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
                hook = await http.post(
                    "/api/user/webhooks", json={"url": receiver.url(), "events": ["email.received"]}, headers=headers
                )
                assert hook.status_code == 201, hook.text
                info = (await http.get("/api/user/sandbox", headers=headers)).json()

                def send() -> None:
                    with smtplib.SMTP("127.0.0.1", info["smtp_port"], timeout=30) as smtp:
                        smtp.login(info["username"], token)
                        smtp.send_message(message("hooked"), to_addrs=["a@example.org", "b@example.org"])

                await asyncio.to_thread(send)
                [request] = await receiver.wait_for(1)
        body = json.loads(request.body)
        assert body["type"] == "email.received"
        assert body["data"]["subject"] == "hooked"
        assert (body["data"]["account_id"], body["data"]["address"]) == (info["account_id"], info["address"])
    finally:
        await receiver.stop()
