"""SMTP faults: the service that stores a mailbox's (or one user's sandbox's) fault set and
answers the SMTP engine's "what now?" per stage.

A fault set is a list of rules stored per mailbox (`mailbox_faults`), set with `PUT
/api/accounts/{mailbox}/faults` or `PUT /api/user/sandbox/faults`. The rules themselves (stages,
validation, caps) are `services/fault_rules.py`; the counters behind `times`, `rate` and
greylisting `services/fault_counters.py` (memory) and `services/faults_redis.py` (Redis); the
dashboard's wording of a rule `web/faults.py`.

What it costs the hot path: a receiving mailbox's rules come with its recipient row (one LEFT JOIN
in the query the recipient cache already makes), so a mailbox without faults costs a `None` check
per RCPT; a change announces `changed` on the bus, which drops every process's recipient cache.

The sandbox's rules are read when the submitter authenticates and at each message's first RCPT,
kept for `recipient_cache_ttl` seconds and dropped on `changed` like the recipient cache.

Counters live where the request limits do: in Redis when there is one, so every worker counts the
same; else in this process's memory, and `--workers N` without Redis counts per worker (README,
"SMTP faults"). Only a stage that has rules asks them, so their round trip is never on a mailbox
without faults.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from functools import partial

import msgspec

from inboxd.events import EventBus
from inboxd.model import FaultSet, Mailbox, Rule
from inboxd.services.fault_counters import FaultCounters, MemoryFaultCounters
from inboxd.services.fault_rules import GREYLISTED, MAX_EXPIRES_IN, NOTHING, Action, FaultsIn, validate
from inboxd.services.ttl_cache import TtlCache
from inboxd.store import faults as store
from inboxd.store.db import Database

_encode = msgspec.json.Encoder().encode
# The sandbox's fault sets kept at most (a cache: past it, it starts over and reads again).
_SETS_KEPT = 10_000


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
        self._sets: TtlCache[str, FaultSet | None] = TtlCache(ttl=ttl, limit=_SETS_KEPT)
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
        mailbox = faults.mailbox_id
        for index, rule in enumerate(faults.rules):
            if rule.stage != stage or (rule.expires_at is not None and now >= rule.expires_at):
                continue
            key = f"{faults.version}:{index}"
            ttl = MAX_EXPIRES_IN if rule.expires_at is None else max(1.0, rule.expires_at - now)
            if rule.greylist is not None:
                triplet = f"{key}:{client}|{sender.lower()}|{recipient.lower()}"
                # A retry too early is deferred again; its clock is not reset (real greylisting).
                first = await self._counters.first_seen(mailbox, triplet, now=now, ttl=ttl)
                if now - first < rule.greylist.min_retry_s:
                    return Action(delay=delay, reply=GREYLISTED)
                continue
            if rule.rate is not None:
                rate = rule.rate
                if not await self._counters.rate(mailbox, key, messages=rate.messages, per_s=rate.per_s, now=now):
                    return Action(delay=delay, reply=rule.rate.reply)
                continue
            if rule.probability is not None and self._chance() >= rule.probability:
                continue
            if rule.times is not None and not await self._counters.take(mailbox, key, limit=rule.times, ttl=ttl):
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
