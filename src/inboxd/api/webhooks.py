"""`/api/user/webhooks` (Pro): register, list, delete, rotate the secret, read the deliveries."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api import schemas
from inboxd.api.openapi import describe
from inboxd.http.body import read_json
from inboxd.http.pipeline import Call, endpoint
from inboxd.http.responses import json_response, no_content


@describe("List webhooks", tag="webhooks", response=schemas.Webhooks)
@endpoint(pro=True)
async def list_webhooks(request: Request, call: Call) -> Response:
    found = await call.services.webhooks.list_for(call.principal.user)
    return json_response(schemas.Webhooks(webhooks=[schemas.webhook(w) for w in found]))


@describe(
    "Register a webhook",
    tag="webhooks",
    description="Called with a signed `email.received` event for every mailbox of the user (see `webhooks`).",
    body=schemas.CreateWebhook,
    response=schemas.WebhookCreated,
    status=201,
    codes=("invalid_url", "webhook_limit_reached"),
)
@endpoint(pro=True)
async def create_webhook(request: Request, call: Call) -> Response:
    body = await read_json(request, schemas.CreateWebhook)
    created = await call.services.webhooks.create(call.principal.user, url=body.url, events=body.events)
    return json_response(schemas.webhook_created(created), 201)


@describe("Delete a webhook", tag="webhooks", status=204, errors=(404,))
@endpoint(pro=True)
async def delete_webhook(request: Request, call: Call) -> Response:
    await call.services.webhooks.delete(call.principal.user, request.path_params["id"])
    return no_content()


@describe(
    "Rotate a webhook's secret",
    tag="webhooks",
    description="The old secret stops working at once; `failure_count` goes back to 0.",
    response=schemas.SecretRotated,
    errors=(404,),
)
@endpoint(pro=True)
async def rotate_secret(request: Request, call: Call) -> Response:
    webhook_id = request.path_params["id"]
    secret = await call.services.webhooks.rotate(call.principal.user, webhook_id)
    return json_response(schemas.SecretRotated(id=webhook_id, secret=secret))


@describe(
    "List a webhook's deliveries",
    tag="webhooks",
    description="The newest 100 attempts, newest first.",
    response=schemas.Deliveries,
    errors=(404,),
)
@endpoint(pro=True)
async def list_deliveries(request: Request, call: Call) -> Response:
    found = await call.services.webhooks.deliveries(call.principal.user, request.path_params["id"])
    return json_response(schemas.Deliveries(deliveries=[schemas.delivery(d) for d in found]))


routes = [
    Route("/api/user/webhooks", list_webhooks, methods=["GET"]),
    Route("/api/user/webhooks", create_webhook, methods=["POST"]),
    Route("/api/user/webhooks/{id}", delete_webhook, methods=["DELETE"]),
    Route("/api/user/webhooks/{id}/rotate", rotate_secret, methods=["POST"]),
    Route("/api/user/webhooks/{id}/deliveries", list_deliveries, methods=["GET"]),
]
