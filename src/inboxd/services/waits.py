"""Waiting for a message: the newest one a filter keeps, at once if it is there, otherwise the
moment one is committed.

A wait holds no timer loop and never polls the database: it listens on the event bus for the
mailbox (new mail, and the search index catching up when the filter reads the index), and runs
the filtered query once at the start and once per wake-up. The bus may be in-process or Redis,
so mail accepted by another process wakes it too. Cancelling the wait (the client went away)
removes its listeners on the way out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from inboxd.errors import NotFound, Unavailable, WaitTimeout
from inboxd.events import EventBus
from inboxd.model import Mailbox, MessageDetail, MessageFilter
from inboxd.services.messages import MessageService

T = TypeVar("T")


class WaitService:
    def __init__(self, messages: MessageService, bus: EventBus) -> None:
        self._messages = messages
        self._bus = bus
        self._active: set[asyncio.Event] = set()
        self._closing = False

    @property
    def active(self) -> int:
        """Waits in progress in this process."""
        return len(self._active)

    async def wait(self, mailbox: Mailbox, flt: MessageFilter, *, within: float) -> MessageDetail:
        """The message detail of the newest match."""
        return await self.wait_for(mailbox, flt, within=within, read=partial(self._messages.detail, mailbox))

    async def wait_for(
        self, mailbox: Mailbox, flt: MessageFilter, *, within: float, read: Callable[[str], Awaitable[T]]
    ) -> T:
        """`read(message id)` of the newest match; a face with its own detail (the sandbox) passes
        its reader. `NotFound` from it means the message went away meanwhile: look again."""
        if self._closing:
            raise Unavailable()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        woken = asyncio.Event()
        wake: Callable[..., None] = lambda *_: woken.set()  # noqa: E731
        # Listen before the first look, so a message committed in between still wakes us.
        stops = [self._bus.listen(mailbox.id, wake)]
        if flt.needs_index:
            stops.append(self._bus.on_indexed(mailbox.id, wake))
        self._active.add(woken)
        try:
            while True:
                woken.clear()
                found = await self._messages.newest(mailbox, flt)
                if found is not None:
                    try:
                        return await read(found.id)
                    except NotFound:
                        continue  # deleted in between: look again
                if self._closing:
                    raise Unavailable()
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise WaitTimeout(f"No matching message arrived within {within:g} s.")
                try:
                    async with asyncio.timeout(remaining):
                        await woken.wait()
                except TimeoutError:
                    raise WaitTimeout(f"No matching message arrived within {within:g} s.") from None
        finally:
            self._active.discard(woken)
            for stop in stops:
                stop()

    def close(self) -> None:
        """The server is stopping: every wait answers 503 now rather than hold the shutdown."""
        self._closing = True
        for woken in self._active:
            woken.set()
