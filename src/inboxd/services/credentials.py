"""Secrets: API token values and hashes, mailbox `auth_key` derivation, mailbox tokens (JWT).

API tokens are `ibx_` + 43 URL-safe characters (256 bits), kept only as a SHA-256 hash.
A mailbox secret is either the password or its `auth_key` (Argon2id of the password, salted
with the SHA-256 of the address); only a SHA-256 of the `auth_key` is stored, so both forms
open the same mailbox. Mailbox tokens are HS256 JWTs naming the mailbox and its password
generation, so a reset cuts off every earlier token at once.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
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
    """Signs mailbox tokens with the first key; any of the keys verifies one (during a key
    rotation, the old key's tokens stay valid until they expire).

    The tokens are JWTs (RFC 7519) with the algorithm pinned to HS256, written with `hmac` rather
    than PyJWT: the whole of it is a few lines, and PyJWT imports the `cryptography` package into
    every process for algorithms inboxd never accepts. A header naming any other algorithm
    (`none` included) is refused; signatures are compared in constant time.
    """

    def __init__(self, keys: Sequence[bytes], *, ttl: float) -> None:
        self._keys = list(keys)
        self._ttl = ttl

    def issue(self, mailbox_id: str, password_gen: int, *, now: float) -> str:
        claims = {"sub": mailbox_id, "gen": password_gen, "iat": int(now), "exp": int(now + self._ttl)}
        signing_input = f"{_JWT_HEADER}.{_b64encode(_json_encode(claims))}"
        return f"{signing_input}.{_b64encode(_sign(self._keys[0], signing_input))}"

    def check(self, token: str, *, now: float) -> MailboxClaims:
        """The token's claims, timed on the service's clock only (a token issued by a process whose
        clock runs ahead is valid until its `exp` here)."""
        claims = self._verified(token)
        if claims is None:
            raise Unauthorized("The token is invalid.", code="invalid_token")
        if float(claims["exp"]) <= now:
            raise Unauthorized("The mailbox token has expired.", code="invalid_or_expired_token")
        gen = claims.get("gen")
        if not isinstance(claims["sub"], str) or not isinstance(gen, int) or isinstance(gen, bool):
            raise Unauthorized("The token is invalid.", code="invalid_token")
        return MailboxClaims(mailbox_id=claims["sub"], password_gen=gen)

    def _verified(self, token: str) -> dict[str, Any] | None:
        """The claims of a well-formed HS256 token signed with one of the keys, else None."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            header = _json_decode(_b64decode(parts[0]))
            signature = _b64decode(parts[2])
        except ValueError:
            return None
        if not isinstance(header, dict) or header.get("alg") != "HS256" or "crit" in header:
            return None
        signing_input = f"{parts[0]}.{parts[1]}"
        if not any(hmac.compare_digest(_sign(key, signing_input), signature) for key in self._keys):
            return None
        try:
            claims = _json_decode(_b64decode(parts[1]))
        except ValueError:
            return None
        if not isinstance(claims, dict) or "sub" not in claims:
            return None
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool) or not -_TIME_BOUND < exp < _TIME_BOUND:
            return None
        return claims


_JWT_HEADER = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode("ascii")
_json_encode = msgspec.json.encode
_json_decode = msgspec.json.decode
_TIME_BOUND = 1e15  # seconds; a larger `exp` is not a time (and would not fit a float)
_B64_ALPHABET = re.compile(r"[A-Za-z0-9_-]*")


def _sign(key: bytes, signing_input: str) -> bytes:
    return hmac.new(key, signing_input.encode("ascii"), hashlib.sha256).digest()


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    """Unpadded base64url (RFC 7515), strictly: any other character is an error."""
    if not _B64_ALPHABET.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
