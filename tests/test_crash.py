"""Crash durability: inboxd as a child process under SMTP load from several senders, killed with
SIGKILL at a random moment, 20 times. After each restart every message that got a 250 is there,
in every mailbox it was sent to, and its stored source is byte-identical to what was sent
(SHA-256). A message cut off before its 250 may or may not be there, but never half.

The kill lands wherever the load happens to be: mid-DATA, in a group commit, between a COMMIT and
its 250. The random seed is printed (and can be set with INBOXD_CRASH_SEED) to replay a run.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import random
import smtplib
import sqlite3
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.conftest import PG_URL
from tests.serverproc import ForkedServer

ROUNDS = 20
SENDERS = 4
DOMAIN = "inboxd.localhost"


@dataclass(frozen=True)
class Sent:
    body: bytes
    digest: str
    mailbox_ids: tuple[str, ...]


@dataclass
class Ledger:
    """What was sent, and what the server acknowledged with 250."""

    sent: dict[str, Sent] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)
    refused: list[str] = field(default_factory=list)
    # Set just before each kill: a sender whose connection fails before it was not cut off by the
    # crash but by something else (a hung or crashed server, a refused connection), a failure.
    killed: threading.Event = field(default_factory=threading.Event)
    broken: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def message(token: str, rng: random.Random) -> bytes:
    """A message whose body is random base64 in CRLF lines (no line starts with a dot, so what
    goes over the wire is what the server must store)."""
    payload = base64.encodebytes(rng.randbytes(rng.randint(200, 24_000))).replace(b"\n", b"\r\n")
    head = (
        f"From: Crash Test <sender@example.org>\r\nTo: someone@{DOMAIN}\r\nSubject: crash {token}\r\n"
        f"Message-ID: <{token}@example.org>\r\n\r\n"
    ).encode()
    return head + payload


def sender_loop(port: int, *, name: str, boxes: list[dict[str, Any]], ledger: Ledger, seed: int) -> None:
    """Send over one connection until the server goes away; record each 250."""
    rng = random.Random(seed)
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=15) as client:
            for n in range(100_000):
                token = f"{name}m{n}"
                targets = boxes if n % 3 == 0 else [boxes[n % len(boxes)]]  # some to both mailboxes
                body = message(token, rng)
                sent = Sent(body, hashlib.sha256(body).hexdigest(), tuple(b["id"] for b in targets))
                with ledger.lock:
                    ledger.sent[token] = sent
                try:
                    client.sendmail("sender@example.org", [b["address"] for b in targets], body)
                except smtplib.SMTPResponseException as exc:
                    with ledger.lock:
                        ledger.refused.append(f"{token}: {exc.smtp_code} {exc.smtp_error!r}")
                    return
                with ledger.lock:
                    ledger.acked.add(token)
    except (smtplib.SMTPServerDisconnected, OSError) as exc:
        if not ledger.killed.is_set():
            with ledger.lock:
                ledger.broken.append(f"{name}: {exc!r} before the kill")
        return  # the server was killed


async def all_items(http: httpx.AsyncClient, mailbox_id: str, auth: dict[str, str]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in range(1, 10_000):
        response = await http.get(f"/api/accounts/{mailbox_id}/messages", params={"page": page}, headers=auth)
        assert response.status_code == 200, response.text
        batch = response.json()["messages"]
        items.extend(batch)
        if len(batch) < 30:
            return items
    raise AssertionError("too many pages")


async def verify(
    http: httpx.AsyncClient, auth: dict[str, str], boxes: list[dict[str, Any]], ledger: Ledger, *, sources: bool = True
) -> int:
    """Every acknowledged message is in each of its mailboxes, intact; nothing stored is torn
    (`sources=False` checks presence and size only). Returns how many stored copies were checked."""
    checked = 0
    for box in boxes:
        items = await all_items(http, box["id"], auth)
        found: set[str] = set()
        for item in items:
            token = item["subject"].removeprefix("crash ")
            sent = ledger.sent.get(token)
            assert sent is not None, f"a message that was never sent: {item['subject']!r}"
            assert box["id"] in sent.mailbox_ids
            if sources:
                source = await http.get(f"/api/accounts/{box['id']}/messages/{item['id']}/source", headers=auth)
                assert source.status_code == 200, source.text
                tail = source.content[-len(sent.body) :]
                assert hashlib.sha256(tail).hexdigest() == sent.digest, f"{token}: the stored source differs"
                assert item["size"] == len(source.content)
            else:
                assert item["size"] > len(sent.body)  # the body plus our Received: header
            found.add(token)
            checked += 1
        expected = {t for t in ledger.acked if box["id"] in ledger.sent[t].mailbox_ids}
        assert not expected - found, f"acknowledged with 250 but lost: {sorted(expected - found)[:10]}"
    return checked


REFERENCES = (
    "SELECT count(*) FROM message_sources s WHERE s.refs <> "
    "(SELECT count(*) FROM messages m WHERE m.source_id = s.id AND m.deleted = 0) OR s.refs <= 0"
)


def references_hold(data_dir: Path, env: dict[str, str]) -> bool:
    """No shared source counts its copies wrong after the crashes (no orphan, none short)."""
    if "INBOXD_DATABASE_URL" not in env:
        with sqlite3.connect(data_dir / "inboxd.sqlite3") as conn:
            return int(conn.execute(REFERENCES).fetchone()[0]) == 0
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{env["INBOXD_DATABASE_SCHEMA"]}"')
        row = conn.execute(REFERENCES).fetchone()
        return row is not None and int(row[0]) == 0


@pytest.fixture(params=["sqlite", "postgres"])
async def crash_env(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    schema = f"crash_{uuid.uuid4().hex[:10]}"
    yield {"INBOXD_DATABASE_URL": PG_URL, "INBOXD_DATABASE_SCHEMA": schema}
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.timeout(240)
async def test_acknowledged_mail_survives_sigkill(crash_env: dict[str, str], tmp_path: Path) -> None:
    seed = int(os.environ.get("INBOXD_CRASH_SEED", str(random.randrange(1 << 32))))
    print(f"crash test seed {seed} (INBOXD_CRASH_SEED={seed} replays it)")
    rng = random.Random(seed)
    data_dir = tmp_path / "data"
    env = {"INBOXD_PRO_RPS": "10000", "INBOXD_PRO_CREATE_INTERVAL": "0", **crash_env}
    server = await ForkedServer.start(data_dir, **env)
    assert server.bootstrap_token is not None
    auth = {"Authorization": f"Bearer {server.bootstrap_token}"}
    ledger = Ledger()
    every_box: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        for round_no in range(ROUNDS):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
                boxes = []
                for n in range(2):
                    created = await http.post(
                        "/api/accounts",
                        json={"address": f"crash{round_no}-{n}@{DOMAIN}", "auth_key": "cd" * 32},
                        headers=auth,
                    )
                    assert created.status_code == 201, created.text
                    boxes.append(created.json())
            every_box.extend(boxes)
            threads = [
                threading.Thread(
                    target=sender_loop,
                    args=(server.smtp_port,),
                    kwargs={
                        "name": f"r{round_no}s{n}",
                        "boxes": boxes,
                        "ledger": ledger,
                        "seed": rng.randrange(1 << 32),
                    },
                    daemon=True,
                )
                for n in range(SENDERS)
            ]
            before = len(ledger.acked)
            for thread in threads:
                thread.start()
            # Kill at a random moment once the load is flowing (a busy machine can take a while
            # to deliver the first message of a round).
            for _ in range(3000):
                if len(ledger.acked) > before:
                    break
                await asyncio.sleep(0.01)
            assert len(ledger.acked) > before, f"round {round_no}: no message was acknowledged before the kill"
            await asyncio.sleep(rng.uniform(0.0, 0.5))
            ledger.killed.set()
            await server.kill()
            for thread in threads:
                await asyncio.to_thread(thread.join, 20)
                assert not thread.is_alive()
            assert not ledger.refused, ledger.refused[:5]
            assert not ledger.broken, ledger.broken[:5]
            ledger.killed.clear()
            server = await ForkedServer.start(data_dir, **env)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
                await verify(http, auth, boxes, ledger)
        # And at the end, every round once more (their bytes were compared after their own
        # restart): later crashes took nothing of the earlier ones.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            stored = await verify(http, auth, every_box, ledger, sources=False)
        assert server.alive
        assert references_hold(data_dir, crash_env)
    finally:
        await server.stop()
    elapsed = time.monotonic() - started
    print(f"{ROUNDS} kills: {len(ledger.acked)} messages acknowledged, {stored} copies stored, {elapsed:.1f} s")
    assert len(ledger.acked) >= ROUNDS  # the load really ran
