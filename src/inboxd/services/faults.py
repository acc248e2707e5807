"""SMTP faults: rules that make one mailbox's (or one user's sandbox's) SMTP misbehave on purpose.

A fault set is a list of rules stored per mailbox (`mailbox_faults`), set with `PUT
/api/accounts/{mailbox}/faults` or `PUT /api/user/sandbox/faults`. What it costs the hot path:
a receiving mailbox's rules come with its recipient row (one LEFT JOIN in the query the
recipient cache already makes), so a mailbox without faults costs a `None` check per RCPT; a
change announces `changed` on the bus, which drops every process's recipient cache.

The sandbox's rules are read when the submitter authenticates and at each message's first RCPT,
kept for `recipient_cache_ttl` seconds and dropped on `changed` like the recipient cache.

Counters (`times`, `rate`, `greylist`) live in the process that answers the SMTP session: with
`--workers N` each process counts on its own (README, "SMTP faults"), which a test against one
server never sees.
"""

from __future__ import annotations

import random
import re
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Literal

import msgspec

from inboxd.errors import InvalidRequest
from inboxd.events import EventBus
from inboxd.model import FaultSet, GreylistRule, Mailbox, Rule
from inboxd.store import faults as store
from inboxd.store.db import Database

Stage = Literal["connect", "auth", "mail", "rcpt", "data", "data_end"]
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


@dataclass(slots=True)
class _Counter:
    used: int = 0
    hits: deque[float] = field(default_factory=deque)
    # (client, sender, recipient) → when first seen; a triplet that waited long enough is passed.
    seen: dict[tuple[str, str, str], float] = field(default_factory=dict)
    passed: set[tuple[str, str, str]] = field(default_factory=set)


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
        chance: Callable[[], float] = random.random,
    ) -> None:
        self._db = db
        self._bus = bus
        self._clock = clock
        self._ttl = ttl
        self._chance = chance
        self._counters: dict[tuple[str, int], _Counter] = {}
        # The sandbox's sets read lately: mailbox id → (when read, the set or None).
        self._sets: dict[str, tuple[float, FaultSet | None]] = {}
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
        now = self._clock()
        hit = self._sets.get(mailbox_id)
        if hit is not None and now - hit[0] < self._ttl:
            return hit[1]
        found = await self._db.read(partial(store.get, mailbox_id=mailbox_id))
        if len(self._sets) >= _STATE_LIMIT:
            self._sets.clear()
        self._sets[mailbox_id] = (now, found)
        return found

    def decide(
        self, faults: FaultSet, stage: str, *, client: str = "", sender: str = "", recipient: str = ""
    ) -> Action:
        """What `stage` does for this set now: the first rule that answers wins, delays add up."""
        now = self._clock()
        delay = 0.0
        for index, rule in enumerate(faults.rules):
            if rule.stage != stage or (rule.expires_at is not None and now >= rule.expires_at):
                continue
            counter = self._counter(faults.version, index)
            if rule.greylist is not None:
                if _greylisted(counter, rule.greylist, (client, sender.lower(), recipient.lower()), now):
                    return Action(delay=delay, reply=GREYLISTED)
                continue
            if rule.rate is not None:
                hits = counter.hits
                while hits and hits[0] <= now - rule.rate.per_s:
                    hits.popleft()
                if len(hits) >= rule.rate.messages:
                    return Action(delay=delay, reply=rule.rate.reply)
                hits.append(now)
                continue
            if rule.times is not None and counter.used >= rule.times:
                continue
            if rule.probability is not None and self._chance() >= rule.probability:
                continue
            counter.used += 1
            delay += (rule.delay_ms or 0) / 1000
            if rule.disconnect:
                return Action(delay=delay, disconnect=True)
            if rule.reply is not None:
                return Action(delay=delay, reply=rule.reply)
        return Action(delay=delay) if delay else NOTHING

    def _counter(self, version: str, index: int) -> _Counter:
        key = (version, index)
        counter = self._counters.get(key)
        if counter is None:
            if len(self._counters) >= _STATE_LIMIT:
                self._counters.clear()
            counter = self._counters[key] = _Counter()
        return counter


def _greylisted(counter: _Counter, rule: GreylistRule, triplet: tuple[str, str, str], now: float) -> bool:
    """Real greylisting: the first attempt is deferred, a retry after `min_retry_s` passes and the
    triplet passes from then on; a retry too early is deferred again (its clock is not reset)."""
    if triplet in counter.passed:
        return False
    first = counter.seen.get(triplet)
    if first is None:
        if len(counter.seen) >= _STATE_LIMIT:
            counter.seen.clear()
        counter.seen[triplet] = now
        return True
    if now - first < rule.min_retry_s:
        return True
    counter.passed.add(triplet)
    return False


def first_action(
    faults: FaultService, sets: Sequence[FaultSet | None], stage: str, *, client: str, sender: str
) -> Action:
    """The stage's action over a message's recipients (DATA, its end): the first that does something."""
    for found in sets:
        if found is not None and stage in found.stages:
            action = faults.decide(found, stage, client=client, sender=sender)
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
