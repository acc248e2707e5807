"""SMTP faults: rules that make one mailbox's (or one user's sandbox's) SMTP misbehave on purpose.

A fault set is a list of rules stored per mailbox (`mailbox_faults`), set with `PUT
/api/accounts/{mailbox}/faults` or `PUT /api/user/sandbox/faults`. What it costs the hot path:
a receiving mailbox's rules come with its recipient row (one LEFT JOIN in the query the
recipient cache already makes), so a mailbox without faults costs a `None` check per RCPT; a
change announces `changed` on the bus, which drops every process's recipient cache.

The sandbox's rules are read when the submitter authenticates and at each message's first RCPT,
kept for `recipient_cache_ttl` seconds and dropped on `changed` like the recipient cache.

Counters (`times`, `rate`, `greylist`) live where the request limits do: in Redis when there is
one (services/faults_redis.py), so every worker counts the same; else in this process's memory,
and `--workers N` without Redis counts per worker (README, "SMTP faults"). Only a stage that has
rules asks them, so their round trip is never on a mailbox without faults.
"""

from __future__ import annotations

import random
import re
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Protocol, TypeVar

import msgspec

from inboxd.errors import InvalidRequest
from inboxd.events import EventBus
from inboxd.model import FaultSet, Mailbox, Rule
from inboxd.services.ttl_cache import TtlCache
from inboxd.store import faults as store
from inboxd.store.db import Database

T = TypeVar("T")
STAGES: tuple[str, ...] = ("connect", "auth", "mail", "rcpt", "data", "data_end")
# Stages a receiving mailbox cannot have: the session does not name the mailbox before RCPT.
SANDBOX_ONLY = frozenset({"connect", "auth", "mail"})
GREYLISTED = "451 4.7.1 Greylisted, please try again later"
MAX_RULES = 20
MAX_DELAY_MS = 30_000
MAX_EXPIRES_IN = 7 * 86_400
# Greylist triplets and counters kept per process at most; past it they start over.
_STATE_LIMIT = 10_000
# `421 4.7.0 Text`: a 4xx or 5xx code, an optional enhanced status of the same class, a text.
_REPLY = re.compile(r"([45][0-9][0-9])(?: ([45])\.[0-9]{1,3}\.[0-9]{1,3})?(?: [\x20-\x7e]{0,400})?")


# The example, shown in the API reference.
EXAMPLE_RULES: list[dict[str, object]] = [
    {"stage": "rcpt", "reply": "452 4.2.2 Mailbox full", "times": 2},
    {"stage": "data_end", "delay_ms": 500},
    {"stage": "data", "disconnect": True, "probability": 0.5},
    {"stage": "rcpt", "greylist": {"min_retry_s": 1}},
    {"stage": "rcpt", "rate": {"messages": 5, "per_s": 60, "reply": "421 4.7.0 Try again later"}},
]


class FaultsIn(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A PUT's body: the rules, and `expires_in` seconds for those that do not give their own."""

    rules: Annotated[list[Rule], msgspec.Meta(examples=[EXAMPLE_RULES])]
    expires_in: Annotated[int | None, msgspec.Meta(examples=[600])] = None


_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True, slots=True)
class Action:
    """What a stage does instead of its normal answer: wait, then reply or drop the connection."""

    delay: float = 0.0
    reply: str | None = None
    disconnect: bool = False


NOTHING = Action()


class FaultCounters(Protocol):
    """Where `times`, `rate` and greylisting count: this process's memory, or Redis shared by all."""

    async def take(self, key: str, *, limit: int, ttl: float) -> bool:
        """Count one use of `key`; False once `limit` uses were counted."""
        ...

    async def rate(self, key: str, *, messages: int, per_s: float, now: float) -> bool:
        """Count one message in the sliding window of `per_s` seconds; False (not counted) when full."""
        ...

    async def first_seen(self, key: str, *, now: float, ttl: float) -> float:
        """When `key` was first seen (now, if this is the first time)."""
        ...

    async def close(self) -> None: ...


class MemoryFaultCounters:
    """This process's counters (the default, and with `--workers N` without Redis: per worker)."""

    def __init__(self) -> None:
        self._used: dict[str, int] = {}
        self._hits: dict[str, deque[float]] = {}
        self._seen: dict[str, float] = {}

    async def take(self, key: str, *, limit: int, ttl: float) -> bool:
        used = self._used.get(key, 0)
        if used >= limit:
            return False
        _bounded(self._used)[key] = used + 1
        return True

    async def rate(self, key: str, *, messages: int, per_s: float, now: float) -> bool:
        hits = self._hits.get(key)
        if hits is None:
            hits = _bounded(self._hits)[key] = deque()
        while hits and hits[0] <= now - per_s:
            hits.popleft()
        if len(hits) >= messages:
            return False
        hits.append(now)
        return True

    async def first_seen(self, key: str, *, now: float, ttl: float) -> float:
        return _bounded(self._seen).setdefault(key, now)

    async def close(self) -> None:
        return None


def _bounded(table: dict[str, T]) -> dict[str, T]:
    """`table`, emptied first when it holds `_STATE_LIMIT` keys (a flood starts the counts over)."""
    if len(table) >= _STATE_LIMIT:
        table.clear()
    return table


def validate(body: FaultsIn, *, sandbox: bool, now: float) -> list[Rule]:
    """The rules to store, each with its absolute `expires_at`; a 400 naming the first bad rule."""
    if len(body.rules) > MAX_RULES:
        raise InvalidRequest(f"At most {MAX_RULES} rules.")
    _check_expiry(body.expires_in, "`expires_in`")
    out = []
    for index, rule in enumerate(body.rules):
        name = f"rule {index + 1} ({rule.stage!r})"
        problem = _problem(rule, sandbox=sandbox)
        if problem is not None:
            raise InvalidRequest(f"Invalid {name}: {problem}.")
        expires_in = rule.expires_in if rule.expires_in is not None else body.expires_in
        _check_expiry(rule.expires_in, f"{name}'s `expires_in`")
        expires_at = None if expires_in is None else now + expires_in
        out.append(msgspec.structs.replace(rule, expires_in=None, expires_at=expires_at))
    return out


def _check_expiry(value: int | None, name: str) -> None:
    if value is not None and not 1 <= value <= MAX_EXPIRES_IN:
        raise InvalidRequest(f"{name} must be between 1 and {MAX_EXPIRES_IN} seconds.")


def _problem(rule: Rule, *, sandbox: bool) -> str | None:
    if rule.stage not in STAGES:
        return f"unknown stage, expected one of {', '.join(STAGES)}"
    if rule.stage in SANDBOX_ONLY and not sandbox:
        return "a mailbox is named at RCPT, so its rules start at `rcpt` (`connect`, `auth`, `mail`: sandbox only)"
    if rule.expires_at is not None:
        return "`expires_at` is set by the server, send `expires_in`"
    kinds = [k for k in ("reply", "disconnect", "rate", "greylist") if getattr(rule, k)]
    if len(kinds) > 1:
        return f"one of reply, disconnect, rate, greylist per rule (got {', '.join(kinds)})"
    if not kinds and rule.delay_ms is None:
        return "nothing to do: give a reply, disconnect, delay_ms, rate or greylist"
    if rule.reply is not None and not _is_reply(rule.reply):
        return f"{rule.reply!r} is not a 4xx/5xx SMTP reply such as '452 4.2.2 Mailbox full'"
    if rule.times is not None and rule.times < 1:
        return "`times` must be at least 1"
    if rule.probability is not None and not 0.0 <= rule.probability <= 1.0:
        return "`probability` must be between 0 and 1"
    if rule.delay_ms is not None and not 0 <= rule.delay_ms <= MAX_DELAY_MS:
        return f"`delay_ms` must be between 0 and {MAX_DELAY_MS}"
    if (rule.rate or rule.greylist) and (rule.times is not None or rule.probability is not None):
        return "`times` and `probability` apply to reply, disconnect and delay_ms rules"
    if rule.rate is not None:
        return _rate_problem(rule)
    if rule.greylist is not None and rule.stage != "rcpt":
        return "greylisting keys on the recipient: its stage is `rcpt`"
    if rule.greylist is not None and not 0 <= rule.greylist.min_retry_s <= 3600:
        return "`greylist.min_retry_s` must be between 0 and 3600"
    return None


def _rate_problem(rule: Rule) -> str | None:
    assert rule.rate is not None
    if rule.stage in ("connect", "auth"):
        return "`rate` counts messages: its stage is mail, rcpt, data or data_end"
    if rule.rate.messages < 1 or not 0 < rule.rate.per_s <= 86_400:
        return "`rate` needs messages >= 1 and 0 < per_s <= 86400"
    if not _is_reply(rule.rate.reply) or rule.rate.reply[0] != "4":
        return f"`rate.reply` {rule.rate.reply!r} must be a 4xx SMTP reply (421, 450, 451) so senders back off"
    return None


def _is_reply(text: str) -> bool:
    match = _REPLY.fullmatch(text)
    return match is not None and (match[2] is None or match[2] == text[0])


class FaultService:
    """Stores fault sets, answers the SMTP engine's "what now?" per stage, counts per process."""

    def __init__(
        self,
        db: Database,
        *,
        bus: EventBus,
        clock: Callable[[], float],
        ttl: float,
        counters: FaultCounters | None = None,
        chance: Callable[[], float] = random.random,
    ) -> None:
        self._db = db
        self._bus = bus
        self._clock = clock
        self._chance = chance
        self._counters = counters or MemoryFaultCounters()
        # The sandbox's sets read lately: mailbox id → the set, or None for a sandbox without one.
        self._sets: TtlCache[str, FaultSet | None] = TtlCache(ttl=ttl, limit=_STATE_LIMIT)
        bus.on_changed(self._sets.clear)

    # The API's side -----------------------------------------------------------------------------

    async def put(self, mailbox: Mailbox, body: FaultsIn) -> list[Rule]:
        rules = validate(body, sandbox=mailbox.kind == "sandbox", now=self._clock())
        if rules:
            await self._db.write(
                partial(
                    store.put,
                    mailbox_id=mailbox.id,
                    version=uuid.uuid4().hex,
                    rules=_encode(rules).decode(),
                    now=self._clock(),
                )
            )
        else:
            await self._db.write(partial(store.delete, mailbox_id=mailbox.id))
        await self._bus.changed()
        return rules

    async def get(self, mailbox: Mailbox) -> list[Rule]:
        found = await self._db.read(partial(store.get, mailbox_id=mailbox.id))
        return [] if found is None else list(found.active(self._clock()))

    async def clear(self, mailbox: Mailbox) -> None:
        await self._db.write(partial(store.delete, mailbox_id=mailbox.id))
        await self._bus.changed()

    # The SMTP engine's side ---------------------------------------------------------------------

    async def of_sandbox(self, mailbox_id: str) -> FaultSet | None:
        """The sandbox's rules, read at most once per TTL (dropped on `changed`)."""
        return await self._sets.answer(
            mailbox_id, partial(self._db.read, partial(store.get, mailbox_id=mailbox_id)), now=self._clock()
        )

    async def decide(
        self, faults: FaultSet, stage: str, *, client: str = "", sender: str = "", recipient: str = ""
    ) -> Action:
        """What `stage` does for this set now: the first rule that answers wins, delays add up."""
        now = self._clock()
        delay = 0.0
        for index, rule in enumerate(faults.rules):
            if rule.stage != stage or (rule.expires_at is not None and now >= rule.expires_at):
                continue
            key = f"{faults.version}:{index}"
            ttl = MAX_EXPIRES_IN if rule.expires_at is None else max(1.0, rule.expires_at - now)
            if rule.greylist is not None:
                triplet = f"{key}:{client}|{sender.lower()}|{recipient.lower()}"
                # A retry too early is deferred again; its clock is not reset (real greylisting).
                if now - await self._counters.first_seen(triplet, now=now, ttl=ttl) < rule.greylist.min_retry_s:
                    return Action(delay=delay, reply=GREYLISTED)
                continue
            if rule.rate is not None:
                if not await self._counters.rate(key, messages=rule.rate.messages, per_s=rule.rate.per_s, now=now):
                    return Action(delay=delay, reply=rule.rate.reply)
                continue
            if rule.probability is not None and self._chance() >= rule.probability:
                continue
            if rule.times is not None and not await self._counters.take(key, limit=rule.times, ttl=ttl):
                continue
            delay += (rule.delay_ms or 0) / 1000
            if rule.disconnect:
                return Action(delay=delay, disconnect=True)
            if rule.reply is not None:
                return Action(delay=delay, reply=rule.reply)
        return Action(delay=delay) if delay else NOTHING

    async def close(self) -> None:
        await self._counters.close()


async def first_action(
    faults: FaultService, sets: Sequence[FaultSet | None], stage: str, *, client: str, sender: str, recipient: str = ""
) -> Action:
    """The stage's action over a message's recipients (DATA, its end): the first that does something."""
    for found in sets:
        if found is not None and stage in found.stages:
            action = await faults.decide(found, stage, client=client, sender=sender, recipient=recipient)
            if action is not NOTHING:
                return action
    return NOTHING


def describe(rule: Rule) -> str:
    """A rule in words, for the dashboard's banner (e.g. "452 4.2.2 Mailbox full, the next 2 times")."""
    if rule.greylist is not None:
        what = f"greylisting: 451 4.7.1 until a retry after {rule.greylist.min_retry_s:g} s"
    elif rule.rate is not None:
        what = f"at most {rule.rate.messages} messages per {rule.rate.per_s:g} s, then {rule.rate.reply}"
    elif rule.disconnect:
        what = "drop the connection without a reply"
    elif rule.reply is not None:
        what = rule.reply
    else:
        what = "no change"
    if rule.delay_ms:
        what = f"wait {rule.delay_ms} ms, then {what}" if rule.reply or rule.disconnect else f"wait {rule.delay_ms} ms"
    if rule.times is not None:
        what += f", the next {rule.times} time{'s' if rule.times != 1 else ''}"
    if rule.probability is not None:
        what += f", with probability {rule.probability:g}"
    return what
