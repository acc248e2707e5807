"""Query-string filters of the message lists and waits, and holding a wait open over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from inboxd.api.openapi import Query
from inboxd.http.responses import json_response
from inboxd.model import NO_FILTER, MessageFilter
from inboxd.services.filters import parse_filter, parse_timeout
from inboxd.tasks import cancel_and_wait

FILTER_QUERY = (
    Query(
        "q",
        str,
        "Full text: every word must match (any case) the subject, from, recipients or text body; "
        "`word*` matches a prefix. Mail is searchable within about 2 s of its arrival.",
        extension=True,
    ),
    Query("from", str, "Substring (any case) of `from` or `sender`.", extension=True),
    Query("to", str, "Substring (any case) of the To/Cc recipients or the mailbox address.", extension=True),
    Query("subject", str, "Substring (any case) of the subject.", extension=True),
    Query("unread", bool, "`true`: only unread messages; `false`: only read ones.", extension=True),
    Query("has_attachments", bool, "`true` or `false`.", extension=True),
    Query("since", str, "RFC 3339 timestamp; `created_at` at or after it.", extension=True),
    Query("until", str, "RFC 3339 timestamp; `created_at` before it.", extension=True),
    Query("tag", str, "Only messages carrying this tag (any case).", extension=True),
)
WAIT_QUERY = (
    *FILTER_QUERY,
    Query("timeout", float, "Seconds to wait, 0 to 60 (default 30).", extension=True),
)
WAIT_DESCRIPTION = (
    "The newest message the filters keep (and whose `created_at` is at or after `since`), at once if "
    "there is one, otherwise the moment one is committed; 408 `timeout` when none arrives in time. "
    "Counts as one operation. Open waits are capped per mailbox and per user (429 `too_many_waits`); "
    "`from`, `to`, `subject`, `unread` and `has_attachments` read only the newest messages "
    "(`INBOXD_FILTER_SCAN_ROWS`), where new mail always is."
)

T = TypeVar("T")

# Never sent: the client has gone, and the server only needs to end the request.
_GONE = 499


def message_filter(request: Request) -> MessageFilter:
    # No query string, no filter: the common case skips parsing an empty one.
    if not request.scope["query_string"]:
        return NO_FILTER
    return parse_filter(request.query_params)


def wait_timeout(request: Request) -> float:
    return parse_timeout(request.query_params.get("timeout"))


async def _disconnected(request: Request) -> None:
    # A GET's body is one empty message; the next receive returns only once the client is gone.
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def wait_response(request: Request, waiting: Awaitable[T], encode: Callable[[T], Any]) -> Response:
    """`encode` of what `waiting` finds, unless the client disconnects first: then the wait is
    cancelled, which removes its listeners."""
    wait_task = asyncio.ensure_future(waiting)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((wait_task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        # cancel_and_wait, not suppress(CancelledError) around an await: that would also
        # swallow this handler's own cancellation.
        await cancel_and_wait([task for task in (wait_task, watch) if not task.done()])
    if not wait_task.done() or wait_task.cancelled():
        return Response(status_code=_GONE)
    return json_response(encode(wait_task.result()))
