"""Users and API tokens: creation (CLI, bootstrap, Pro API), authentication, revocation.

`last_used_at` is coalesced in memory and written in one batch every few seconds and at stop,
so authenticating a request never costs a database write.

Who a bearer value names is kept in memory for `AUTH_TTL` seconds, so a client's requests after
its first cost no database read for authentication. Revoking a token, resetting or deleting a
mailbox and changing a user announce `changed` on the event bus after commit, and every process
sharing the bus (Redis across processes) forgets what it kept: the next request is refused. A
change the bus does not carry (the `inboxd` CLI, several processes without Redis) takes effect
once the entry is `AUTH_TTL` seconds old. The cache is a `TtlCache`: a lookup in flight when
`changed` arrives (its answer read before the change) is never kept.

A live inbox's token (the dashboard hands it to the page's script) opens `/api/ws` only, and only
while the browser session it was handed to is signed in: it is looked up every time, never kept.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from inboxd.errors import Conflict, DuplicateKey, Forbidden, InvalidRequest, NotFound, Unauthorized
from inboxd.events import EventBus
from inboxd.model import ApiToken, Principal, User
from inboxd.services.credentials import (
    API_TOKEN_PREFIX,
    MailboxClaims,
    MailboxTokens,
    check_active,
    hash_token,
    is_api_token,
    new_api_token,
)
from inboxd.services.ttl_cache import TtlCache
from inboxd.store import mailboxes as mailbox_store
from inboxd.store import sessions as session_store
from inboxd.store import users as store
from inboxd.store.db import Database, Tx

AUTH_TTL = 2.0
PLANS = ("free", "pro")
ROLES = ("user", "admin")
STATUSES = ("active", "suspended")


@dataclass(frozen=True, slots=True)
class NewToken:
    token: ApiToken
    value: str


class UserService:
    def __init__(self, db: Database, *, clock: Callable[[], float], bus: EventBus, max_tokens: int = 100) -> None:
        self._db = db
        self._max_tokens = max_tokens
        self._clock = clock
        self._bus = bus
        self._last_used: dict[str, float] = {}
        # Bearer key (an API token's hash, or a mailbox token's mailbox and generation) → who it
        # names and when that was read.
        self._known: TtlCache[str, Principal] = TtlCache(ttl=AUTH_TTL)
        bus.on_changed(self._known.clear)

    async def create_user(self, email: str, *, plan: str = "free", role: str = "user") -> User:
        email = email.strip().lower()
        if "@" not in email or len(email) > 254:
            raise InvalidRequest("The email address is not valid.")
        _check_choice("plan", plan, PLANS)
        _check_choice("role", role, ROLES)
        user = User(id=str(uuid.uuid4()), email=email, plan=plan, role=role, status="active", created_at=self._clock())
        try:
            await self._db.write(partial(store.insert_user, user=user))
        except DuplicateKey as exc:
            raise Conflict("A user with that email exists.", code="user_exists") from exc
        return user

    async def user_by_email(self, email: str) -> User:
        user = await self._db.read(partial(store.get_user_by_email, email=email.strip().lower()))
        if user is None:
            raise NotFound(f"No user {email}.")
        return user

    async def set_user(
        self, email: str, *, plan: str | None = None, status: str | None = None, role: str | None = None
    ) -> User:
        """Change a user's plan, status or role. Suspending ends every browser session of the user
        in the same transaction; their tokens are refused from the next request on in every process
        sharing this one's bus, and elsewhere (a CLI process) once what was kept is AUTH_TTL old."""
        user = await self.user_by_email(email)
        return await self.update_user(user, plan=plan, status=status, role=role)

    async def update_user(
        self, user: User, *, plan: str | None = None, status: str | None = None, role: str | None = None
    ) -> User:
        if plan is not None:
            _check_choice("plan", plan, PLANS)
        if status is not None:
            _check_choice("status", status, STATUSES)
        if role is not None:
            _check_choice("role", role, ROLES)

        async def work(tx: Tx) -> list[str]:
            await store.update_user(tx, user_id=user.id, plan=plan, status=status)
            if role is not None:
                await store.update_role(tx, user_id=user.id, role=role)
            if status == "suspended":
                return await session_store.delete_for_user(tx, user_id=user.id)
            return []

        ended = await self._db.write(work)
        # What their credentials open, what a mailbox of theirs accepts and keeps for how long.
        await self._bus.changed()
        if ended:
            await self._bus.sessions_ended(ended)
        return replace(user, plan=plan or user.plan, status=status or user.status, role=role or user.role)

    async def user_by_id(self, user_id: str) -> User:
        user = await self._db.read(partial(store.get_user, user_id=user_id))
        if user is None:
            raise NotFound("No such user.")
        return user

    async def search(self, query: str = "", *, after: str = "", limit: int = 50) -> list[User]:
        """Users whose email contains `query`, by email, from after `after`."""
        return await self._db.read(
            partial(store.search_users, query=query.strip().lower()[:254], after=after, limit=limit)
        )

    async def has_users(self) -> bool:
        return await self._db.read(store.count_users) > 0

    async def create_token(self, user: User, name: str) -> NewToken:
        name = name.strip()
        if not name or len(name) > 100:
            raise InvalidRequest("`name` must be 1 to 100 characters.")
        value = new_api_token()
        token = ApiToken(
            id=str(uuid.uuid4()),
            user_id=user.id,
            name=name,
            created_at=self._clock(),
            last_used_at=None,
            revoked_at=None,
            prefix=value[: len(API_TOKEN_PREFIX) + 4],
        )
        cap = self._max_tokens

        async def insert(tx: Tx) -> None:
            # Counted under the user's row lock, so concurrent creations cannot pass the cap together.
            await store.lock_user(tx, user.id)
            if await store.count_active_tokens(tx, user.id) >= cap:
                raise Forbidden(
                    f"This account has {cap} API tokens, the most it may hold; revoke one before creating another.",
                    code="token_limit_reached",
                )
            await store.insert_token(tx, token, hash_token(value))

        await self._db.write(insert)
        return NewToken(token=token, value=value)

    async def list_tokens(self, user: User) -> list[ApiToken]:
        tokens = await self._db.read(partial(store.list_tokens, user_id=user.id))
        # Show the coalesced value not yet flushed, so the answer is true to the moment.
        return [
            replace(t, last_used_at=max(t.last_used_at or 0.0, self._last_used[t.id])) if t.id in self._last_used else t
            for t in tokens
        ]

    async def active_token(self, user: User, token_id: str) -> ApiToken:
        """The user's token `token_id` while it is not revoked (what the revoke page confirms)."""
        token = await self._db.read(partial(store.get_token, user_id=user.id, token_id=token_id))
        if token is None or token.revoked_at is not None:
            raise NotFound("No such token: it may have been revoked already.")
        return token

    async def revoke_token(self, user: User, token_id: str) -> None:
        if not await self._db.write(partial(store.revoke_token, user_id=user.id, token_id=token_id, now=self._clock())):
            raise NotFound("No such token.")
        await self._bus.changed()

    async def authenticate(self, bearer: str, mailbox_tokens: MailboxTokens, *, websocket: bool = False) -> Principal:
        """Resolve a bearer value to who is calling; raises 401 errors as the spec names them.

        websocket: the value came in `/api/ws`'s auth message, where a live inbox's token is valid.
        """
        now = self._clock()
        if bearer.startswith(API_TOKEN_PREFIX):
            if not is_api_token(bearer):
                raise Unauthorized("The API token is invalid or revoked.", code="invalid_token")
            key = hash_token(bearer)
            principal = self._known.get(key, now)
            if principal is None:
                lookup = partial(self._db.read, partial(_token_principal, token_hash=key))
                principal = await self._known.fetch(key, lookup, now=now)
            assert principal.token_id is not None
            self._last_used[principal.token_id] = now
            return principal
        claims = mailbox_tokens.check(bearer, now=now)
        if claims.session_id is not None:
            if not websocket:
                raise Unauthorized("This token opens the live inbox's WebSocket only.", code="invalid_token")
            return await self._db.read(partial(_live_principal, claims=claims, now=now))
        key = f"{claims.mailbox_id}:{claims.password_gen}"
        principal = self._known.get(key, now)
        if principal is None:
            read = partial(_mailbox_principal, claims_id=claims.mailbox_id, gen=claims.password_gen)
            principal = await self._known.fetch(key, partial(self._db.read, read), now=now)
        return principal

    async def flush_last_used(self) -> None:
        if not self._last_used:
            return
        pending, self._last_used = self._last_used, {}
        try:
            await self._db.write(partial(store.touch_tokens, last_used=pending))
        except Exception:
            for token_id, ts in pending.items():
                self._last_used[token_id] = max(ts, self._last_used.get(token_id, 0.0))
            raise


async def _token_principal(tx: Tx, *, token_hash: str) -> Principal:
    found = await store.token_with_user(tx, token_hash=token_hash)
    if found is None or found[0].revoked_at is not None:
        raise Unauthorized("The API token is invalid or revoked.", code="invalid_token")
    token, user = found
    check_active(user)
    return Principal(user=user, token_id=token.id)


async def _live_principal(tx: Tx, *, claims: MailboxClaims, now: float) -> Principal:
    """A live inbox's token: a mailbox token whose browser session must still be signed in."""
    assert claims.session_id is not None
    principal = await _mailbox_principal(tx, claims_id=claims.mailbox_id, gen=claims.password_gen)
    session = await session_store.get(tx, claims.session_id)
    if session is None or session.expires_at <= now or session.user is None or session.user.id != principal.user.id:
        raise Unauthorized("The browser session this token was given to has ended.", code="invalid_or_expired_token")
    return principal


async def _mailbox_principal(tx: Tx, *, claims_id: str, gen: int) -> Principal:
    mailbox = await mailbox_store.get(tx, claims_id)
    if mailbox is None or mailbox.password_gen != gen:
        raise Unauthorized("The mailbox token is no longer valid.", code="invalid_or_expired_token")
    user = await store.get_user(tx, mailbox.user_id)
    assert user is not None
    check_active(user)
    return Principal(user=user, mailbox_id=mailbox.id)


def _check_choice(field: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InvalidRequest(f"`{field}` must be one of {', '.join(allowed)}.")
