"""Who may sign in to the dashboard: identities vouched for by a provider, and one-time links.

Rules (README "Sign-in"):
- A known (provider, subject) reaches its user, whatever email the provider now reports.
- Otherwise the provider must vouch for the email (verified); an unverified one is refused and
  never linked. A verified email of an existing user links this identity to that user by itself
  only when that user is not an admin: an admin's account would otherwise belong to whoever gets
  a provider to vouch for the address. An admin links a provider from a signed-in session.
- A signed-in user links a provider account from the account page (`link_identity`: the session
  proves the account, the provider's exchange proves the provider account, so the email does not
  have to match), and unlinks one, but never the last way left to sign in.
- A verified email with no user creates one when `signup_allow` admits it: `*` anyone, else the
  listed email domains; empty admits no one new. New users get `signup_plan`.
- A suspended user is refused whichever way they come.
- A sign-in link is a random 256-bit value whose SHA-256 is stored; it works once, within
  `sign_in_link_ttl` seconds.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from inboxd.config import Settings
from inboxd.errors import Conflict, DuplicateKey, Gone, NotFound, SignInRefused
from inboxd.model import Identity, User
from inboxd.store import identities as store
from inboxd.store import users as user_store
from inboxd.store.db import Database, Tx

LINK_PATH = "/auth/link/"


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    key: str
    label: str


def configured(settings: Settings) -> list[ProviderInfo]:
    """The identity providers this server offers, in the order the pages show them."""
    found: list[ProviderInfo] = []
    if settings.github_client_id:
        found.append(ProviderInfo("github", "GitHub"))
    if settings.google_client_id:
        found.append(ProviderInfo("google", "Google"))
    if settings.oidc_issuer and settings.oidc_client_id:
        found.append(ProviderInfo("oidc", settings.oidc_name))
    return found


@dataclass(frozen=True, slots=True)
class VouchedIdentity:
    """What a provider said about the person after a completed exchange."""

    provider: str
    subject: str
    email: str
    email_verified: bool
    name: str = ""


class SignInService:
    def __init__(self, db: Database, *, settings: Settings, clock: Callable[[], float]) -> None:
        self._db = db
        self._settings = settings
        self._clock = clock

    def may_sign_up(self, email: str) -> bool:
        allow = self._settings.signup_allow
        if "*" in allow:
            return True
        return email.rpartition("@")[2] in allow

    async def sign_in_identity(self, vouched: VouchedIdentity) -> User:
        """The user this identity reaches (created or linked as the rules say), or `SignInRefused`."""
        email = vouched.email.strip().lower()
        resolve = partial(self._resolve, vouched=vouched, email=email)
        try:
            user = await self._db.write(resolve)
        except DuplicateKey:
            # Another process created this user or identity between our look and our insert (two
            # first sign-ins at once); it is committed now, so looking again finds it.
            user = await self._db.write(resolve)
        if user.status != "active":
            raise SignInRefused("This account has been suspended.", code="account_revoked")
        return user

    async def _resolve(self, tx: Tx, *, vouched: VouchedIdentity, email: str) -> User:
        """One unit of work, so two first sign-ins at once cannot create two users."""
        now = self._clock()
        known = await store.get(tx, vouched.provider, vouched.subject)
        if known is not None:
            user = await user_store.get_user(tx, known.user_id)
            assert user is not None  # the foreign key cascades
            await store.touch(tx, vouched.provider, vouched.subject, email=email or known.email, now=now)
            return user
        if not email or "@" not in email or not vouched.email_verified:
            raise SignInRefused(
                "Your identity provider did not confirm that you own this email address, so inboxd "
                "cannot sign you in with it. Verify the address with the provider, then try again.",
                code="email_not_verified",
            )
        user = await user_store.get_user_by_email(tx, email)
        if user is not None and user.role == "admin":
            raise SignInRefused(
                f"{email} belongs to an administrator, and inboxd never links a sign-in to an "
                "administrator by email alone. Sign in the way you usually do (or with a one-time sign-in "
                "link from the operator), then link this provider from your account page.",
                code="link_required",
            )
        if user is None:
            if not self.may_sign_up(email):
                raise SignInRefused(
                    f"There is no inboxd account for {email}, and this server does not let new users "
                    "sign up with it. Ask the operator to create your account.",
                    code="sign_up_closed",
                )
            user = User(
                id=str(uuid.uuid4()),
                email=email,
                plan=self._settings.signup_plan,
                role="user",
                status="active",
                created_at=now,
            )
            await user_store.insert_user(tx, user=user)
        await store.insert(tx, _new_identity(vouched, user_id=user.id, email=email, now=now))
        return user

    async def identities(self, user: User) -> list[Identity]:
        return await self._db.read(partial(store.for_user, user_id=user.id))

    async def link_identity(self, user: User, vouched: VouchedIdentity) -> Identity:
        """Link a provider account to `user`, who is signed in and just completed the provider's
        exchange; `Conflict` when that provider account already reaches another user."""
        try:
            return await self._db.write(partial(self._link, user=user, vouched=vouched))
        except DuplicateKey as exc:  # linked by another request meanwhile
            raise _taken(self._label(vouched.provider)) from exc

    async def _link(self, tx: Tx, *, user: User, vouched: VouchedIdentity) -> Identity:
        now = self._clock()
        email = vouched.email.strip().lower()
        known = await store.get(tx, vouched.provider, vouched.subject)
        if known is not None:
            if known.user_id != user.id:
                raise _taken(self._label(vouched.provider))
            await store.touch(tx, vouched.provider, vouched.subject, email=email or known.email, now=now)
            return known
        identity = _new_identity(vouched, user_id=user.id, email=email, now=now)
        await store.insert(tx, identity)
        return identity

    def _label(self, key: str) -> str:
        return next((p.label for p in configured(self._settings) if p.key == key), key)

    async def unlink_identity(self, user: User, *, provider: str, subject: str) -> Identity:
        """Unlink one of `user`'s provider accounts; `Conflict` (`last_sign_in`) when it is the last
        one through a provider this server still offers, so nobody locks themselves out."""
        offered = {p.key for p in configured(self._settings)}
        return await self._db.write(
            partial(self._unlink, user_id=user.id, provider=provider, subject=subject, offered=offered)
        )

    @staticmethod
    async def _unlink(tx: Tx, *, user_id: str, provider: str, subject: str, offered: set[str]) -> Identity:
        # One unit of work on the user's locked row: two unlinks at once cannot leave none.
        await store.lock_user(tx, user_id)
        linked = await store.for_user(tx, user_id)
        target = next((i for i in linked if i.provider == provider and i.subject == subject), None)
        if target is None:
            raise NotFound("That sign-in is not linked to your account (it may have been unlinked already).")
        others = [i for i in linked if i is not target and i.provider in offered]
        if target.provider in offered and not others:
            raise Conflict(
                "This is the only way left to sign in to your account, so it cannot be unlinked. "
                "Link another provider first, then unlink this one.",
                code="last_sign_in",
            )
        await store.delete(tx, provider=provider, subject=subject, user_id=user_id)
        return target

    async def issue_link(self, user: User) -> str:
        """A one-time sign-in URL for `user`."""
        secret = secrets.token_urlsafe(32)
        now = self._clock()
        await self._db.write(
            partial(
                store.insert_link,
                link_id=_link_hash(secret),
                user_id=user.id,
                now=now,
                expires_at=now + self._settings.sign_in_link_ttl,
            )
        )
        return self._settings.base_url.rstrip("/") + LINK_PATH + secret

    async def redeem_link(self, secret: str) -> User:
        """Use a link up; its user, or `Gone` (used, expired, unknown) / `SignInRefused` (suspended)."""
        user_id, why = await self._db.write(partial(store.use_link, link_id=_link_hash(secret), now=self._clock()))
        if user_id is None:
            minutes = max(1, round(self._settings.sign_in_link_ttl / 60))
            raise Gone(_LINK_PROBLEMS[why].format(minutes=minutes), code=f"link_{why}")
        user = await self._db.read(partial(user_store.get_user, user_id=user_id))
        if user is None or user.status != "active":
            raise SignInRefused("This account has been suspended.", code="account_revoked")
        return user

    async def sweep(self) -> int:
        """Forget links expired a day ago (until then a used or late link still gets its own page)."""
        return await self._db.write(partial(store.delete_stale_links, before=self._clock() - 86400))


def _taken(label: str) -> Conflict:
    return Conflict(
        f"That {label} account is already linked to another inboxd account. Unlink it there first, "
        "or link a different account of this provider.",
        code="identity_taken",
    )


_LINK_PROBLEMS = {
    "unknown": "This sign-in link is not valid. Check that you copied all of it, or ask for a new one.",
    "used": "This sign-in link has already been used. Each link works once; ask for a new one.",
    "expired": "This sign-in link has expired. Links work for {minutes} minutes; ask for a new one.",
}


def _link_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _new_identity(vouched: VouchedIdentity, *, user_id: str, email: str, now: float) -> Identity:
    """The identity row a first sign-in or a link makes for the provider account `vouched`."""
    return Identity(
        provider=vouched.provider,
        subject=vouched.subject,
        user_id=user_id,
        email=email,
        created_at=now,
        last_sign_in_at=now,
    )
