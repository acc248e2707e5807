"""Paths without an API token: the public domain list, mailbox sign-in, and health."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api import schemas
from inboxd.api.openapi import describe
from inboxd.errors import Unauthorized
from inboxd.http.body import read_json, services_of
from inboxd.http.client_address import client_ip
from inboxd.http.responses import json_response


@describe(
    "List the public domains",
    tag="public",
    description="The domains mailboxes can be created on; limited per client IP.",
    response=schemas.PublicDomains,
    errors=(429,),
)
async def list_domains(request: Request) -> Response:
    services = services_of(request)
    await services.admission.admit_public(client=client_ip(request))
    domains = [schemas.public_domain(d) for d in services.mailboxes.public_domains()]
    return json_response(schemas.PublicDomains(domains=domains))


@describe(
    "Sign in to a mailbox",
    tag="public",
    description="A mailbox token for the WebSocket and the mailbox's REST paths. "
    "10 failed tries per address and client, and 10 per client, in 10 minutes.",
    body=schemas.SignIn,
    response=schemas.SignedIn,
    errors=(401, 429),
    extension=True,
)
async def sign_in(request: Request) -> Response:
    services = services_of(request)
    body = await read_json(request, schemas.SignIn)
    client, admission = client_ip(request), services.admission
    # Entered as a failure before the (slow, threaded) password check, so concurrent guesses
    # count at once; taken back below unless the credentials were wrong.
    attempt = await admission.reserve_sign_in(body.address, client=client)
    try:
        mailbox, token = await services.mailboxes.sign_in(body.address, password=body.password, auth_key=body.auth_key)
    except BaseException as exc:
        if not isinstance(exc, Unauthorized) or exc.code == "account_revoked":
            await admission.release_sign_in(attempt)
        raise
    await admission.sign_in_succeeded(attempt)
    return json_response(schemas.SignedIn(token=token, id=mailbox.id, address=mailbox.address))


@describe(
    "Health",
    tag="operations",
    description="200 once both SMTP and HTTP accept connections.",
    response=schemas.Status,
    extension=True,
)
async def healthz(request: Request) -> Response:
    return json_response(schemas.Status(status="ok"))


routes = [
    Route("/api/domains", list_domains, methods=["GET"]),
    Route("/api/token", sign_in, methods=["POST"]),
    Route("/healthz", healthz, methods=["GET"]),
]
