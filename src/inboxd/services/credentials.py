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
_API_TOKEN = re.compile(r"ibx_[A-Za-z0-9_-]{43}")


def new_api_token() -> str:
    return API_TOKEN_PREFIX + secrets.token_urlsafe(32)


def is_api_token(value: str) -> bool:
    """Whether `value` has the shape of an API token: anything else is refused without a lookup."""
    return len(value) == 47 and _API_TOKEN.fullmatch(value) is not None


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
    # Set on a live inbox's token only: the browser session it was handed to, which must still be
    # signed in for the token to open the WebSocket (it opens nothing else).
    session_id: str | None = None


class MailboxTokens:
    """Signs mailbox tokens with the first key; any of the keys verifies one (during a key
    rotation, the old key's tokens stay valid until they expire).

    The tokens are JWTs (RFC 7519) with the algorithm pinned to HS256, written with `hmac` rather
    than a JOSE library: the whole of it is a few lines, and both PyJWT and joserfc import the
    `cryptography` package (about 10 MB resident) into every process for algorithms inboxd never
    accepts. A header naming any other algorithm (`none` included) is refused; signatures are
    compared in constant time.

    A value is refused by its size and shape before a byte of it is decoded: a header segment
    holding `[` nested 50,000 deep once made the JSON decoder raise `RecursionError`, a 500.

    A live inbox's token (`issue_live`) also names the browser session it was handed to, with the
    audience `/api/ws`, and lives minutes: `UserService.authenticate` accepts it on the WebSocket
    only, and only while that session is signed in.
    """

    def __init__(self, keys: Sequence[bytes], *, ttl: float) -> None:
        self._keys = list(keys)
        self._ttl = ttl

    def issue(self, mailbox_id: str, password_gen: int, *, now: float) -> str:
        return self._sign({"sub": mailbox_id, "gen": password_gen, "iat": int(now), "exp": int(now + self._ttl)})

    def issue_live(self, mailbox_id: str, password_gen: int, *, session_id: str, now: float, ttl: float) -> str:
        claims = {
            "sub": mailbox_id,
            "gen": password_gen,
            "aud": LIVE_AUDIENCE,
            "sid": session_id,
            "iat": int(now),
            "exp": int(now + ttl),
        }
        return self._sign(claims)

    def _sign(self, claims: dict[str, object]) -> str:
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
        session_id = claims.get("sid")
        audience = claims.get("aud")
        if audience is None and session_id is None:
            return MailboxClaims(mailbox_id=claims["sub"], password_gen=gen)
        if audience != LIVE_AUDIENCE or not isinstance(session_id, str):
            raise Unauthorized("The token is invalid.", code="invalid_token")
        return MailboxClaims(mailbox_id=claims["sub"], password_gen=gen, session_id=session_id)

    def _verified(self, token: str) -> dict[str, Any] | None:
        """The claims of a well-formed HS256 token signed with one of the keys, else None."""
        shape = _JWT_SHAPE.fullmatch(token) if len(token) <= MAX_TOKEN_CHARS else None
        if shape is None:
            return None
        head, body, signature = shape.groups()
        try:
            header = _json_decode(_b64decode(head))
        except (ValueError, RecursionError):
            return None
        if not isinstance(header, dict) or header.get("alg") != "HS256" or "crit" in header:
            return None
        signing_input = f"{head}.{body}"
        expected = _b64decode(signature)
        if not any(hmac.compare_digest(_sign(key, signing_input), expected) for key in self._keys):
            return None
        try:
            claims = _json_decode(_b64decode(body))
        except (ValueError, RecursionError):
            return None
        if not isinstance(claims, dict) or "sub" not in claims:
            return None
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool) or not -_TIME_BOUND < exp < _TIME_BOUND:
            return None
        return claims


# The audience of a live inbox's token: the one path it opens.
LIVE_AUDIENCE = "/api/ws"
# Our tokens are about 200 characters (300 for a live one). The header segment is 36 characters
# (`{"alg":"HS256","typ":"JWT"}`, as PyJWT writes it too), so 128 leaves room for a `kid` while
# keeping the JSON too short to nest deeply; the signature of HS256 is 32 bytes, 43 characters.
MAX_TOKEN_CHARS = 1024
_JWT_SHAPE = re.compile(r"([A-Za-z0-9_-]{4,128})\.([A-Za-z0-9_-]{4,900})\.([A-Za-z0-9_-]{43})")
_JWT_HEADER = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode("ascii")
_json_encode = msgspec.json.encode
_json_decode = msgspec.json.decode
_TIME_BOUND = 1e15  # seconds; a larger `exp` is not a time (and would not fit a float)


def _sign(key: bytes, signing_input: str) -> bytes:
    return hmac.new(key, signing_input.encode("ascii"), hashlib.sha256).digest()


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    """Unpadded base64url (RFC 7515); the caller has checked the alphabet."""
    if len(text) % 4 == 1:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
