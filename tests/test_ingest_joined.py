"""Deliveries written side by side: the SQLite writer joins them into one call (`store/db.py`
`Joinable`, `services/ingest.py` `_store`), and a full mailbox still refuses only the message that
does not fit. Real deliveries through the ingest service, on both back ends."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from inboxd.app import Inboxd
from inboxd.errors import MessageRejected


async def test_side_by_side_deliveries_are_charged_and_refused_one_by_one(make_settings: Any, clock: Any) -> None:
    async with (
        Inboxd(make_settings(pro_mailbox_quota=3000), clock=clock) as server,
        httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{server.http_port}",
            headers={"Authorization": f"Bearer {server.bootstrap_token}"},
        ) as http,
    ):

        async def new_box(local: str) -> dict[str, Any]:
            response = await http.post(
                "/api/accounts", json={"address": f"{local}@inboxd.localhost", "password": "secret123"}
            )
            return dict(response.json())

        small, other = await new_box("small"), await new_box("other")
        ingest = server.services.ingest
        to_small = await ingest.resolve(small["address"])
        to_other = await ingest.resolve(other["address"])
        assert to_small is not None and to_other is not None

        def mail(subject: str) -> bytes:
            return f"From: a@example.org\r\nSubject: {subject}\r\n\r\n{'y' * 1400}\r\n".encode()

        # Started in one turn of the loop, so the writer gets them as one batch (checked below):
        # together the first mailbox's three pass its quota, the first two fit.
        db = server._db
        assert db is not None
        batches: list[int] = []
        db.on_batch = batches.append
        results = await asyncio.gather(
            *(
                ingest.deliver(sender="a@example.org", recipients=[to], raw=mail(subject))
                for to, subject in ((to_small, "first"), (to_other, "elsewhere"), (to_small, "second"),
                                    (to_small, "third"))
            ),
            return_exceptions=True,
        )  # fmt: skip
        assert isinstance(results[0], list) and isinstance(results[1], list) and isinstance(results[2], list)
        assert isinstance(results[3], MessageRejected) and results[3].code == "mailbox_full"
        assert batches[0] == 4

        async def state(box: dict[str, Any]) -> tuple[int, list[str]]:
            used = (await http.get(f"/api/accounts/{box['id']}")).json()["used"]
            listed = (await http.get(f"/api/accounts/{box['id']}/messages")).json()["messages"]
            return used, sorted(m["subject"] for m in listed)

        assert await state(small) == (len(mail("first")) + len(mail("second")), ["first", "second"])
        assert await state(other) == (len(mail("elsewhere")), ["elsewhere"])
