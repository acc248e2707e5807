"""`/api/accounts`: create, read, delete a mailbox and reset its password."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from inboxd.api import schemas
from inboxd.api.openapi import describe
from inboxd.http.body import read_json
from inboxd.http.pipeline import Call, endpoint
from inboxd.http.responses import content_disposition, json_response, no_content


@describe(
    "Create a mailbox",
    tag="mailboxes",
    body=schemas.CreateMailbox,
    response=schemas.MailboxCreated,
    status=201,
    errors=(409,),
    codes=("invalid_address", "invalid_domain", "password_too_short", "account_limit_reached", "address_taken"),
)
@endpoint(creates_mailbox=True)
async def create_mailbox(request: Request, call: Call) -> Response:
    body = await read_json(request, schemas.CreateMailbox)
    created = await call.services.mailboxes.create(
        call.principal, body.address, password=body.password, auth_key=body.auth_key, admit=call.admit_creation
    )
    return json_response(
        schemas.MailboxCreated(id=created.mailbox.id, address=created.mailbox.address, token=created.token), 201
    )


@describe("Get a mailbox", tag="mailboxes", response=schemas.MailboxOut, errors=(404,))
@endpoint(mailbox_token=True)
async def get_mailbox(request: Request, call: Call) -> Response:
    found = await call.services.mailboxes.current(call.principal, request.path_params["mailbox"])
    return json_response(schemas.mailbox(found))


@describe("Delete a mailbox and all its messages", tag="mailboxes", status=204, errors=(404,))
@endpoint()
async def delete_mailbox(request: Request, call: Call) -> Response:
    await call.services.mailboxes.delete(call.principal, request.path_params["mailbox"])
    return no_content()


@describe(
    "Reset a mailbox's password",
    tag="mailboxes",
    description="Every mailbox token issued before stops working, open WebSockets included.",
    body=schemas.MailboxSecret,
    response=schemas.PasswordReset,
    errors=(404,),
    codes=("password_too_short",),
)
@endpoint()
async def reset_password(request: Request, call: Call) -> Response:
    body = await read_json(request, schemas.MailboxSecret)
    await call.services.mailboxes.reset_password(
        call.principal, request.path_params["mailbox"], password=body.password, auth_key=body.auth_key
    )
    return json_response(schemas.PasswordReset(message="password_reset"))


@describe(
    "Export a mailbox as mbox",
    tag="mailboxes",
    description="Every live message, oldest first, as one mboxrd file, streamed; counts as one operation.",
    media_type="application/mbox",
    errors=(404,),
    extension=True,
    headers={"Content-Disposition": '`attachment; filename="<address>.mbox"`'},
)
@endpoint(mailbox_token=True)
async def export_mbox(request: Request, call: Call) -> Response:
    mailbox = await call.services.mailboxes.find(call.principal, request.path_params["mailbox"])
    return StreamingResponse(
        call.services.exports.mbox(mailbox),
        media_type="application/mbox",
        headers={"Content-Disposition": content_disposition(f"{mailbox.address}.mbox")},
    )


routes = [
    Route("/api/accounts", create_mailbox, methods=["POST"]),
    Route("/api/accounts/{mailbox}", get_mailbox, methods=["GET"]),
    Route("/api/accounts/{mailbox}", delete_mailbox, methods=["DELETE"]),
    Route("/api/accounts/{mailbox}/reset-password", reset_password, methods=["PUT"]),
    Route("/api/accounts/{mailbox}/export.mbox", export_mbox, methods=["GET"]),
]
