"""Reception data: the SMTP client's address and HELO name, and the MAIL FROM address, are kept
with every delivery (the authentication check's SPF needs them), on both back ends."""

from __future__ import annotations

import asyncio
import smtplib
from email.policy import SMTP
from functools import partial

from inboxd.store import messages as message_store
from tests.conftest import Harness, simple_message
from tests.test_shared_sources import database, quick_mailbox


def _send_with_helo(port: int, to: list[str], raw: bytes, helo: str) -> None:
    with smtplib.SMTP("127.0.0.1", port, local_hostname=helo, timeout=30) as client:
        client.sendmail("bounces@sender.example.org", to, raw)


async def test_client_address_helo_and_mail_from_are_kept(harness: Harness) -> None:
    boxes = [await quick_mailbox(harness, n) for n in range(2)]
    raw = simple_message(subject="reception").as_bytes(policy=SMTP)
    await asyncio.to_thread(
        _send_with_helo, harness.server.smtp_port, [b["address"] for b in boxes], raw, "mta.sender.example.org"
    )
    for box in boxes:
        listed = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())
        assert listed.status_code == 200, listed.text
        (message,) = listed.json()["messages"]
        kept = await database(harness).read(partial(message_store.reception, message_id=message["id"]))
        assert kept == message_store.ReceptionData(
            mail_from="bounces@sender.example.org", client_ip="127.0.0.1", helo="mta.sender.example.org"
        )
