"""Paths without an API token: the public domain list, mailbox sign-in, and health."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api import schemas
from inboxd.api.http import json_response, read_json, services_of
from inboxd.errors import Unauthorized


def client_ip(request: Request) -> str:
    # The peer address: inboxd trusts no forwarding header (a proxy in front limits by itself).
    return request.client.host if request.client else "unknown"


async def list_domains(request: Request) -> Response:
    services = services_of(request)
    await services.admission.admit_public(client=client_ip(request))
    return json_response({"domains": [schemas.public_domain(d) for d in services.mailboxes.public_domains()]})


async def sign_in(request: Request) -> Response:
    services = services_of(request)
    body = await read_json(request, schemas.SignIn)
    client, admission = client_ip(request), services.admission
    await admission.check_sign_in(body.address, client=client)
    try:
        mailbox, token = await services.mailboxes.sign_in(body.address, password=body.password, auth_key=body.auth_key)
    except Unauthorized as exc:
        if exc.code != "account_revoked":  # only wrong credentials count as failed tries
            await admission.sign_in_failed(body.address, client=client)
        raise
    await admission.sign_in_succeeded(body.address, client=client)
    return json_response({"token": token, "id": mailbox.id, "address": mailbox.address})


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


routes = [
    Route("/api/domains", list_domains, methods=["GET"]),
    Route("/api/token", sign_in, methods=["POST"]),
    Route("/healthz", healthz, methods=["GET"]),
]
