"""`/api/user/sandbox`: the SMTP sandbox's settings and the mail it captured (the `mailtd` SDK's
`client.sandbox` resource). Pro rules as every `/api/user/*` path: 403 `pro_required` for a free
account, 403 `access_denied` for a mailbox token.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api import schemas
from inboxd.api.http import Call, endpoint, int_query, json_response, no_content
from inboxd.api.messages import content_disposition

pro = endpoint(pro=True)


@pro
async def get_sandbox(request: Request, call: Call) -> Response:
    info = await call.services.sandboxes.info(call.principal.user)
    return json_response(schemas.sandbox_info(info))


@pro
async def list_messages(request: Request, call: Call) -> Response:
    page = int_query(request, "page", 1)
    items = await call.services.sandboxes.page(call.principal.user, page)
    return json_response({"messages": [schemas.sandbox_item(m) for m in items], "page": page})


@pro
async def purge_messages(request: Request, call: Call) -> Response:
    deleted = await call.services.sandboxes.purge(call.principal.user)
    return json_response({"deleted": deleted})


@pro
async def get_message(request: Request, call: Call) -> Response:
    found = await call.services.sandboxes.detail(call.principal.user, request.path_params["id"])
    return json_response(schemas.sandbox_detail(found))


@pro
async def delete_message(request: Request, call: Call) -> Response:
    await call.services.sandboxes.delete(call.principal.user, request.path_params["id"])
    return no_content()


@pro
async def get_source(request: Request, call: Call) -> Response:
    raw = await call.services.sandboxes.source(call.principal.user, request.path_params["id"])
    return Response(
        raw, media_type="message/rfc822", headers={"Content-Disposition": 'attachment; filename="message.eml"'}
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
    Route(_BASE + "/messages/{id}", get_message, methods=["GET"]),
    Route(_BASE + "/messages/{id}", delete_message, methods=["DELETE"]),
    Route(_BASE + "/messages/{id}/source", get_source, methods=["GET"]),
    Route(_BASE + "/messages/{id}/attachments/{index}", get_attachment, methods=["GET"]),
]
