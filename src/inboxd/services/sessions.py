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

A secret a page must show once after a redirect (a generated mailbox password) is kept in the
session's data sealed (AES-GCM) with a key derived by HKDF from the cookie's raw value, which the
server never stores: a database dump alone opens none of them. Each lives `SECRET_TTL` seconds at
most and is removed when taken.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from inboxd.config import Settings
from inboxd.events import EventBus
from inboxd.model import User, WebSession
from inboxd.store import sessions as store
from inboxd.store.db import Database, Tx

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

FLOW_TTL = 900.0
# A request this long after the last recorded one writes the new expiry; closer ones cost no write.
TOUCH_EVERY = 60.0
# How long a kept secret waits for the page that shows it, and where the session's data keeps them.
SECRET_TTL = 600
_SECRETS = "sealed"
_SECRET_KEY_INFO = b"inboxd session secrets v1"


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

    async def keep_secret(self, session: WebSession, cookie_value: str, name: str, value: str) -> None:
        """Keep `value` under `name` in the session, sealed with a key only its cookie gives, until
        `take_secret` or `SECRET_TTL` seconds from now."""
        now = self._clock()
        expires_at = int(now + SECRET_TTL)  # whole seconds: bound into the seal, read back from JSON exactly
        kept = {n: e for n, e in _secrets_of(session).items() if _live(e, now)}
        nonce = secrets.token_bytes(12)
        sealed = _cipher(cookie_value).encrypt(nonce, value.encode(), _bound(name, expires_at))
        kept[name] = {"v": base64.b64encode(nonce + sealed).decode("ascii"), "exp": expires_at}
        await self.save_data(session, {**session.data, _SECRETS: kept})

    async def take_secret(self, session: WebSession, cookie_value: str, name: str) -> str | None:
        """The secret kept under `name`, removed now; None if there is none, it expired, or the
        cookie does not open it."""
        kept = _secrets_of(session)
        entry = kept.get(name)
        if entry is None:
            return None
        rest = {n: e for n, e in kept.items() if n != name}
        await self.save_data(session, {**session.data, _SECRETS: rest} if rest else _without(session.data, _SECRETS))
        if not _live(entry, self._clock()):
            return None
        return _open(cookie_value, name, entry)

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


def _secrets_of(session: WebSession) -> dict[str, dict[str, object]]:
    kept = session.data.get(_SECRETS)
    if not isinstance(kept, dict):
        return {}
    return {str(n): e for n, e in kept.items() if isinstance(e, dict)}


def _live(entry: dict[str, object], now: float) -> bool:
    expires_at = entry.get("exp")
    return isinstance(expires_at, int) and now < expires_at


def _without(data: dict[str, object], key: str) -> dict[str, object]:
    return {k: v for k, v in data.items() if k != key}


def _bound(name: str, expires_at: int) -> bytes:
    """The associated data: a sealed value opens only under its own name and expiry."""
    return f"{name}\n{expires_at}".encode()


def _cipher(cookie_value: str) -> AESGCM:
    # Imported here: `cryptography` costs resident memory, and a server without a dashboard
    # session that keeps a secret never needs it (tests/test_lean_start.py).
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    key = HKDF(algorithm=SHA256(), length=32, salt=None, info=_SECRET_KEY_INFO).derive(cookie_value.encode())
    return AESGCM(key)


def _open(cookie_value: str, name: str, entry: dict[str, object]) -> str | None:
    from cryptography.exceptions import InvalidTag

    sealed, expires_at = entry.get("v"), entry.get("exp")
    if not isinstance(sealed, str) or not isinstance(expires_at, int):
        return None
    try:
        raw = base64.b64decode(sealed, validate=True)
        return _cipher(cookie_value).decrypt(raw[:12], raw[12:], _bound(name, expires_at)).decode()
    except (ValueError, InvalidTag):
        return None
