"""Secrets: API token values and hashes, mailbox `auth_key` derivation, mailbox tokens (JWT).

API tokens are `ibx_` + 43 URL-safe characters (256 bits), kept only as a SHA-256 hash.
A mailbox secret is either the password or its `auth_key` (Argon2id of the password, salted
with the SHA-256 of the address); only a SHA-256 of the `auth_key` is stored, so both forms
open the same mailbox. Mailbox tokens are HS256 JWTs naming the mailbox and its password
generation, so a reset cuts off every earlier token at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

import jwt
from argon2.low_level import Type, hash_secret_raw

from inboxd.errors import Forbidden, InvalidRequest, Unauthorized
from inboxd.model import User

API_TOKEN_PREFIX = "ibx_"
MIN_PASSWORD = 6
_AUTH_KEY = re.compile(r"[0-9a-f]{64}")


def new_api_token() -> str:
    return API_TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def derive_auth_key(address: str, password: str) -> str:
    salt = hashlib.sha256(address.strip().lower().encode()).digest()
    key = hash_secret_raw(
        password.encode(), salt, time_cost=3, memory_cost=16384, parallelism=1, hash_len=32, type=Type.ID
    )
    return key.hex()


def check_secret(*, password: str | None, auth_key: str | None) -> None:
    """The cheap checks of a new secret, so a bad one is refused before any costly work."""
    if password is not None:
        if len(password) < MIN_PASSWORD:
            raise InvalidRequest("The password must be at least 6 characters long.", code="password_too_short")
    elif auth_key is not None:
        if not _AUTH_KEY.fullmatch(auth_key):
            raise InvalidRequest("auth_key must be 64 lower-case hex characters.")
    else:
        raise InvalidRequest("The body must carry `password` or `auth_key`.")


async def auth_key_from(address: str, *, password: str | None, auth_key: str | None) -> str:
    """The mailbox's auth_key from whichever secret the request carried (Argon2 off the loop)."""
    check_secret(password=password, auth_key=auth_key)
    if password is not None:
        return await asyncio.to_thread(derive_auth_key, address, password)
    assert auth_key is not None
    return auth_key


def hash_auth_key(auth_key: str) -> str:
    return hashlib.sha256(auth_key.encode()).hexdigest()


def require_pro(user: User) -> None:
    """Custom domains, webhooks and the sandbox are Pro resources, through the API and the pages alike."""
    if not user.is_pro:
        raise Forbidden("This needs a Pro account.", code="pro_required")


def check_active(user: User) -> None:
    """A suspended user's credentials, API or mailbox, open nothing."""
    if user.status != "active":
        raise Unauthorized("This account has been suspended.", code="account_revoked")


def same_secret(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


@dataclass(frozen=True, slots=True)
class MailboxClaims:
    mailbox_id: str
    password_gen: int


class MailboxTokens:
    """Signs and checks mailbox tokens with the server's key (algorithm pinned to HS256)."""

    def __init__(self, key: str, *, ttl: float) -> None:
        self._key = key
        self._ttl = ttl

    def issue(self, mailbox_id: str, password_gen: int, *, now: float) -> str:
        claims = {"sub": mailbox_id, "gen": password_gen, "iat": int(now), "exp": int(now + self._ttl)}
        return jwt.encode(claims, self._key, algorithm="HS256")

    def check(self, token: str, *, now: float) -> MailboxClaims:
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=["HS256"],
                # Time is checked below on the service's clock. PyJWT's own `iat` check uses the
                # wall clock and refused a token issued by a process whose clock ran a little ahead.
                options={"require": ["sub", "exp"], "verify_exp": False, "verify_iat": False},
            )
        except jwt.PyJWTError as exc:
            raise Unauthorized("The token is invalid.", code="invalid_token") from exc
        if float(claims["exp"]) <= now:
            raise Unauthorized("The mailbox token has expired.", code="invalid_or_expired_token")
        gen = claims.get("gen")
        if not isinstance(claims["sub"], str) or not isinstance(gen, int):
            raise Unauthorized("The token is invalid.", code="invalid_token")
        return MailboxClaims(mailbox_id=claims["sub"], password_gen=gen)
