"""A list filtered by what only the rows hold (`from`, `to`, `subject`, `unread`,
`has_attachments`) may walk up to `INBOXD_FILTER_SCAN_ROWS` rows: on SQLite it is read on a thread
of its own (`Database.read_aside`), never on the event loop, where 20,000 messages held every other
request for up to 1.5 s (docs/performance.md). Unfiltered pages stay on the loop. The API's list,
the dashboard's (`MessageService.page`) and a wait's look-up read the same way."""

from __future__ import annotations

import asyncio
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from inboxd.errors import StorageError
from inboxd.model import MessageFilter
from inboxd.store import mailboxes as mailbox_store
from inboxd.store import migrate
from inboxd.store.sqlite import SqliteDatabase
from tests.conftest import Harness, simple_message


async def _where(tx: Any) -> tuple[int, str]:
    return threading.get_ident(), threading.current_thread().name


async def test_read_aside_runs_on_one_thread_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "aside.sqlite3"
    migrate.alembic_upgrade(f"sqlite:///{path}")
    db = SqliteDatabase(str(path))
    try:
        first, second = await asyncio.gather(db.read_aside(_where), db.read_aside(_where))
        assert first == second  # one thread, the same for every such read
        assert first[0] != threading.get_ident() and first[1].startswith("sqlite-read-aside")
        assert (await db.read(_where))[0] == threading.get_ident()  # other reads stay on the loop
    finally:
        await db.close()
    with pytest.raises(StorageError, match="closed"):
        await db.read_aside(_where)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_filter_that_reads_rows_is_read_off_the_event_loop(harness: Harness) -> None:
    h = harness
    box = await h.new_mailbox()
    await h.send(box["address"], simple_message(subject="Invoice 7"))
    url = f"/api/accounts/{box['id']}/messages"
    assert len((await h.http.get(url, headers=h.auth())).json()["messages"]) == 1
    db = h.server._db
    assert isinstance(db, SqliteDatabase) and db._reader is not None
    on_loop: list[str] = []
    db._reader.set_trace_callback(on_loop.append)
    try:
        for params in ({"subject": "invoice"}, {"from": "alice@"}, {"unread": "true"}):
            found = await h.http.get(url, params=params, headers=h.auth())
            assert found.status_code == 200, found.text
            assert [m["subject"] for m in found.json()["messages"]] == ["Invoice 7"], params
        wait = await h.http.get(f"{url}/wait", params={"subject": "invoice", "timeout": "0"}, headers=h.auth())
        assert wait.status_code == 200 and wait.json()["subject"] == "Invoice 7"
        mailbox = await db.read_aside(partial(mailbox_store.get, mailbox_id=box["id"]))
        assert mailbox is not None
        listed = await h.server.services.messages.page(mailbox, 1, MessageFilter(subject="invoice"))
        assert [m.subject for m in listed] == ["Invoice 7"]
        filtered = [sql for sql in on_loop if " LIKE " in sql or "is_read = " in sql]
        assert not filtered, filtered
        # An unfiltered page is still read on the loop.
        assert (await h.http.get(url, headers=h.auth())).status_code == 200
        assert any("FROM messages" in sql for sql in on_loop), on_loop
    finally:
        db._reader.set_trace_callback(None)
