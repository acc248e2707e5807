"""`/api/user/sandbox`: the SMTP sandbox's settings and the mail it captured (the `mailtd` SDK's
`client.sandbox` resource). Pro rules as every `/api/user/*` path: 403 `pro_required` for a free
account, 403 `access_denied` for a mailbox token.
"""

from __future__ import annotations

from functools import partial

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api import schemas
from inboxd.api.filters import FILTER_QUERY, WAIT_DESCRIPTION, WAIT_QUERY, message_filter, wait_response, wait_timeout
from inboxd.api.openapi import Query, describe
from inboxd.http.pipeline import Call, endpoint
from inboxd.http.query import page_number
from inboxd.http.responses import content_disposition, json_response, no_content

pro = endpoint(pro=True)


@describe(
    "Get the SMTP sandbox's settings",
    tag="sandbox",
    description="Made on first use. SMTP AUTH with `username` and any live API token of the user.",
    response=schemas.SandboxInfoOut,
)
@pro
async def get_sandbox(request: Request, call: Call) -> Response:
    info = await call.services.sandboxes.info(call.principal.user)
    return json_response(schemas.sandbox_info(info))


@describe(
    "List captured messages",
    tag="sandbox",
    response=schemas.SandboxPage,
    query=(Query("page", int, "Page number, 30 messages a page, newest first.", minimum=1), *FILTER_QUERY),
    errors=(422,),
)
@pro
async def list_messages(request: Request, call: Call) -> Response:
    page = page_number(request)
    flt = message_filter(request)
    items = await call.services.sandboxes.page(call.principal.user, page, flt)
    return json_response(schemas.SandboxPage(messages=[schemas.sandbox_item(m) for m in items], page=page))


@describe(
    "Wait for a captured message",
    tag="sandbox",
    description=WAIT_DESCRIPTION + " `to` also matches the envelope recipients.",
    response=schemas.SandboxDetailOut,
    query=WAIT_QUERY,
    errors=(408, 503),
    codes=("too_many_waits",),
    extension=True,
)
@pro
async def wait_message(request: Request, call: Call) -> Response:
    flt, timeout = message_filter(request), wait_timeout(request)
    user, sandboxes = call.principal.user, call.services.sandboxes
    mailbox = await sandboxes.mailbox(user)
    waiting = call.services.waits.wait_for(mailbox, flt, within=timeout, read=partial(sandboxes.detail, user))
    return await wait_response(request, waiting, schemas.sandbox_detail)


@describe("Delete every captured message", tag="sandbox", response=schemas.Deleted)
@pro
async def purge_messages(request: Request, call: Call) -> Response:
    deleted = await call.services.sandboxes.purge(call.principal.user)
    return json_response(schemas.Deleted(deleted=deleted))


@describe(
    "Get a captured message",
    tag="sandbox",
    description="The message detail plus its envelope `recipients` and the `to`, `cc`, `bcc` it was sent to.",
    response=schemas.SandboxDetailOut,
    errors=(404, 410),
)
@pro
async def get_message(request: Request, call: Call) -> Response:
    found = await call.services.sandboxes.detail(call.principal.user, request.path_params["id"])
    return json_response(schemas.sandbox_detail(found))


@describe("Delete a captured message", tag="sandbox", status=204, errors=(404,))
@pro
async def delete_message(request: Request, call: Call) -> Response:
    await call.services.sandboxes.delete(call.principal.user, request.path_params["id"])
    return no_content()


@describe(
    "Download a captured message",
    tag="sandbox",
    media_type="message/rfc822",
    errors=(404, 410),
    headers={"Content-Disposition": '`attachment; filename="message.eml"`'},
)
@pro
async def get_source(request: Request, call: Call) -> Response:
    raw = await call.services.sandboxes.source(call.principal.user, request.path_params["id"])
    return Response(
        raw, media_type="message/rfc822", headers={"Content-Disposition": 'attachment; filename="message.eml"'}
    )


@describe(
    "Download an attachment of a captured message",
    tag="sandbox",
    media_type="application/octet-stream",
    errors=(400, 404, 410),
    codes=("invalid_index",),
    headers={"Content-Disposition": "`attachment` with the part's filename"},
)
@pro
async def get_attachment(request: Request, call: Call) -> Response:
    part = await call.services.sandboxes.attachment(
        call.principal.user, request.path_params["id"], request.path_params["index"]
    )
    return Response(
        part.data,
        headers={
            "Content-Type": part.content_type or "application/octet-stream",
            "Content-Disposition": content_disposition(part.filename),
        },
    )


_BASE = "/api/user/sandbox"
routes = [
    Route(_BASE, get_sandbox, methods=["GET"]),
    Route(f"{_BASE}/messages", list_messages, methods=["GET"]),
    Route(f"{_BASE}/messages", purge_messages, methods=["DELETE"]),
    Route(f"{_BASE}/messages/wait", wait_message, methods=["GET"]),
    Route(_BASE + "/messages/{id}", get_message, methods=["GET"]),
    Route(_BASE + "/messages/{id}", delete_message, methods=["DELETE"]),
    Route(_BASE + "/messages/{id}/source", get_source, methods=["GET"]),
    Route(_BASE + "/messages/{id}/attachments/{index}", get_attachment, methods=["GET"]),
]
