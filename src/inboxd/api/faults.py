"""`/api/accounts/{mailbox}/faults` and `/api/user/sandbox/faults`: SMTP faults on purpose (issue 27).

A PUT replaces the whole list of rules, a GET reads the rules still in force, a DELETE clears
them. The rules themselves (stages, replies, validation, caps) live in `services/fault_rules.py`.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api.openapi import describe
from inboxd.http.body import read_json
from inboxd.http.pipeline import Call, endpoint
from inboxd.http.responses import json_response, no_content
from inboxd.model import GreylistRule, Mailbox, RateRule, Rule, iso
from inboxd.services.fault_rules import EXAMPLE_RULES, MAX_STAGE_DELAY_MS, FaultsIn

_DESCRIPTION = (
    "Rules at a stage (`rcpt`, `data`, `data_end`; the sandbox also `connect`, `auth`, `mail`): a "
    "`reply` (4xx/5xx with its enhanced status) for the next `times` attempts or with a "
    "`probability`; `delay_ms`; `disconnect`; `rate` {messages, per_s, reply}; `greylist` "
    "{min_retry_s}. `expires_in` (seconds, on the body or a rule) makes a rule lapse by itself. "
    "A PUT replaces every rule; an invalid rule is 400 naming it; delays adding up to more than "
    f"{MAX_STAGE_DELAY_MS // 1000} s at one stage are 422 `fault_delay_too_long`. An API token of the "
    "mailbox's owner sets them, never a mailbox token (403 `access_denied`). README: SMTP faults."
)


class RuleOut(msgspec.Struct, omit_defaults=True):
    stage: str
    reply: str | None = None
    times: int | None = None
    probability: float | None = None
    delay_ms: int | None = None
    disconnect: bool = False
    rate: RateRule | None = None
    greylist: GreylistRule | None = None
    expires_at: str | None = None


class FaultsOut(msgspec.Struct):
    """The rules in force (expired ones left out), in the order they are tried."""

    rules: Annotated[
        list[RuleOut],
        msgspec.Meta(examples=[[{**r, "expires_at": "2026-11-21T15:26:00.123Z"} for r in EXAMPLE_RULES]]),
    ]


def _faults(rules: list[Rule]) -> FaultsOut:
    return FaultsOut(
        rules=[
            RuleOut(
                stage=r.stage,
                reply=r.reply,
                times=r.times,
                probability=r.probability,
                delay_ms=r.delay_ms,
                disconnect=r.disconnect,
                rate=r.rate,
                greylist=r.greylist,
                expires_at=None if r.expires_at is None else iso(r.expires_at),
            )
            for r in rules
        ]
    )


async def _mailbox(request: Request, call: Call) -> Mailbox:
    return await call.services.mailboxes.find(call.principal, request.path_params["mailbox"])


@describe(
    "Set a mailbox's SMTP faults",
    tag="faults",
    description=_DESCRIPTION,
    body=FaultsIn,
    response=FaultsOut,
    errors=(404,),
    extension=True,
)
@endpoint()
async def put_mailbox_faults(request: Request, call: Call) -> Response:
    body = await read_json(request, FaultsIn)
    rules = await call.services.faults.put(await _mailbox(request, call), body)
    return json_response(_faults(rules))


@describe("Get a mailbox's SMTP faults", tag="faults", response=FaultsOut, errors=(404,), extension=True)
@endpoint()
async def get_mailbox_faults(request: Request, call: Call) -> Response:
    return json_response(_faults(await call.services.faults.get(await _mailbox(request, call))))


@describe("Clear a mailbox's SMTP faults", tag="faults", status=204, errors=(404,), extension=True)
@endpoint()
async def clear_mailbox_faults(request: Request, call: Call) -> Response:
    await call.services.faults.clear(await _mailbox(request, call))
    return no_content()


pro = endpoint(pro=True)


@describe(
    "Set the SMTP sandbox's faults",
    tag="faults",
    description=_DESCRIPTION,
    body=FaultsIn,
    response=FaultsOut,
    extension=True,
)
@pro
async def put_sandbox_faults(request: Request, call: Call) -> Response:
    body = await read_json(request, FaultsIn)
    mailbox = await call.services.sandboxes.mailbox(call.principal.user)
    return json_response(_faults(await call.services.faults.put(mailbox, body)))


@describe("Get the SMTP sandbox's faults", tag="faults", response=FaultsOut, extension=True)
@pro
async def get_sandbox_faults(request: Request, call: Call) -> Response:
    mailbox = await call.services.sandboxes.mailbox(call.principal.user)
    return json_response(_faults(await call.services.faults.get(mailbox)))


@describe("Clear the SMTP sandbox's faults", tag="faults", status=204, extension=True)
@pro
async def clear_sandbox_faults(request: Request, call: Call) -> Response:
    await call.services.faults.clear(await call.services.sandboxes.mailbox(call.principal.user))
    return no_content()


routes = [
    Route("/api/accounts/{mailbox}/faults", put_mailbox_faults, methods=["PUT"]),
    Route("/api/accounts/{mailbox}/faults", get_mailbox_faults, methods=["GET"]),
    Route("/api/accounts/{mailbox}/faults", clear_mailbox_faults, methods=["DELETE"]),
    Route("/api/user/sandbox/faults", put_sandbox_faults, methods=["PUT"]),
    Route("/api/user/sandbox/faults", get_sandbox_faults, methods=["GET"]),
    Route("/api/user/sandbox/faults", clear_sandbox_faults, methods=["DELETE"]),
]
