"""Export a mailbox: its live messages, oldest first, as mbox (mboxrd) or into a Maildir.

The API streams the mbox (`GET /api/accounts/{mailbox}/export.mbox`); `inboxd export` writes
either format. Messages are read in batches by keyset, so memory stays bounded by one batch
whatever the mailbox holds.
"""

from __future__ import annotations

import asyncio
import mailbox as stdlib_mailbox
import re
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path

from inboxd.model import Mailbox, MessageSummary
from inboxd.services.rawcodec import decompress
from inboxd.store import export as store
from inboxd.store.db import Database

BATCH = 50
_FROM_LINE = re.compile(rb"^(>*From )", re.MULTILINE)


def mbox_entry(summary: MessageSummary, raw: bytes) -> bytes:
    """One mboxrd entry: a `From ` line, the message with LF endings and `>`-quoted `From ` lines."""
    sender = summary.sender or "MAILER-DAEMON"
    stamp = time.asctime(time.gmtime(summary.created_at))
    body = raw.replace(b"\r\n", b"\n")
    body = _FROM_LINE.sub(rb">\1", body)
    if not body.endswith(b"\n"):
        body += b"\n"
    return f"From {sender} {stamp}\n".encode("utf-8", "surrogateescape") + body + b"\n"


class ExportService:
    def __init__(self, db: Database, *, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock

    async def messages(self, mailbox: Mailbox) -> AsyncIterator[tuple[MessageSummary, bytes]]:
        after: tuple[float, str] | None = None
        now = self._clock()
        while True:
            rows = await self._db.read(partial(store.batch, mailbox_id=mailbox.id, after=after, now=now, limit=BATCH))
            for summary, compressed in rows:
                yield summary, await asyncio.to_thread(decompress, compressed)
            if len(rows) < BATCH:
                return
            last = rows[-1][0]
            after = (last.created_at, last.id)

    async def mbox(self, mailbox: Mailbox) -> AsyncIterator[bytes]:
        async for summary, raw in self.messages(mailbox):
            yield mbox_entry(summary, raw)

    async def to_maildir(self, mailbox: Mailbox, path: Path) -> int:
        """Add every message to the Maildir at `path` (created if missing); returns how many."""
        box = stdlib_mailbox.Maildir(path, create=True)
        count = 0
        async for summary, raw in self.messages(mailbox):
            message = stdlib_mailbox.MaildirMessage(raw)
            message.set_subdir("cur")
            if summary.is_read:
                message.set_flags("S")
            message.set_date(summary.created_at)
            await asyncio.to_thread(box.add, message)
            count += 1
        return count
