"""Request admission: per-user request rates, mailbox-creation intervals and monthly operation
quotas, and the limits of the unauthenticated paths. `Admission` is what the API layer asks
before it runs a handler.

`Limiter` holds the rules; the counting happens in a `Counters` back end, in memory
(`limits_memory.py`, one process) or in Redis (`limits_redis.py`, shared by several processes,
one round trip per request). The `limits` package was not used after all: it reads the wall
clock (tests move an injected one), its month is a fixed 30-day window, and it cannot check a
bucket, a creation interval and a month counter in one Redis round trip. The rules, decided
where the spec is silent:

- Request rate: a token bucket per user over all its API and mailbox tokens, refilled at the
  plan's rate, holding `max(1, rate)` (burst equal to the rate). A refused request takes nothing.
- Mailbox creation: at most one `POST /api/accounts` per interval and user. Admission reserves
  the interval atomically (so two concurrent requests cannot both pass); a request that then
  creates nothing (malformed or oversized body, wrong types, invalid or taken address, any other
  error) gives it back, so only a successful creation starts the interval.
- Monthly operations: every authenticated request that passes the rate limit counts, in the
  calendar month in UTC of the injected clock. A request refused for the quota still takes a
  token from the bucket (so a client at its quota is still paced) but is not counted: the quota
  counts operations done, and `ops_used` never exceeds `ops_limit`.
- Persistence: counts are batched into `ops_usage` by `OpsLedger` every `usage_flush_interval`
  seconds and at `stop()`; the stored count is read once per user and month at first use.
- Failed sign-ins (`POST /api/token`, and apart from it SMTP AUTH on the submission listener):
  within any `login_failure_window` seconds (a sliding log), at most `login_max_failures`
  failures per (address, client) and per client. Each attempt is entered in the logs
  atomically before its password is checked, and refused if either log is full, so concurrent
  guesses cannot all pass a check that counts only finished ones. An address's failures from
  all clients are logged too, and slow an attack spread over many clients without locking its
  owner out: once the address has `login_max_failures` failures in the window, a client that
  has failed on it (its (address, client) log is not empty) waits 1, 2, 4 … seconds (at most
  `login_delay_max`) after the address's latest attempt, while a client that has not failed on
  it is never held back. A failure leaves its entries; a success takes its own back and clears
  its (address, client) log, but not the client's (so one valid mailbox cannot reset a client's
  budget between guesses at other addresses) nor the address's (so an owner who keeps signing
  in does not keep resetting the slowdown of an attack); an attempt that fails for another
  reason (a revoked mailbox, a fault) is taken back.
- The client is an address (`client_key`): an IPv6 client counts per /64, the block one
  subscriber is usually given, so that one host cannot get a fresh budget per address.
- Browser sign-in (starting a provider sign-in, its callback, a sign-in link): a token bucket per
  client IP, `sign_in_rate` per minute, burst the same.
- Dashboard pages: a token bucket per signed-in user, or per client IP for a signed-out
  visitor, `web_rps` per second, burst twice that. A form that does what an API call does
  passes `admit` as that call would (same bucket, creation interval and month count).
- Releases to the relay: a token bucket per user, `release_per_hour` an hour, burst the same.
- DNS checks of a custom domain: one per domain per `domain_verify_interval` seconds, in either face.
- Public domain list: a token bucket per client IP, `public_rps` per second, burst twice that.
  The client IP is the socket peer, or the address a trusted proxy reports (`http/client_address.py`).
- Held places (open waits): a counted set per key, each place taken with `hold` for at most a
  lifetime and given back with `let_go`. A hold takes a place in every set it names or in none,
  atomically, so concurrent requests cannot overshoot a cap; in Redis a place whose process died
  frees itself when its lifetime ends.
- Headers on every authenticated answer, success or error: `RateLimit-Limit` (the bucket's size),
  `RateLimit-Remaining` (whole tokens left), `RateLimit-Reset` (whole seconds until the bucket is
  full again; for a bucket of one, until the next request may pass), `X-Ops-Used` (this month's
  count, this request included) and `X-Ops-Limit`; a 429 adds `Retry-After` in whole seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple, Protocol

from inboxd.config import Settings
from inboxd.errors import RateLimited
from inboxd.model import User
from inboxd.services.limits_counters import Counters, Outcome, Pace, Rule, Take, Verdict
from inboxd.services.ops_ledger import OpsLedger

log = logging.getLogger("inboxd.limits")


class Allowance(NamedTuple):
    """What a passed check tells the client, as response headers. (A named tuple, made for
    every request, as `Take` and `Verdict` are: see `limits_counters.py`.)"""

    headers: dict[str, str]
    # The creation interval this admission reserved (its start), to give back if nothing is created.
    creation: float | None = None


@dataclass(frozen=True, slots=True)
class SignInAttempt:
    """A sign-in entered in the failure logs before its secret is checked: the (address,
    client) pair's, the client's, and the address's."""

    pair_key: str
    client_key: str
    address_key: str
    member: str


@functools.lru_cache(maxsize=4096)
def client_key(client: str) -> str:
    """The key a client is counted under: its IPv4 address, or its IPv6 /64."""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


@dataclass(frozen=True, slots=True)
class Held:
    """Places taken by `hold`, to give back with `let_go`."""

    keys: tuple[str, ...]
    member: str


class Admission(Protocol):
    async def admit(self, user: User, *, creates_mailbox: bool) -> Allowance:
        """Count one operation of `user`, or raise `RateLimited` (429)."""
        ...

    async def creation_failed(self, user: User, allowance: Allowance) -> None:
        """Give back the creation interval `allowance` reserved: the request created nothing."""
        ...

    async def usage(self, user: User) -> tuple[int, int]:
        """(`ops_used`, `ops_limit`) of the user's current calendar month, true to the moment."""
        ...

    async def count(self, user: User) -> None:
        """Count one operation no request made (a message the SMTP sandbox captured): no request
        rate applies, and a month already at its quota is left as it is."""
        ...

    async def reserve_sign_in(self, address: str, *, client: str, realm: str = "api") -> SignInAttempt:
        """Enter one attempt as a failure of the address and of the client, or raise
        `RateLimited` if the rules above refuse it; atomic against other attempts. `realm` keeps
        apart failures counted apart ("api": `POST /api/token`; "smtp": SMTP AUTH)."""
        ...

    async def sign_in_succeeded(self, attempt: SignInAttempt) -> None: ...
    async def release_sign_in(self, attempt: SignInAttempt) -> None:
        """Take back an attempt that was not a wrong secret."""
        ...

    async def admit_public(self, *, client: str) -> None:
        """Rate-limit an unauthenticated read per client IP, or raise `RateLimited`."""
        ...

    async def admit_web_sign_in(self, *, client: str) -> None:
        """Count one browser sign-in attempt of a client IP, or raise `RateLimited`."""
        ...

    async def hold(self, caps: Sequence[tuple[str, int]], *, lifetime: float) -> Held | None:
        """Take a place in each set `caps` names (key, cap) for at most `lifetime` seconds, or
        none and answer None when any is full."""
        ...

    async def let_go(self, held: Held) -> None: ...

    async def admit_page(self, *, caller: str) -> None:
        """Rate-limit one dashboard request of a signed-in user or a client IP, or raise `RateLimited`."""
        ...

    async def admit_release(self, user: User) -> None:
        """Count one release of `user` (`release_per_hour`), or raise `RateLimited` (429)."""
        ...

    async def admit_domain_check(self, domain_id: str) -> None:
        """Allow one DNS check of a custom domain per `domain_verify_interval`, or raise `RateLimited`."""
        ...

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


# --- Calendar months ---------------------------------------------------------------------------


def month_of(now: float) -> str:
    """The calendar month in UTC, as `ops_usage` keys it: "YYYY-MM"."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m")


def next_month_start(now: float) -> float:
    moment = datetime.fromtimestamp(now, UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return datetime(year, month, 1, tzinfo=UTC).timestamp()


# --- The rules ---------------------------------------------------------------------------------


def rules_from(settings: Settings) -> dict[str, Rule]:
    def rule(rate: float, interval: float, ops: int) -> Rule:
        if rate <= 0:
            raise ValueError("request rates must be positive")
        return Rule(rate=rate, burst=max(1.0, rate), create_interval=max(0.0, interval), ops_limit=ops)

    return {
        "free": rule(settings.free_rps, settings.free_create_interval, settings.free_ops_limit),
        "pro": rule(settings.pro_rps, settings.pro_create_interval, settings.pro_ops_limit),
    }


class Limiter:
    """The configured limits over a `Counters` back end, with operation counts batched to the database."""

    def __init__(
        self, counters: Counters, *, ledger: OpsLedger, settings: Settings, clock: Callable[[], float]
    ) -> None:
        self._counters = counters
        self._ledger = ledger
        self._settings = settings
        self._clock = clock
        self._rules = rules_from(settings)
        self._flusher: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._current: tuple[float, float, str] = (0.0, 0.0, "")

    def _rule(self, user: User) -> Rule:
        return self._rules["pro" if user.is_pro else "free"]

    def _month(self, now: float) -> tuple[str, float]:
        """(month, its end); cached, since formatting dates was most of an in-memory check's cost."""
        start, end, month = self._current
        if not start <= now < end:
            month, end = month_of(now), next_month_start(now)
            start = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC).timestamp()
            self._current = (start, end, month)
        return month, end

    async def admit(self, user: User, *, creates_mailbox: bool) -> Allowance:
        now = self._clock()
        month, month_end = self._month(now)
        take = Take(
            user_id=user.id,
            month=month,
            now=now,
            rule=self._rule(user),
            creates_mailbox=creates_mailbox,
            # Kept a few days past the month, so a late flush or usage read still finds it.
            ops_ttl=int(month_end - now) + 3 * 86400,
        )
        verdict = await self._counters.take(take)
        if verdict.outcome is Outcome.SEED:
            verdict = await self._counters.take(take._replace(seed=await self._ledger.total(user.id, month)))
        headers = _headers(verdict, take.rule)
        if verdict.outcome is Outcome.OK:
            self._ledger.add(user.id, month)
            reserved = now if creates_mailbox and take.rule.create_interval > 0 else None
            return Allowance(headers, creation=reserved)
        if verdict.outcome is Outcome.QUOTA:
            error = RateLimited(
                f"The monthly quota of {take.rule.ops_limit} operations is used up; it resets at the start "
                "of the next calendar month (UTC).",
                code="ops_quota_exceeded",
                retry_after=month_end - now,
            )
        else:
            error = RateLimited(retry_after=verdict.retry_after)
        error.headers.update(headers)
        raise error

    async def count(self, user: User) -> None:
        now = self._clock()
        month, month_end = self._month(now)
        take = Take(
            user_id=user.id,
            month=month,
            now=now,
            rule=self._rule(user),
            creates_mailbox=False,
            ops_ttl=int(month_end - now) + 3 * 86400,
        )
        verdict = await self._counters.count(take)
        if verdict.outcome is Outcome.SEED:
            verdict = await self._counters.count(take._replace(seed=await self._ledger.total(user.id, month)))
        if verdict.outcome is Outcome.OK:
            self._ledger.add(user.id, month)

    async def usage(self, user: User) -> tuple[int, int]:
        month, _ = self._month(self._clock())
        used = await self._counters.ops_used(user.id, month)
        if used is None:
            used = await self._ledger.total(user.id, month)
        return used, self._rule(user).ops_limit

    async def creation_failed(self, user: User, allowance: Allowance) -> None:
        if allowance.creation is not None:
            await self._counters.release_creation(user.id, allowance.creation)

    async def reserve_sign_in(self, address: str, *, client: str, realm: str = "api") -> SignInAttempt:
        address, client = address.strip().lower(), client_key(client)
        settings = self._settings
        attempt = SignInAttempt(
            pair_key=f"login:{realm}:pair:{client}:{address}",
            client_key=f"login:{realm}:client:{client}",
            address_key=f"login:{realm}:addr:{address}",
            member=secrets.token_hex(8),
        )
        wait = await self._counters.reserve(
            (attempt.pair_key, attempt.client_key),
            member=attempt.member,
            now=self._clock(),
            window=settings.login_failure_window,
            limit=settings.login_max_failures,
            pace=Pace(
                key=attempt.address_key,
                when_key=attempt.pair_key,
                after=max(1, settings.login_max_failures),
                most=settings.login_delay_max,
            ),
        )
        if wait > 0:
            raise RateLimited(retry_after=wait)
        return attempt

    async def sign_in_succeeded(self, attempt: SignInAttempt) -> None:
        await self._counters.release((attempt.client_key, attempt.address_key), member=attempt.member)
        await self._counters.clear_failures(attempt.pair_key)

    async def release_sign_in(self, attempt: SignInAttempt) -> None:
        keys = (attempt.pair_key, attempt.client_key, attempt.address_key)
        await self._counters.release(keys, member=attempt.member)

    async def admit_public(self, *, client: str) -> None:
        rate = self._settings.public_rps
        wait = await self._counters.hit(
            f"public:{client_key(client)}", now=self._clock(), rate=rate, burst=max(1.0, 2 * rate)
        )
        if wait > 0:
            raise RateLimited(retry_after=wait)

    async def admit_web_sign_in(self, *, client: str) -> None:
        per_minute = self._settings.sign_in_rate
        wait = await self._counters.hit(
            f"websignin:{client_key(client)}", now=self._clock(), rate=per_minute / 60.0, burst=max(1.0, per_minute)
        )
        if wait > 0:
            raise RateLimited("Too many sign-in attempts from your address; wait a minute.", retry_after=wait)

    async def hold(self, caps: Sequence[tuple[str, int]], *, lifetime: float) -> Held | None:
        now = self._clock()
        member = secrets.token_hex(8)
        taken = await self._counters.hold(tuple(caps), member=member, now=now, until=now + lifetime)
        return Held(keys=tuple(key for key, _ in caps), member=member) if taken else None

    async def let_go(self, held: Held) -> None:
        await self._counters.let_go(held.keys, member=held.member)

    async def admit_page(self, *, caller: str) -> None:
        rate = self._settings.web_rps
        wait = await self._counters.hit(f"web:{caller}", now=self._clock(), rate=rate, burst=max(1.0, 2 * rate))
        if wait > 0:
            raise RateLimited("Too many requests; wait a moment and reload.", retry_after=wait)

    async def admit_release(self, user: User) -> None:
        per_hour = max(1, self._settings.release_per_hour)
        wait = await self._counters.hit(
            f"release:{user.id}", now=self._clock(), rate=per_hour / 3600.0, burst=max(1.0, float(per_hour))
        )
        if wait > 0:
            raise RateLimited(
                f"At most {per_hour} releases an hour; release again in {math.ceil(wait)} s.",
                code="release_limit_reached",
                retry_after=wait,
            )

    async def admit_domain_check(self, domain_id: str) -> None:
        interval = self._settings.domain_verify_interval
        if interval <= 0:
            return
        wait = await self._counters.hit(f"dnscheck:{domain_id}", now=self._clock(), rate=1.0 / interval, burst=1.0)
        if wait > 0:
            raise RateLimited(
                f"This domain's DNS records were checked moments ago; check again in {math.ceil(wait)} s.",
                retry_after=wait,
            )

    async def start(self) -> None:
        self._stopping.clear()
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        # Stopped by an event, never cancelled: a cancelled write could still commit after its
        # counts were put back as pending, and count them twice.
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._settings.usage_flush_interval)
            try:
                await self._ledger.flush()
                now = self._clock()
                self._counters.prune(now=now, month=month_of(now))
            except Exception:
                # The ledger keeps what it could not write; the next round tries again.
                log.warning("could not flush operation counts", exc_info=True)

    async def stop(self) -> None:
        self._stopping.set()
        if self._flusher is not None:
            await self._flusher
            self._flusher = None
        try:
            await self._ledger.flush()
        except Exception:
            log.exception("operation counts could not be written at stop")
        finally:
            await self._counters.close()


@functools.cache
def _fixed(rule: Rule) -> tuple[str, str]:
    """A rule's `RateLimit-Limit` and `X-Ops-Limit`, formatted once (there is a rule per plan)."""
    return str(int(rule.burst)), str(rule.ops_limit)


def _headers(verdict: Verdict, rule: Rule) -> dict[str, str]:
    """RateLimit-* (IETF draft names): the bucket's size, whole tokens left, seconds until it is full."""
    tokens = max(0.0, verdict.tokens + 1e-6)  # as limits_memory.ENOUGH: a hair short is whole
    limit, ops_limit = _fixed(rule)
    return {
        "RateLimit-Limit": limit,
        "RateLimit-Remaining": str(int(tokens)),
        "RateLimit-Reset": str(math.ceil(max(0.0, rule.burst - tokens) / rule.rate - 1e-9)),
        "X-Ops-Used": str(verdict.ops_used),
        "X-Ops-Limit": ops_limit,
    }
