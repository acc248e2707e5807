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

A `changed` that lands while a lookup is in flight must not be undone by that lookup's answer,
read before the change: `clear` moves a generation counter on, and `fetch` keeps an answer only
if the generation it started in is still current.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from inboxd.store.mailboxes import RecipientRow

# Addresses kept at most; past it the cache starts over (a flood of distinct addresses, or a
# dictionary attack, costs a database read each, as it did without a cache).
LIMIT = 10_000


class _Entry:
    __slots__ = ("fetched", "row", "used")

    def __init__(self, row: RecipientRow, fetched: float) -> None:
        self.row = row
        self.fetched = fetched
        self.used = row.mailbox.used  # plus this process's deliveries since the read


class RecipientCache:
    def __init__(self, *, clock: Callable[[], float], ttl: float, limit: int = LIMIT) -> None:
        self._clock = clock
        self._ttl = ttl
        self._limit = limit
        # The address as RCPT named it (plus addressing included) → its mailbox's id; the row is
        # kept once per mailbox, so a delivery's charge reaches every address that names it.
        self._ids: dict[str, str] = {}
        self._rows: dict[str, _Entry] = {}
        self._generation = 0

    def get(self, address: str) -> tuple[RecipientRow, int] | None:
        """The row cached for `address` (normalized) if younger than the TTL, and the mailbox's
        `used` with this process's deliveries since then (the row's own is as read)."""
        mailbox_id = self._ids.get(address)
        if mailbox_id is None:
            return None
        entry = self._rows.get(mailbox_id)
        if entry is None or self._clock() - entry.fetched >= self._ttl:
            return None
        return entry.row, entry.used

    async def fetch(self, address: str, lookup: Callable[[], Awaitable[RecipientRow | None]]) -> RecipientRow | None:
        """`lookup()`'s row for `address`, kept unless the cache was cleared while it ran. A row
        that would be refused is kept too: `get`'s callers look such a row up again."""
        generation = self._generation
        fetched = self._clock()
        row = await lookup()
        if row is not None and generation == self._generation and self._ttl > 0:
            if len(self._ids) >= self._limit:
                self._ids.clear()  # starting over forgets, but voids no lookup in flight
                self._rows.clear()
            self._ids[address] = row.mailbox.id
            self._rows[row.mailbox.id] = _Entry(row, fetched)
        return row

    def charge(self, mailbox_id: str, size: int) -> None:
        """A delivery of `size` bytes to the mailbox committed in this process."""
        entry = self._rows.get(mailbox_id)
        if entry is not None:
            entry.used += size

    def clear(self) -> None:
        """Something the cache may hold changed: forget it all, and any lookup in flight."""
        self._ids.clear()
        self._rows.clear()
        self._generation += 1
