"""Release: `POST …/messages/{id}/release` sends a stored message on through the relay, `GET
…/messages/{id}/releases` lists what was sent; for a mailbox's messages and the SMTP sandbox's.

The records are a route of their own rather than a field of the message detail: the detail is
read on every open and by every client, and a message's releases are wanted far more rarely.
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
from inboxd.http.responses import json_response
from inboxd.model import Mailbox, Release, iso


class ReleaseIn(msgspec.Struct):
    """The addresses to send the message to (1 to 20), each allowed by `INBOXD_RELAY_ALLOW`."""

    to: Annotated[list[str], msgspec.Meta(examples=[["me@example.com"]])]


class RelayAnswerOut(msgspec.Struct):
    """The relay's answer for one recipient: its refusal at RCPT (or of the whole message), or the
    reply to DATA. `code` is 0 when the relay could not be reached."""

    address: str
    accepted: bool
    code: int
    message: str


class ReleaseOut(msgspec.Struct):
    id: str
    message_id: str
    user_id: str
    created_at: str
    recipients: list[RelayAnswerOut]


class ReleaseList(msgspec.Struct):
    releases: list[ReleaseOut]


def release_out(r: Release) -> ReleaseOut:
    return ReleaseOut(
        id=r.id,
        message_id=r.message_id,
        user_id=r.user_id,
        created_at=iso(r.created_at),
        recipients=[RelayAnswerOut(a.address, a.accepted, a.code, a.message) for a in r.answers],
    )


_RELEASE_TEXT = (
    "Sends the stored message, unchanged but for a `Received:` header and `Resent-Date`, `Resent-From`, "
    "`Resent-To`, `Resent-Message-ID` in front, through the relay `INBOXD_RELAY_*` configures, from "
    "`INBOXD_RELAY_SENDER` (never the message's From). Pro users and admins only; an API token, never "
    "a mailbox token. 200 once the relay answered, with its answer per recipient (`accepted: false` for "
    "each it refused); the release is recorded either way. Limited per user (`INBOXD_RELEASE_PER_HOUR`)."
)
_ERRORS = (400, 403, 404, 410, 429, 502)
_CODES = ("release_disabled", "recipient_not_allowed", "release_limit_reached", "pro_required")


async def _release(call: Call, mailbox: Mailbox, request: Request) -> Response:
    body = await read_json(request, ReleaseIn)
    done = await call.services.releases.release(call.principal.user, mailbox, request.path_params["id"], body.to)
    return json_response(release_out(done))


async def _history(call: Call, mailbox: Mailbox, request: Request) -> Response:
    found = await call.services.releases.history(mailbox, request.path_params["id"])
    return json_response(ReleaseList(releases=[release_out(r) for r in found]))


@describe(
    "Release a message",
    tag="releases",
    description=_RELEASE_TEXT,
    body=ReleaseIn,
    response=ReleaseOut,
    errors=_ERRORS,
    codes=_CODES,
    extension=True,
)
@endpoint()
async def release_message(request: Request, call: Call) -> Response:
    mailbox = await call.services.mailboxes.find(call.principal, request.path_params["mailbox"])
    return await _release(call, mailbox, request)


@describe(
    "List a message's releases",
    tag="releases",
    description="Newest first, at most 100; kept after the message is deleted.",
    response=ReleaseList,
    errors=(404,),
    extension=True,
)
@endpoint()
async def list_releases(request: Request, call: Call) -> Response:
    mailbox = await call.services.mailboxes.find(call.principal, request.path_params["mailbox"])
    return await _history(call, mailbox, request)


@describe(
    "Release a captured message",
    tag="releases",
    description=_RELEASE_TEXT + " The envelope is `to` alone, not the captured recipients.",
    body=ReleaseIn,
    response=ReleaseOut,
    errors=_ERRORS,
    codes=_CODES,
    extension=True,
)
@endpoint(pro=True)
async def release_captured(request: Request, call: Call) -> Response:
    return await _release(call, await call.services.sandboxes.mailbox(call.principal.user), request)


@describe(
    "List a captured message's releases",
    tag="releases",
    description="Newest first, at most 100; kept after the message is deleted.",
    response=ReleaseList,
    extension=True,
)
@endpoint(pro=True)
async def list_captured_releases(request: Request, call: Call) -> Response:
    return await _history(call, await call.services.sandboxes.mailbox(call.principal.user), request)


routes = [
    Route("/api/accounts/{mailbox}/messages/{id}/release", release_message, methods=["POST"]),
    Route("/api/accounts/{mailbox}/messages/{id}/releases", list_releases, methods=["GET"]),
    Route("/api/user/sandbox/messages/{id}/release", release_captured, methods=["POST"]),
    Route("/api/user/sandbox/messages/{id}/releases", list_captured_releases, methods=["GET"]),
]
