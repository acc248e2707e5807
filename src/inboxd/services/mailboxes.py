"""Mailboxes: the public domain list, creation, lookup with ownership rules, deletion, password
reset and the mailbox sign-in (`POST /api/token`).

Ownership: through `/api/accounts` a mailbox answers only to the API token that created it or
to its own mailbox token; through `/api/user/*` (`scope="user"`) to any token of its user.
Everything else answers 404 so that existence never leaks.

A reset or a deletion is announced on the event bus after commit, so open WebSockets of
earlier tokens close at once, in every process.
"""

from __future__ import annotations

import base64
import re
import secrets
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal, TypeVar

import msgspec

from inboxd.config import Settings
from inboxd.errors import Conflict, DuplicateKey, Forbidden, InvalidRequest, NotFound, Unauthorized
from inboxd.events import REVOKE_ALL, EventBus
from inboxd.model import Mailbox, Principal, PublicDomain, User
from inboxd.services.credentials import (
    MailboxTokens,
    auth_key_from,
    check_active,
    check_secret,
    hash_auth_key,
    require_pro,
    same_secret,
)
from inboxd.store import custom_domains as domain_store
from inboxd.store import mailboxes as store
from inboxd.store import message_sweeps as message_store
from inboxd.store import users as user_store
from inboxd.store.db import Database, Tx

_LOCAL = re.compile(r"[a-z0-9_+\-]+(\.[a-z0-9_+\-]+)*")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
Scope = Literal["token", "user"]
_cursor_encoder = msgspec.json.Encoder()
_cursor_decoder = msgspec.json.Decoder(tuple[float, str])

T = TypeVar("T")
# A read inside a mailbox the caller may reach (`MailboxService.read_in`).
InMailbox = Callable[[Tx, Mailbox], Coroutine[Any, Any, T]]


@dataclass(frozen=True, slots=True)
class CreatedMailbox:
    mailbox: Mailbox
    token: str


def split_address(address: str) -> tuple[str, str]:
    """Validate `local@domain` (decisions.md form) and return it lower-cased and split."""
    address = address.strip().lower()
    local, sep, domain = address.rpartition("@")
    if not sep or not domain or not (1 <= len(local) <= 64) or not _LOCAL.fullmatch(local):
        raise InvalidRequest("The address must be local@domain with a valid local part.", code="invalid_address")
    return local, domain.rstrip(".")


class MailboxService:
    def __init__(
        self,
        db: Database,
        *,
        settings: Settings,
        tokens: MailboxTokens,
        clock: Callable[[], float],
        bus: EventBus,
    ) -> None:
        self._db = db
        self._bus = bus
        self._settings = settings
        self._tokens = tokens
        self._clock = clock
        self._public = [
            PublicDomain(
                id=str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
                domain=name,
                default=i == 0,
                sort_order=i,
                pro_only=name in settings.pro_only_domains,
            )
            for i, name in enumerate(settings.public_domains)
        ]
        self._smtp_port = settings.smtp_port

    def listening(self, *, smtp_port: int) -> None:
        """The port the receiving listener bound (it differs from the settings when they ask for 0)."""
        self._smtp_port = smtp_port

    @property
    def smtp_endpoint(self) -> tuple[str, int]:
        """Where senders deliver mail for these mailboxes, as the dashboard tells a newcomer."""
        return self._settings.resolved_smtp_hostname, self._smtp_port

    def smtp_endpoint_for(self, asked_host: str) -> tuple[str, int]:
        """Where an API client reaches the receiving listener (`GET /api/server`), given the host
        of the URL it used: see `reachable_host`."""
        host = reachable_host(self._settings.smtp_host, hostname=self._settings.smtp_hostname, asked_host=asked_host)
        return host, self._smtp_port

    def public_domains(self) -> list[PublicDomain]:
        return self._public

    def is_public_domain(self, domain: str) -> bool:
        return any(d.domain == domain for d in self._public)

    async def create(
        self,
        principal: Principal,
        address: str,
        *,
        password: str | None,
        auth_key: str | None,
        admit: Callable[[], Awaitable[None]] | None = None,
    ) -> CreatedMailbox:
        """`admit` (the creation limits) is awaited once the request is known to be valid and
        before the costly key derivation, so an invalid request answers its own error."""
        if principal.token_id is None and not principal.session:
            raise Forbidden("Mailboxes are created with an API token.")
        user = principal.user
        local, domain = split_address(address)
        address = f"{local}@{domain}"
        check_secret(password=password, auth_key=auth_key)
        domain_id = await self._allowed_domain(user, domain)
        if await self._db.read(partial(store.get_by_address, address=address)) is not None:
            raise Conflict("That address is taken.", code="address_taken")
        cap = self._settings.pro_max_mailboxes if user.is_pro else self._settings.free_max_mailboxes
        # Checked before the creation interval and the key derivation (an Argon2id hash), so a
        # user at the cap learns it at once and cannot spend the server's CPU on creations that
        # must fail; checked again under the lock below against concurrent creations.
        if await self._db.read(partial(store.count_for_user, user_id=user.id)) >= cap:
            raise _at_cap(cap)
        if admit is not None:
            await admit()
        key = await auth_key_from(address, password=password, auth_key=auth_key)
        quota = self._settings.pro_mailbox_quota if user.is_pro else self._settings.free_mailbox_quota
        mailbox = Mailbox(
            id=str(uuid.uuid4()),
            user_id=user.id,
            token_id=principal.token_id,
            address=address,
            domain_id=domain_id,
            quota=quota,
            used=0,
            password_gen=0,
            created_at=self._clock(),
        )

        async def insert(tx: Tx) -> None:
            # Several processes may create for one user at once: count under the user's row lock.
            await user_store.lock_user(tx, user.id)
            if await store.count_for_user(tx, user.id) >= cap:
                raise _at_cap(cap)
            if await store.get_by_address(tx, address) is not None:
                raise Conflict("That address is taken.", code="address_taken")
            await store.insert(tx, mailbox, hash_auth_key(key))

        try:
            await self._db.write(insert)
        except DuplicateKey as exc:
            raise Conflict("That address is taken.", code="address_taken") from exc
        await self._bus.changed()  # `local+tag@…` may have named the mailbox `local@…` until now
        return CreatedMailbox(mailbox=mailbox, token=self._tokens.issue(mailbox.id, 0, now=self._clock()))

    async def domains_for(self, user: User) -> list[str]:
        """The domains this user may create mailboxes on: public ones, then their verified custom ones."""
        names = [d.domain for d in self._public if user.is_pro or not d.pro_only]
        if user.is_pro:
            owned = await self._db.read(partial(domain_store.list_for_user, user_id=user.id))
            names += sorted(d.domain for d in owned if d.verify_status == "verified")
        return names

    async def create_in_dashboard(
        self,
        user: User,
        *,
        local: str,
        domain: str,
        password: str,
        admit: Callable[[], Awaitable[None]] | None = None,
    ) -> tuple[CreatedMailbox, str | None]:
        """A mailbox made in the browser: owned by the user (no API token made it), with a random
        local part and password when left empty. Returns the generated password, shown once."""
        local = local.strip() or secrets.token_hex(5)
        generated = None if password else secrets.token_urlsafe(12)
        principal = Principal(user=user, session=True)
        created = await self.create(
            principal, f"{local}@{domain.strip()}", password=password or generated, auth_key=None, admit=admit
        )
        return created, generated

    async def _allowed_domain(self, user: User, domain: str) -> str | None:
        """None for a public domain, the custom domain's id for a verified one of this user."""
        for public in self._public:
            if public.domain == domain:
                if public.pro_only and not user.is_pro:
                    raise InvalidRequest("That domain is for Pro accounts.", code="invalid_domain")
                return None
        custom = await self._db.read(partial(domain_store.get_by_name, domain=domain))
        # Custom domains are a Pro resource: a downgraded user keeps its mailboxes there, makes no new ones.
        if custom is None or custom.user_id != user.id or custom.verify_status != "verified" or not user.is_pro:
            raise InvalidRequest("Mailboxes cannot be created on that domain.", code="invalid_domain")
        return custom.id

    async def find(self, principal: Principal, ref: str, *, scope: Scope = "token") -> Mailbox:
        """The mailbox named by UUID or address, if this caller may reach it; else 404."""
        return await self.read_in(principal, ref, _itself, scope=scope)

    async def read_in(
        self, principal: Principal, ref: str, work: InMailbox[T], *, scope: Scope = "token", aside: bool = False
    ) -> T:
        """`work` on the mailbox `find` names, in the same read as the look-up: a request that
        needs the mailbox only to read inside it (a page, a message) makes one trip to the store.
        `aside`: the read may walk many rows, and runs off the event loop (`Database.read_aside`)."""
        ref = ref.strip().lower()

        async def read(tx: Tx) -> T:
            if _UUID.fullmatch(ref):
                mailbox = await store.get(tx, ref)
            elif "@" in ref:
                mailbox = await store.get_by_address(tx, ref)
            else:
                mailbox = None
            if mailbox is None:
                raise NotFound("No such mailbox.")
            if not _reaches(principal, mailbox, scope):
                raise NotFound(_unreached(principal, mailbox))
            if mailbox.kind == "sandbox":
                require_pro(principal.user)  # as /api/user/sandbox: a downgraded user keeps it, closed
            return await work(tx, mailbox)

        return await (self._db.read_aside if aside else self._db.read)(read)

    async def current(self, principal: Principal, ref: str, *, scope: Scope = "token") -> Mailbox:
        """`find`, with `used` as of now: an expired message's bytes leave it at its expiry."""
        return (await self.with_current_use([await self.find(principal, ref, scope=scope)]))[0]

    async def with_current_use(self, mailboxes: list[Mailbox]) -> list[Mailbox]:
        """The stored `used` less the bytes of messages that expired since the last sweep."""
        due = await self._db.read(
            partial(message_store.due_sizes, mailbox_ids=[m.id for m in mailboxes], now=self._clock())
        )
        return [replace(m, used=max(0, m.used - due[m.id])) if m.id in due else m for m in mailboxes]

    async def live_token(self, principal: Principal, ref: str, *, session_id: str) -> str:
        """A token for the owner's browser to follow the mailbox over the WebSocket: it opens that
        mailbox's `/api/ws` only (not REST), for `live_token_ttl` seconds, while the browser session
        `session_id` is signed in (the page asks for a new one at each connection)."""
        mailbox = await self.find(principal, ref, scope="user")
        return self._tokens.issue_live(
            mailbox.id,
            mailbox.password_gen,
            session_id=session_id,
            now=self._clock(),
            ttl=self._settings.live_token_ttl,
        )

    async def password_gens(self, mailbox_ids: list[str]) -> dict[str, int]:
        """The current password generation of each mailbox that still exists."""

        async def read(tx: Tx) -> dict[str, int]:
            found = [await store.get(tx, mailbox_id) for mailbox_id in mailbox_ids]
            return {m.id: m.password_gen for m in found if m is not None}

        return await self._db.read(read)

    async def page_for_user(self, user: User, cursor: str, *, limit: int) -> tuple[list[Mailbox], str]:
        """One page of every mailbox of `user`, newest first, and the cursor of the next ("" at the end)."""
        before = _decode_cursor(cursor) if cursor else None
        # One more than the page tells whether another page follows without a count.
        rows = await self._db.read(partial(store.list_for_user, user_id=user.id, limit=limit + 1, before=before))
        page = await self.with_current_use(rows[:limit])
        return page, _encode_cursor(page[-1]) if len(rows) > limit else ""

    async def delete(self, principal: Principal, ref: str, *, scope: Scope = "token") -> None:
        mailbox = await self.find(principal, ref, scope=scope)
        if mailbox.kind == "sandbox":
            # The SMTP sandbox lives as long as its user; its messages are purged through /api/user/sandbox.
            raise NotFound("No such mailbox.")
        await self._db.write(partial(store.delete, mailbox_id=mailbox.id))
        await self._bus.revoke(mailbox.id, REVOKE_ALL)
        await self._bus.changed()

    async def reset_password(
        self,
        principal: Principal,
        ref: str,
        *,
        password: str | None,
        auth_key: str | None,
        scope: Scope = "token",
    ) -> None:
        mailbox = await self.find(principal, ref, scope=scope)
        if mailbox.kind == "sandbox":
            # The sandbox has no password: API tokens open it (SMTP AUTH, /api/user/sandbox), so
            # that it stays closed to whoever is not Pro; a password would open it to POST /api/token.
            raise Forbidden("The SMTP sandbox has no password; it is reached with your API tokens.")
        key = await auth_key_from(mailbox.address, password=password, auth_key=auth_key)
        auth_hash = hash_auth_key(key)

        async def reset(tx: Tx) -> int:
            await store.set_auth(tx, mailbox.id, auth_hash)
            changed = await store.get(tx, mailbox.id)
            return mailbox.password_gen + 1 if changed is None else changed.password_gen

        await self._bus.revoke(mailbox.id, await self._db.write(reset))
        await self._bus.changed()  # the old tokens' authentication kept in memory

    async def sign_in(self, address: str, *, password: str | None, auth_key: str | None) -> tuple[Mailbox, str]:
        """Check a mailbox secret and issue a mailbox token; one message for every failure."""
        failure = Unauthorized("Wrong address or password.", code="invalid_token")
        address = address.strip().lower()
        try:
            key = await auth_key_from(address, password=password, auth_key=auth_key)
        except InvalidRequest as exc:
            if exc.code == "password_too_short":
                raise failure from exc
            raise
        found = await self._db.read(partial(store.get_auth, address=address))
        # A sandbox is never opened by a password (one set before this rule held included).
        if found is None or not same_secret(found[1], hash_auth_key(key)) or found[0].kind == "sandbox":
            raise failure
        mailbox = found[0]
        # The right secret, but a token of a suspended owner would be refused on first use.
        owner = await self._db.read(partial(user_store.get_user, user_id=mailbox.user_id))
        if owner is not None:
            check_active(owner)
        return mailbox, self._tokens.issue(mailbox.id, mailbox.password_gen, now=self._clock())


def _at_cap(cap: int) -> Forbidden:
    return Forbidden(f"This plan allows {cap} mailboxes.", code="account_limit_reached")


def _encode_cursor(last: Mailbox) -> str:
    return base64.urlsafe_b64encode(_cursor_encoder.encode((last.created_at, last.id))).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return _cursor_decoder.decode(raw)
    except (ValueError, msgspec.DecodeError) as exc:
        raise InvalidRequest("`cursor` is not one this API gave out.") from exc


async def _itself(tx: Tx, mailbox: Mailbox) -> Mailbox:
    return mailbox


_WILDCARDS = frozenset({"", "0.0.0.0", "::", "*"})


def reachable_host(listener_host: str, *, hostname: str, asked_host: str) -> str:
    """The host a client can reach a listener at: `INBOXD_SMTP_HOSTNAME` when the operator set
    one; else the address the listener is bound to; else, for a listener on every address, the
    host of the URL the client reached the API at, where the same machine answers."""
    if hostname:
        return hostname
    if listener_host.strip("[]") not in _WILDCARDS:
        return listener_host
    return asked_host or "localhost"


def _unreached(principal: Principal, mailbox: Mailbox) -> str:
    """The 404's message for a mailbox the caller may not reach this way. Only an API token of the
    mailbox's own user learns that it exists, and where it does answer: anyone else (another
    user, a mailbox token) gets the message of a mailbox that does not exist."""
    if principal.is_mailbox_token or principal.user.id != mailbox.user_id:
        return "No such mailbox."
    if mailbox.kind == "sandbox":
        return "No such mailbox for this token: that is your SMTP sandbox, at /api/user/sandbox/messages."
    where = f"/api/user/accounts/{mailbox.id}"
    made = "in the dashboard or with another API token"
    if principal.user.is_pro:
        return (
            f"No such mailbox for this token: it is one of your mailboxes, made {made}, and "
            f"/api/accounts/... reaches only the mailboxes a token made. Use {where}/messages, and for a "
            f"message {where}/messages/{{id}} with its /source, /attachments/{{index}}, /checks and /render.png."
        )
    return (
        f"No such mailbox for this token: it is one of your mailboxes, made {made}, and "
        f"/api/accounts/... reaches only the mailboxes a token made; {where} (the user's routes) needs Pro."
    )


def _reaches(principal: Principal, mailbox: Mailbox, scope: Scope) -> bool:
    if principal.mailbox_id is not None:
        return principal.mailbox_id == mailbox.id
    if scope == "user":
        return principal.user.id == mailbox.user_id
    return principal.token_id is not None and principal.token_id == mailbox.token_id
