"""`/api/accounts/{mailbox}/messages`: list, detail, raw source, attachments, marks, delete."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api import schemas
from inboxd.api.filters import FILTER_QUERY, WAIT_DESCRIPTION, WAIT_QUERY, message_filter, wait_response, wait_timeout
from inboxd.api.openapi import Query, describe
from inboxd.http.body import read_json
from inboxd.http.pipeline import Call, endpoint
from inboxd.http.query import page_number
from inboxd.http.responses import (
    content_disposition,
    encode_json,
    encoded_json_response,
    encoded_whole,
    json_response,
    json_stream_response,
    no_content,
)
from inboxd.model import Mailbox, MessageSummary
from inboxd.services.mailboxes import Scope
from inboxd.services.messages import kept_key

_DETAIL_STREAMED = ("text_body", "html_body")


async def _mailbox(request: Request, call: Call, *, scope: Scope = "token") -> Mailbox:
    return await call.services.mailboxes.find(call.principal, request.path_params["mailbox"], scope=scope)


@describe(
    "List messages",
    tag="messages",
    response=schemas.MessagePage,
    query=(
        Query("page", int, "Page number, 30 messages a page, newest first; fewer than 30 means the last.", minimum=1),
        *FILTER_QUERY,
    ),
    errors=(404, 422),
)
@endpoint(mailbox_token=True)
async def list_messages(request: Request, call: Call) -> Response:
    page, flt = page_number(request), message_filter(request)
    messages = call.services.messages
    read = messages.page_json_in(page, flt, _item_json)
    aside = messages.reads_aside(flt)
    items = await call.services.mailboxes.read_in(call.principal, request.path_params["mailbox"], read, aside=aside)
    # The bytes msgspec would give `schemas.MessagePage`, a join of items each encoded once.
    return encoded_json_response(b'{"messages":[%b],"page":%d}' % (b",".join(items), page))


def _item_json(m: MessageSummary) -> bytes:
    return encode_json(schemas.message_item(m))


@describe(
    "Wait for a message",
    tag="messages",
    description=WAIT_DESCRIPTION,
    response=schemas.MessageDetailOut,
    query=WAIT_QUERY,
    errors=(404, 408, 503),
    codes=("too_many_waits",),
    extension=True,
)
@endpoint(mailbox_token=True)
async def wait_message(request: Request, call: Call) -> Response:
    flt, timeout = message_filter(request), wait_timeout(request)
    mailbox = await _mailbox(request, call)
    return await wait_response(request, call.services.waits.wait(mailbox, flt, within=timeout), schemas.message_detail)


@describe(
    "Get a message",
    tag="messages",
    description="Decoded bodies and the attachment list; reading does not mark the message read.",
    response=schemas.MessageDetailOut,
    errors=(404, 410),
)
@endpoint(mailbox_token=True)
async def get_message(request: Request, call: Call) -> Response:
    messages = call.services.messages
    read = messages.detail_in(request.path_params["id"], encoded=True)
    opened = await call.services.mailboxes.read_in(call.principal, request.path_params["mailbox"], read)
    if opened.encoded is not None:
        return encoded_json_response(opened.encoded)
    out = schemas.message_detail(await messages.detail_of(opened))
    whole = encoded_whole(out, fields=_DETAIL_STREAMED)
    if whole is None:
        return json_stream_response(out, fields=_DETAIL_STREAMED)
    messages.details.put(kept_key(opened.summary), whole)
    return encoded_json_response(whole)


@describe(
    "Download the raw message",
    tag="messages",
    description="The exact bytes received, with one `Received:` header in front, as `message.eml`.",
    media_type="message/rfc822",
    errors=(404, 410),
    headers={"Content-Disposition": '`attachment; filename="message.eml"`'},
)
@endpoint(mailbox_token=True)
async def get_source(request: Request, call: Call) -> Response:
    return await source_response(request, call, scope="token")


async def source_response(request: Request, call: Call, *, scope: Scope) -> Response:
    """A message's raw source; `scope` says whose routes name the mailbox (the token's or the user's)."""
    raw = await call.services.messages.source(await _mailbox(request, call, scope=scope), request.path_params["id"])
    return Response(
        raw,
        media_type="message/rfc822",
        headers={"Content-Disposition": 'attachment; filename="message.eml"'},
    )


@describe(
    "Download an attachment",
    tag="messages",
    description="The part's own Content-Type and filename (RFC 6266 `filename*` when not ASCII).",
    media_type="application/octet-stream",
    errors=(400, 404, 410),
    codes=("invalid_index",),
    headers={"Content-Disposition": "`attachment` with the part's filename"},
)
@endpoint(mailbox_token=True)
async def get_attachment(request: Request, call: Call) -> Response:
    return await attachment_response(request, call, scope="token")


async def attachment_response(request: Request, call: Call, *, scope: Scope) -> Response:
    """A message's attachment; `scope` as for `source_response`."""
    part = await call.services.messages.attachment(
        await _mailbox(request, call, scope=scope), request.path_params["id"], request.path_params["index"]
    )
    # The part's own Content-Type, set as a header: `media_type` would have Starlette append a
    # charset of its own to text types, mislabelling a Latin-1 part as UTF-8.
    return Response(
        part.data,
        headers={
            "Content-Type": part.content_type or "application/octet-stream",
            "Content-Disposition": content_disposition(part.filename),
        },
    )


@describe("Mark a message read", tag="messages", status=204, errors=(404, 410))
@endpoint(mailbox_token=True)
async def mark_read(request: Request, call: Call) -> Response:
    await call.services.messages.mark_read(await _mailbox(request, call), request.path_params["id"])
    return no_content()


@describe(
    "Mark many messages read",
    tag="messages",
    description="`ids` (1 to 200; ids that are not the caller's are ignored) or `all: true`; "
    "`updated` counts the messages that went from unread to read.",
    body=schemas.MarkRead,
    response=schemas.Updated,
    errors=(404,),
)
@endpoint(mailbox_token=True)
async def mark_many_read(request: Request, call: Call) -> Response:
    body = await read_json(request, schemas.MarkRead)
    updated = await call.services.messages.mark_many_read(await _mailbox(request, call), ids=body.ids, all_=body.all)
    return json_response(schemas.Updated(updated=updated))


@describe("Delete a message", tag="messages", status=204, errors=(404,))
@endpoint(mailbox_token=True)
async def delete_message(request: Request, call: Call) -> Response:
    await call.services.messages.delete(await _mailbox(request, call), request.path_params["id"])
    return no_content()


@describe(
    "Set a message's tags",
    tag="messages",
    description="Replaces the message's tags with `tags` (an empty list removes them). A tag is 1 to 32 "
    "characters of a-z, 0-9, `.`, `_` and `-`, upper case lowered; at most 10. An invalid one is 400.",
    body=schemas.TagsIn,
    response=schemas.TagsOut,
    errors=(400, 404, 410),
    extension=True,
)
@endpoint(mailbox_token=True)
async def set_tags(request: Request, call: Call) -> Response:
    body = await read_json(request, schemas.TagsIn)
    mailbox = await _mailbox(request, call)
    kept = await call.services.messages.set_tags(mailbox, request.path_params["id"], body.tags)
    return json_response(schemas.TagsOut(tags=list(kept)))


_BASE = "/api/accounts/{mailbox}/messages"
routes = [
    Route(_BASE, list_messages, methods=["GET"]),
    Route(f"{_BASE}/read", mark_many_read, methods=["PUT"]),
    Route(f"{_BASE}/wait", wait_message, methods=["GET"]),
    Route(_BASE + "/{id}", get_message, methods=["GET"]),
    Route(_BASE + "/{id}", delete_message, methods=["DELETE"]),
    Route(_BASE + "/{id}/read", mark_read, methods=["PUT"]),
    Route(_BASE + "/{id}/tags", set_tags, methods=["PUT"]),
    Route(_BASE + "/{id}/source", get_source, methods=["GET"]),
    Route(_BASE + "/{id}/attachments/{index}", get_attachment, methods=["GET"]),
]
