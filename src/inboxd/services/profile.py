"""The Pro profile: who the user is, what they hold, and their operations this month.

`downgraded` (decisions.md): the plan is `free` while the user still holds more than the free
plan allows: more mailboxes than its cap, or any custom domain or webhook (Pro-only resources).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from inboxd.config import Settings
from inboxd.model import User
from inboxd.store import profiles as store
from inboxd.store.db import Database


@dataclass(frozen=True, slots=True)
class Profile:
    user: User
    max_domains: int
    domain_count: int
    ops_used: int
    ops_limit: int
    downgraded: bool


class ProfileService:
    def __init__(self, db: Database, *, settings: Settings) -> None:
        self._db = db
        self._settings = settings

    async def of(self, user: User, *, usage: tuple[int, int]) -> Profile:
        """`usage` is (ops_used, ops_limit) as the admission counters give it."""
        held = await self._db.read(partial(store.holdings, user_id=user.id))
        downgraded = not user.is_pro and (
            held.mailboxes > self._settings.free_max_mailboxes or held.domains > 0 or held.webhooks > 0
        )
        return Profile(
            user=user,
            max_domains=self._settings.max_domains if user.is_pro else 0,
            domain_count=held.domains,
            ops_used=usage[0],
            ops_limit=usage[1],
            downgraded=downgraded,
        )
