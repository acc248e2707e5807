"""Custom domains of Pro users: add (validated, capped, unique), list, verify through DNS, delete.

A domain is added `pending` with a random `verify_token`; verify looks up the TXT record at
`_inboxd.<domain>` and the MX set of `<domain>` and turns it `verified` once both are there.
A domain left pending past the verification window is removed on the next verify (410).
Deleting a domain leaves its mailboxes readable; SMTP refuses mail to them from then on.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import idna

from inboxd.config import Settings
from inboxd.dns import DnsLookup
from inboxd.errors import Conflict, DuplicateKey, Forbidden, Gone, InvalidRequest, NotFound
from inboxd.events import EventBus
from inboxd.model import CustomDomain, User
from inboxd.services.limits import Admission
from inboxd.store import custom_domains as store
from inboxd.store import users as user_store
from inboxd.store.db import Database, Tx

TXT_LABEL = "_inboxd"
TXT_PREFIX = "inboxd-verify="
MX_PRIORITY = 10
MAX_INPUT = 1000
_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_LABEL_UNDERSCORE = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")


@dataclass(frozen=True, slots=True)
class DnsRecord:
    type: str
    host: str
    value: str
    priority: int | None = None
    ok: bool = False


@dataclass(frozen=True, slots=True)
class Verification:
    domain: CustomDomain
    txt_ok: bool
    mx_ok: bool
    # The records not found yet (empty once verified).
    missing: tuple[DnsRecord, ...]

    @property
    def verified(self) -> bool:
        return self.domain.verify_status == "verified"


def normalize_domain(raw: str) -> str:
    """A DNS name as stored: lower-case, punycode for IDN, no trailing dot; else invalid_domain."""
    invalid = InvalidRequest("`domain` must be a valid domain name.", code="invalid_domain")
    name = raw.strip()
    if not name or len(name) > MAX_INPUT:
        raise invalid
    ascii_name = ascii_hostname(name)
    if ascii_name is None:
        raise invalid
    labels = ascii_name.split(".")
    if len(labels) < 2 or labels[-1].isdigit():
        raise invalid  # a bare label, an IP address, or a numeric top-level label no registry hands out
    return ascii_name


def ascii_hostname(name: str, *, underscores: bool = False) -> str | None:
    """`name` as a lower-case ASCII host name (IDN to punycode, one trailing dot dropped), or None
    when it is not one: every label 1-63 letters, digits and inner hyphens, 253 characters in all.
    `underscores` admits "_" too, which DNS carries and URL hosts in the wild use."""
    name = name.removesuffix(".")
    try:
        ascii_name = name.lower() if name.isascii() else idna.encode(name, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        return None
    label = _LABEL_UNDERSCORE if underscores else _LABEL
    parts = ascii_name.split(".")
    if len(ascii_name) > 253 or not all(label.fullmatch(part) for part in parts):
        return None
    try:
        # Only the A-labels: idna would refuse the underscores a webhook host may carry elsewhere.
        for part in parts:
            if part.startswith("xn--"):
                idna.decode(part)
    except (idna.IDNAError, UnicodeError):
        return None
    return ascii_name


def _within(name: str, parent: str) -> bool:
    return name == parent or name.endswith("." + parent)


class DomainService:
    def __init__(
        self,
        db: Database,
        *,
        settings: Settings,
        dns: DnsLookup,
        clock: Callable[[], float],
        bus: EventBus,
        admission: Admission,
    ) -> None:
        self._db = db
        self._admission = admission
        self._bus = bus
        self._settings = settings
        self._dns = dns
        self._clock = clock

    def records(self, domain: CustomDomain) -> tuple[DnsRecord, DnsRecord]:
        """The TXT and MX records the user publishes for `domain`."""
        return (
            DnsRecord(type="TXT", host=f"{TXT_LABEL}.{domain.domain}", value=f"{TXT_PREFIX}{domain.verify_token}"),
            DnsRecord(type="MX", host=domain.domain, value=self._settings.resolved_mx_host, priority=MX_PRIORITY),
        )

    async def add(self, user: User, raw: str) -> CustomDomain:
        name = normalize_domain(raw)
        own = [*self._settings.public_domains, *self._settings.pro_only_domains, self._settings.resolved_mx_host]
        if any(_within(name, parent) for parent in own):
            raise InvalidRequest("That is one of this service's own domains.", code="invalid_domain")
        now = self._clock()
        domain = CustomDomain(
            id=str(uuid.uuid4()),
            user_id=user.id,
            domain=name,
            verify_status="pending",
            verify_token=secrets.token_hex(16),
            verified_at=None,
            mx_configured=False,
            created_at=now,
        )
        cap = self._settings.max_domains if user.is_pro else 0
        window = self._settings.domain_verify_window

        async def insert(tx: Tx) -> None:
            await user_store.lock_user(tx, user.id)
            existing = await store.get_by_name(tx, name)
            if existing is not None and _lapsed(existing, now, window):
                # A pending registration past its window is dead; the name is free again.
                await store.delete(tx, existing.id)
            elif existing is not None:
                raise Conflict("That domain is already registered.", code="domain_already_exists")
            if await store.count_for_user(tx, user.id) >= cap:
                raise Forbidden(f"This plan allows {cap} custom domains.", code="domain_limit_reached")
            await store.insert(tx, domain)

        try:
            await self._db.write(insert)
        except DuplicateKey as exc:
            raise Conflict("That domain is already registered.", code="domain_already_exists") from exc
        return domain

    async def list(self, user: User) -> list[CustomDomain]:
        return await self._db.read(partial(store.list_for_user, user_id=user.id))

    async def get(self, user: User, domain_id: str) -> CustomDomain:
        """The user's domain `domain_id`, else 404 (another user's is as unknown as one that never
        was): whose a domain is, decided here for the API and the pages alike."""
        domain = await self._db.read(partial(store.get_for_user, domain_id=domain_id, user_id=user.id))
        if domain is None:
            raise NotFound("No such domain.")
        return domain

    async def verify(self, user: User, domain_id: str) -> Verification:
        domain = await self.get(user, domain_id)
        if domain.verify_status == "verified":
            return Verification(domain=domain, txt_ok=True, mx_ok=True, missing=())
        if _lapsed(domain, self._clock(), self._settings.domain_verify_window):
            await self._db.write(partial(store.delete, domain_id=domain.id))
            raise Gone("The verification window has passed; add the domain again.", code="domain_expired")
        # A check costs two look-ups at the user's resolver (up to its timeout): one per domain
        # per few seconds, so a loop of verifies cannot drive a stream of queries through it.
        await self._admission.admit_domain_check(domain.id)
        txt, mx = self.records(domain)
        # Both look-ups at once: a silent nameserver costs one timeout, not two.
        txt_found, mx_found = await asyncio.gather(self._dns.txt(txt.host), self._dns.mx(mx.host))
        txt_ok, mx_ok = txt.value in txt_found, mx.value in mx_found
        if not (txt_ok and mx_ok):
            missing = tuple(r for r, ok in ((txt, txt_ok), (mx, mx_ok)) if not ok)
            return Verification(domain=domain, txt_ok=txt_ok, mx_ok=mx_ok, missing=missing)
        await self._db.write(partial(store.mark_verified, domain_id=domain.id, now=self._clock()))
        verified = await self.get(user, domain_id)
        return Verification(domain=verified, txt_ok=True, mx_ok=True, missing=())

    async def delete(self, user: User, domain_id: str) -> None:
        domain = await self.get(user, domain_id)
        await self._db.write(partial(store.delete, domain_id=domain.id))
        await self._bus.changed()  # its mailboxes take no more mail


def _lapsed(domain: CustomDomain, now: float, window: float) -> bool:
    return domain.verify_status == "pending" and now - domain.created_at > window
