"""The recipient cache: RCPT answered from memory for a mailbox looked up in the last few seconds.

Every RCPT used to read the database (the mailbox, its owner, its domain and its usage at that
moment). Under load most RCPTs name a mailbox seen a moment ago, so the answer is kept for
`recipient_cache_ttl` seconds (`INBOXD_RECIPIENT_CACHE_TTL`, 2 by default; 0 turns it off). It
is trusted in one direction only: to accept. Anything it would refuse (a full mailbox, a
suspended owner, a domain no longer verified) is looked up again, so a refusal is always
current. An acceptance is checked once more where it counts: the commit at the end of DATA charges
the quota in SQL and refuses the message when it would not fit (552), or when the mailbox is gone
(550 5.1.1).

What keeps an acceptance true:
- this process's own deliveries add their bytes to the cached `used` as they commit;
- creating or deleting a mailbox, changing a user's plan or status and deleting a custom domain
  announce `changed` on the event bus after commit, and every process with the same bus (Redis
  across processes) drops its whole cache: such changes are rare next to mail;
- what the bus cannot carry (another process's deliveries, changes made by the `inboxd` CLI or by
  a process without a shared bus) is seen once the entry is that old.

The rules every such cache keeps (generations, so a `changed` that lands while a lookup is in
flight is not undone by that lookup's answer; a bound on the keys) are `TtlCache`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from inboxd.services.ttl_cache import TtlCache
from inboxd.store.mailboxes import RecipientRow


class _Entry:
    __slots__ = ("row", "used")

    def __init__(self, row: RecipientRow) -> None:
        self.row = row
        self.used = row.mailbox.used  # plus this process's deliveries since the read


class RecipientCache:
    def __init__(self, *, clock: Callable[[], float], ttl: float) -> None:
        self._clock = clock
        # The address as RCPT named it (plus addressing included) → its mailbox's id; the row is
        # kept once per mailbox, so a delivery's charge reaches every address that names it, and
        # its age is the mailbox's.
        self._ids: TtlCache[str, str] = TtlCache(ttl=ttl)
        self._rows: TtlCache[str, _Entry] = TtlCache(ttl=ttl)

    def get(self, address: str) -> tuple[RecipientRow, int] | None:
        """The row cached for `address` (normalized) if younger than the TTL, and the mailbox's
        `used` with this process's deliveries since then (the row's own is as read)."""
        mailbox_id = self._ids.peek(address)
        if mailbox_id is None:
            return None
        entry = self._rows.get(mailbox_id, self._clock())
        if entry is None:
            return None
        return entry.row, entry.used

    async def fetch(self, address: str, lookup: Callable[[], Awaitable[RecipientRow | None]]) -> RecipientRow | None:
        """`lookup()`'s row for `address`, kept unless the cache was cleared while it ran. A row
        that would be refused is kept too: `get`'s callers look such a row up again."""
        generations = self._ids.generation, self._rows.generation
        fetched = self._clock()
        row = await lookup()
        if row is not None and self._rows.keep(row.mailbox.id, _Entry(row), at=fetched, generation=generations[1]):
            self._ids.keep(address, row.mailbox.id, at=fetched, generation=generations[0])
        return row

    def charge(self, mailbox_id: str, size: int) -> None:
        """A delivery of `size` bytes to the mailbox committed in this process."""
        entry = self._rows.peek(mailbox_id)
        if entry is not None:
            entry.used += size

    def clear(self) -> None:
        """Something the cache may hold changed: forget it all, and any lookup in flight."""
        self._ids.clear()
        self._rows.clear()
