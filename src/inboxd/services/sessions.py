"""Browser sessions, kept server-side in the database so they hold across processes.

The cookie carries only a random value (256 bits); the table keeps its SHA-256, so reading the
table opens no session. A session is anonymous while a sign-in is under way (it holds the
provider's state, nonce and PKCE verifier, and lives `FLOW_TTL` seconds); signing in always makes
a new session and deletes the old one, so an id planted before sign-in is worth nothing after.
A signed-in session slides: each request more than `TOUCH_EVERY` seconds after the last one
moves its end to `session_ttl` from now, so an active user stays in and an idle one is out after
`session_ttl` (14 days by default). A suspended user's sessions are deleted and, should one be
read before that, refused.

A signed-in session that ends (signed out, out everywhere, replaced by a new sign-in, or by a
suspension in `UserService`) is announced on the bus after commit, so the live inbox's sockets
opened with a token handed to it close in every process (`api/ws.py`).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from inboxd.config import Settings
from inboxd.events import EventBus
from inboxd.model import User, WebSession
from inboxd.store import sessions as store
from inboxd.store.db import Database, Tx

FLOW_TTL = 900.0
# A request this long after the last recorded one writes the new expiry; closer ones cost no write.
TOUCH_EVERY = 60.0


def session_hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class OpenedSession:
    """A new session and the cookie value that opens it (known only to the browser after this)."""

    session: WebSession
    value: str


class SessionService:
    def __init__(self, db: Database, *, settings: Settings, clock: Callable[[], float], bus: EventBus) -> None:
        self._db = db
        self._settings = settings
        self._clock = clock
        self._bus = bus

    async def open(self, user: User | None, *, replacing: WebSession | None = None) -> OpenedSession:
        """A new session for `user` (None: a sign-in under way), ending `replacing` in the same
        transaction."""
        now = self._clock()
        value = secrets.token_urlsafe(32)
        session = WebSession(
            id=session_hash(value),
            user=user,
            csrf_token=secrets.token_urlsafe(32),
            data={},
            created_at=now,
            last_seen_at=now,
            expires_at=now + (self._settings.session_ttl if user is not None else FLOW_TTL),
        )

        async def work(tx: Tx) -> None:
            if replacing is not None:
                await store.delete(tx, replacing.id)
            await store.insert(
                tx,
                session_id=session.id,
                user_id=user.id if user else None,
                csrf_token=session.csrf_token,
                now=now,
                expires_at=session.expires_at,
            )

        await self._db.write(work)
        if replacing is not None and replacing.user is not None:
            await self._bus.sessions_ended([replacing.id])
        return OpenedSession(session=session, value=value)

    async def resolve(self, value: str) -> WebSession | None:
        """The live session a cookie value opens, its expiry slid forward; None if there is none."""
        if not value or len(value) > 100:
            return None
        now = self._clock()
        session = await self._db.read(partial(store.get, session_id=session_hash(value)))
        if session is None:
            return None
        if session.expires_at <= now or (session.user is not None and session.user.status != "active"):
            await self._db.write(partial(store.delete, session_id=session.id))
            return None
        if session.user is not None and now - session.last_seen_at >= TOUCH_EVERY:
            expires_at = now + self._settings.session_ttl
            await self._db.write(partial(store.touch, session_id=session.id, now=now, expires_at=expires_at))
            session = replace(session, last_seen_at=now, expires_at=expires_at)
        return session

    async def save_data(self, session: WebSession, data: dict[str, object]) -> None:
        await self._db.write(partial(store.put_data, session_id=session.id, data=data))

    async def end(self, session: WebSession) -> None:
        await self._db.write(partial(store.delete, session_id=session.id))
        if session.user is not None:
            await self._bus.sessions_ended([session.id])

    async def end_all(self, user: User) -> int:
        """Sign the user out everywhere; the number of sessions ended."""
        ended = await self._db.write(partial(store.delete_for_user, user_id=user.id))
        if ended:
            await self._bus.sessions_ended(ended)
        return len(ended)

    async def signed_in(self, session_ids: Sequence[str]) -> set[str]:
        """Those of `session_ids` still signed in (the WebSocket hub's check after a missed announcement)."""
        return await self._db.read(partial(store.signed_in, session_ids=session_ids, now=self._clock()))

    async def count(self, user: User) -> int:
        return await self._db.read(partial(store.count_for_user, user_id=user.id, now=self._clock()))

    async def sweep(self) -> int:
        """Delete expired sessions (the sweeper calls this); the number deleted."""
        return await self._db.write(partial(store.delete_expired, now=self._clock()))
