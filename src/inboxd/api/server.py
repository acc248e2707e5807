"""`GET /api/server`: what a client needs to know about this inboxd beyond its URL, the version
and where its SMTP listener receives mail, so a test harness given only the URL can send mail.

Its schema lives here rather than in `api/schemas.py`: one small answer, used by this route alone.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd import package_version
from inboxd.api.openapi import describe
from inboxd.http.pipeline import Call, endpoint
from inboxd.http.responses import json_response


class SmtpListenerOut(msgspec.Struct):
    host: Annotated[str, msgspec.Meta(examples=["127.0.0.1"])]
    port: Annotated[int, msgspec.Meta(examples=[2525])]


class ServerOut(msgspec.Struct):
    version: Annotated[str, msgspec.Meta(examples=["0.1.0"])]
    smtp: SmtpListenerOut


@describe(
    "Get the server's version and SMTP address",
    tag="operations",
    description=(
        "`smtp` is where mail for inboxd's mailboxes is delivered. Its `host` is "
        "`INBOXD_SMTP_HOSTNAME` when set; else `INBOXD_SMTP_HOST` when the listener is bound to one "
        "address; else (a listener on every address, `0.0.0.0` or `::`) the host of the URL this "
        "request was made to. `port` is the port the listener bound."
    ),
    response=ServerOut,
    extension=True,
)
@endpoint()
async def get_server(request: Request, call: Call) -> Response:
    host, port = call.services.mailboxes.smtp_endpoint_for(request.url.hostname or "")
    return json_response(ServerOut(version=package_version(), smtp=SmtpListenerOut(host=host, port=port)))


routes = [Route("/api/server", get_server, methods=["GET"])]
