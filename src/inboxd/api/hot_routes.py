"""The hot routes answered ahead of Starlette: the message list, one message and the wait.

These three GETs are most of an API's traffic. Starlette's middleware stack, its router (a
regular expression per route until one matches) and its per-request wrappers cost more here than
the work of answering: this dispatcher recognises the three paths by their segments and calls
their endpoints directly, the same `endpoint(...)`-wrapped functions the router would call
(authentication, admission and the limits' headers in `http/pipeline.py`), with the errors mapped
by the same functions (`http/errors.py`) and the request id, metrics and log line of `Observe`
each one direct call. Everything else, HEAD included, goes on to the app behind.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inboxd.api import messages
from inboxd.api.observe import HEADER, HttpTally, RequestIds, incoming_id, log_access, route_templates
from inboxd.errors import InboxdError
from inboxd.http.errors import on_inboxd_error, unexpected_fault
from inboxd.http.pipeline import Endpoint
from inboxd.logs import request_id

_PREFIX = "/api/accounts/"
_TEMPLATES = route_templates(messages.routes)


def _match(path: str) -> tuple[Endpoint, dict[str, str]] | None:
    """The hot endpoint and path parameters Starlette's router would find for a GET of `path`
    (a parameter is one or more characters other than `/`), or None to let the router look."""
    if not path.startswith(_PREFIX):
        return None
    parts = path[len(_PREFIX) :].split("/")
    if len(parts) < 2 or parts[1] != "messages" or not parts[0]:
        return None
    if len(parts) == 2:
        return messages.list_messages, {"mailbox": parts[0]}
    if len(parts) == 3 and parts[2]:
        if parts[2] == "wait":
            return messages.wait_message, {"mailbox": parts[0]}
        # `GET …/messages/read` is this route too: the `/read` route takes PUT only.
        return messages.get_message, {"mailbox": parts[0], "id": parts[2]}
    return None


def with_hot_routes(
    app: ASGIApp, *, starlette: ASGIApp, tally: HttpTally, ids: RequestIds, trusted_proxies: Sequence[str] = ()
) -> ASGIApp:
    """`app` with the hot routes answered ahead of it; `starlette` is the application their
    requests belong to (`request.app`, whose state holds the services)."""

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        found = _match(scope["path"]) if scope["type"] == "http" and scope["method"] == "GET" else None
        if found is None:
            await app(scope, receive, send)
            return
        endpoint, params = found
        rid = incoming_id(scope, ids)
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500
        size = 0
        scope["app"] = starlette
        scope["endpoint"] = endpoint
        scope["path_params"] = params
        try:
            request = Request(scope, receive)
            try:
                response = await endpoint(request)
            except InboxdError as exc:
                response = await on_inboxd_error(request, exc)
            except Exception:
                response = unexpected_fault(scope)
            response.raw_headers.append((HEADER, rid.encode()))
            status = response.status_code
            body = getattr(response, "body", None)
            if isinstance(body, bytes):
                size = len(body)
                await response(scope, receive, send)
            else:
                # A streamed detail: its size is known once it is sent.
                async def send_counted(message: Message) -> None:
                    nonlocal size
                    if message["type"] == "http.response.body":
                        size += len(message.get("body", b""))
                    await send(message)

                await response(scope, receive, send_counted)
        finally:
            elapsed = time.perf_counter() - started
            route = _TEMPLATES[endpoint]
            tally.count("GET", route, status, elapsed)
            log_access(scope, status=status, route=route, size=size, elapsed=elapsed, trusted_proxies=trusted_proxies)
            request_id.reset(token)

    return dispatch
