"""Webhooks as a use-case: register, list, delete, rotate the secret, read the deliveries log.

Delivery itself is the worker's (`worker/webhooks.py`); ingest queues the jobs.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import secrets
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from urllib.parse import urlsplit

from inboxd.config import Settings
from inboxd.errors import Forbidden, InvalidRequest, NotFound
from inboxd.keyring import Keyring
from inboxd.model import Delivery, User, Webhook
from inboxd.services.domains import ascii_hostname
from inboxd.services.ingest import EMAIL_RECEIVED
from inboxd.store import webhooks as store
from inboxd.store.db import Database, Tx

EVENT_TYPES = (EMAIL_RECEIVED,)
MAX_URL_LENGTH = 2048
DELIVERIES_SHOWN = 100
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """`whsec_` and 32 random bytes in base64: the signing key, shown on create and rotate."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def check_url(url: str, *, allow_http: bool = False) -> str:
    """An absolute https:// URL of at most 2,048 characters, else 400 invalid_url.

    `allow_http` (INBOXD_WEBHOOK_ALLOW_HTTP, for local development) admits http:// too."""
    if len(url) > MAX_URL_LENGTH:
        raise InvalidRequest(f"The URL is longer than {MAX_URL_LENGTH} characters.", code="invalid_url")
    if not url.isprintable() or any(c.isspace() for c in url):
        raise InvalidRequest("The URL holds spaces or control characters.", code="invalid_url")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise InvalidRequest("The URL is malformed.", code="invalid_url") from exc
    if parts.scheme.lower() != "https" and not (allow_http and parts.scheme.lower() == "http"):
        raise InvalidRequest("The webhook URL must use https://.", code="invalid_url")
    if not parts.hostname or parts.username is not None or parts.password is not None:
        raise InvalidRequest("The URL must be absolute, with a host and no credentials.", code="invalid_url")
    if not _valid_host(parts.hostname, bracketed="[" in parts.netloc) or parts.port == 0:
        raise InvalidRequest("The URL's host is not a valid host name or address.", code="invalid_url")
    return url


# An IPv4 address in any notation URL parsers accept (decimal, octal, hex, one to four parts);
# which of them are allowed to be called is the delivery guard's business, not the URL's.
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")


def _valid_host(host: str, *, bracketed: bool) -> bool:
    if bracketed:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return True
    labels = host.removesuffix(".").split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        return len(labels) <= 4 and all(_NUMERIC_LABEL.fullmatch(label) for label in labels)
    return ascii_hostname(host, underscores=True) is not None


def check_events(events: Sequence[str]) -> tuple[str, ...]:
    if not events:
        raise InvalidRequest("`events` must name at least one event type.")
    unknown = sorted({e for e in events if e not in EVENT_TYPES})
    if unknown:
        raise InvalidRequest(f"Unknown event types: {', '.join(unknown)}; known: {', '.join(EVENT_TYPES)}.")
    return tuple(dict.fromkeys(events))


class WebhookService:
    def __init__(self, db: Database, *, settings: Settings, clock: Callable[[], float], keyring: Keyring) -> None:
        self._db = db
        self._settings = settings
        self._clock = clock
        self._keyring = keyring

    async def create(self, user: User, *, url: str, events: Sequence[str]) -> Webhook:
        webhook = Webhook(
            id=str(uuid.uuid4()),
            user_id=user.id,
            url=check_url(url, allow_http=self._settings.webhook_allow_http),
            events=check_events(events),
            secret=new_secret(),
            status="active",
            failure_count=0,
            last_triggered_at=None,
            created_at=self._clock(),
        )
        limit = self._settings.webhook_max_per_user
        sealed = replace(webhook, secret=self._keyring.seal(webhook.secret))  # at rest, only sealed
        if not await self._db.write(partial(store.insert_if_below, webhook=sealed, limit=limit)):
            raise Forbidden(f"A user may register at most {limit} webhooks.", code="webhook_limit_reached")
        return webhook

    async def list_for(self, user: User) -> list[Webhook]:
        return await self._db.read(partial(store.list_for_user, user_id=user.id))

    async def get(self, user: User, webhook_id: str) -> Webhook:
        """The user's webhook `webhook_id` (its secret sealed, as stored)."""
        return await self._db.read(partial(_owned, webhook_id=webhook_id, user_id=user.id))

    async def delete(self, user: User, webhook_id: str) -> None:
        if not await self._db.write(partial(store.delete_for_user, webhook_id=webhook_id, user_id=user.id)):
            raise NotFound("No such webhook.")

    async def rotate(self, user: User, webhook_id: str) -> str:
        """A new secret that signs every attempt from now on; the old one stops at once."""
        secret = new_secret()
        sealed = self._keyring.seal(secret)
        if not await self._db.write(
            partial(store.rotate_for_user, webhook_id=webhook_id, user_id=user.id, secret=sealed)
        ):
            raise NotFound("No such webhook.")
        return secret

    async def reseal_secrets(self) -> int:
        """Seal with the current key every secret stored in the clear or under an old key."""
        stale = [
            (webhook_id, self._keyring.seal(self._keyring.open(stored)))
            for webhook_id, stored in await self._db.read(store.all_secrets)
            if self._keyring.needs_resealing(stored)
        ]
        for webhook_id, sealed in stale:
            await self._db.write(partial(store.set_secret, webhook_id=webhook_id, secret=sealed))
        return len(stale)

    async def deliveries(self, user: User, webhook_id: str) -> list[Delivery]:
        """The newest attempts, newest first."""

        async def read(tx: Tx) -> list[Delivery]:
            await _owned(tx, webhook_id=webhook_id, user_id=user.id)
            return await store.recent_deliveries(tx, webhook_id, limit=DELIVERIES_SHOWN)

        return await self._db.read(read)


async def _owned(tx: Tx, *, webhook_id: str, user_id: str) -> Webhook:
    """Whose a webhook is, the one rule: the user's webhook `webhook_id`, else 404 (someone else's
    is as unknown as one that never was). Rotating and deleting hold to it in their statements."""
    found = await store.get_for_user(tx, webhook_id, user_id)
    if found is None:
        raise NotFound("No such webhook.")
    return found
