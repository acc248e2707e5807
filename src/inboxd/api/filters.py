"""Query-string filters of the message lists and waits, and holding a wait open over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable

from starlette.requests import Request
from starlette.responses import Response

from inboxd.api import schemas
from inboxd.api.http import json_response
from inboxd.model import MessageDetail, MessageFilter
from inboxd.services.filters import parse_filter, parse_timeout

# Never sent: the client has gone, and the server only needs to end the request.
_GONE = 499


def message_filter(request: Request) -> MessageFilter:
    return parse_filter(request.query_params)


def wait_timeout(request: Request) -> float:
    return parse_timeout(request.query_params.get("timeout"))


async def _disconnected(request: Request) -> None:
    # A GET's body is one empty message; the next receive returns only once the client is gone.
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def wait_response(request: Request, waiting: Awaitable[MessageDetail]) -> Response:
    """The detail of the message `waiting` finds, unless the client disconnects first: then the
    wait is cancelled, which removes its listeners."""
    wait_task = asyncio.ensure_future(waiting)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((wait_task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (wait_task, watch):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    if not wait_task.done() or wait_task.cancelled():
        return Response(status_code=_GONE)
    return json_response(schemas.message_detail(wait_task.result()))
