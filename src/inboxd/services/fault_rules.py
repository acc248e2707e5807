"""SMTP faults' rules: the stages, the body a PUT takes, its validation, and what a stage does
(`Action`). Pure: no I/O, no state; `services/faults.py` stores and decides, `services/fault_counters.py`
counts.

The caps, and why:
- at most `MAX_RULES` rules, each `delay_ms` up to `MAX_DELAY_MS`;
- the delays of one stage's rules add up to at most `MAX_STAGE_DELAY_MS` (60 s; 422
  `fault_delay_too_long` otherwise). RFC 5321 §4.5.3.2 has senders wait 5 minutes for the greeting,
  MAIL and RCPT, 2 minutes for DATA's 354 and 10 for the final dot's answer: a minute is half the
  shortest, so a fault set delays a stage as a slow server does and never makes a sender time out
  (which would test its timeout, not its retry).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

import msgspec

from inboxd.errors import FaultDelayTooLong, InvalidRequest
from inboxd.model import Rule

STAGES: tuple[str, ...] = ("connect", "auth", "mail", "rcpt", "data", "data_end")
# Stages a receiving mailbox cannot have: the session does not name the mailbox before RCPT.
SANDBOX_ONLY = frozenset({"connect", "auth", "mail"})
GREYLISTED = "451 4.7.1 Greylisted, please try again later"
MAX_RULES = 20
MAX_DELAY_MS = 30_000
MAX_STAGE_DELAY_MS = 60_000
MAX_EXPIRES_IN = 7 * 86_400
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


@dataclass(frozen=True, slots=True)
class Action:
    """What a stage does instead of its normal answer: wait, then reply or drop the connection."""

    delay: float = 0.0
    reply: str | None = None
    disconnect: bool = False


NOTHING = Action()


def validate(body: FaultsIn, *, sandbox: bool, now: float) -> list[Rule]:
    """The rules to store, each with its absolute `expires_at`; a 400 naming the first bad rule, a
    422 naming a stage whose delays add up to more than `MAX_STAGE_DELAY_MS`."""
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
    _check_stage_delays(out)
    return out


def _check_stage_delays(rules: list[Rule]) -> None:
    totals: dict[str, int] = {}
    for rule in rules:
        totals[rule.stage] = totals.get(rule.stage, 0) + (rule.delay_ms or 0)
    for stage, total in totals.items():
        if total > MAX_STAGE_DELAY_MS:
            raise FaultDelayTooLong(
                f"The delays of the `{stage}` rules add up to {total} ms; at most {MAX_STAGE_DELAY_MS} ms per "
                "stage, well below the minutes senders wait for an answer (RFC 5321 §4.5.3.2), so a delay "
                "tests a slow server, not the sender's timeout."
            )


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
