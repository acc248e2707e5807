"""The outbound gate of the checks: at most a few of one user's lookups or connections at once, and
a cap for the whole server, so one user's slow targets never make another user's checks wait.

A caller first waits for a slot of its own user, then for one of the server's: a user with many
operations queued holds at most `per_user` of the server's slots, and the rest stay free for the
others (the server's cap is the only place where users can wait for each other, and it is several
times the per-user one). Each checker (links, rspamd, authentication) owns a gate of its own, so
a flood of one kind never holds the slots of another kind either.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class _UserSlots:
    __slots__ = ("semaphore", "users")

    def __init__(self, size: int) -> None:
        self.semaphore = asyncio.Semaphore(size)
        self.users = 0  # holders and waiters: the entry is dropped when none is left


class UserGate:
    """`async with gate.slot(user_key):` around one outbound operation."""

    def __init__(self, *, per_user: int, total: int) -> None:
        self._per_user = max(1, per_user)
        self._total = asyncio.Semaphore(max(1, total))
        self._users: dict[str, _UserSlots] = {}

    @asynccontextmanager
    async def slot(self, user_key: str | None) -> AsyncIterator[None]:
        """One slot of `user_key`'s, then one of the server's; a caller that does not know its
        user (None) takes the server's alone."""
        if user_key is None:
            async with self._total:
                yield
            return
        entry = self._users.get(user_key)
        if entry is None:
            entry = self._users[user_key] = _UserSlots(self._per_user)
        entry.users += 1
        try:
            async with entry.semaphore, self._total:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._users[user_key]

    def waiting_users(self) -> int:
        """Users with an operation running or queued (kept small: idle users are forgotten)."""
        return len(self._users)
