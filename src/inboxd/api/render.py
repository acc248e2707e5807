"""`…/messages/{id}/render.png`: a message's HTML body as the dashboard shows it, as a PNG (issue 28),
for a mailbox and for the SMTP sandbox. The rendering itself is `services/render.py`'s."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api.openapi import Query, describe
from inboxd.http.pipeline import Call, endpoint
from inboxd.services.render import MAX_WIDTH, MIN_WIDTH, VIEWPORT_HEIGHT, RenderOptions, render_options

_QUERY = (
    Query(
        "width",
        int,
        f"The viewport's width in CSS pixels, {MIN_WIDTH} to {MAX_WIDTH}; 600 when absent.",
        minimum=MIN_WIDTH,
    ),
    Query(
        "full",
        bool,
        f"`true`: the whole height of the message (capped by INBOXD_RENDER_MAX_HEIGHT); else the first "
        f"{VIEWPORT_HEIGHT} pixels.",
    ),
    Query(
        "remote",
        bool,
        "`true`: load remote images and styles, if the operator allows it (INBOXD_RENDER_REMOTE), through "
        "the webhooks' address guard. Otherwise every request but the message's own parts is refused.",
    ),
    Query("dark", bool, "`true`: on a dark background, as the dashboard's dark preview shows it."),
)
_DESCRIPTION = (
    "The HTML body sanitized as the dashboard shows it, without scripts, drawn by headless Chromium. "
    "Needs the `inboxd[render]` extra (501 `render_unavailable` without it). Renders are bounded in "
    "number and time (503 past INBOXD_RENDER_TIMEOUT) and recent ones are kept."
)
_HEADERS = {"Cache-Control": "private, max-age=3600"}


def _options(request: Request) -> RenderOptions:
    query = request.query_params
    return render_options(
        width=query.get("width"), full=query.get("full"), remote=query.get("remote"), dark=query.get("dark")
    )


@describe(
    "Render a message",
    tag="messages",
    description=_DESCRIPTION,
    media_type="image/png",
    query=_QUERY,
    errors=(400, 404, 410, 501, 503),
    extension=True,
)
@endpoint(mailbox_token=True)
async def render_message(request: Request, call: Call) -> Response:
    options = _options(request)
    mailbox = await call.services.mailboxes.find(call.principal, request.path_params["mailbox"])
    png = await call.services.renders.render(mailbox, request.path_params["id"], options)
    return Response(png, media_type="image/png", headers=_HEADERS)


@describe(
    "Render a message of any of the user's mailboxes",
    tag="pro",
    description="As `GET /api/accounts/{mailbox}/messages/{id}/render.png`, for a mailbox made in the "
    "dashboard or with another token. " + _DESCRIPTION,
    media_type="image/png",
    query=_QUERY,
    errors=(400, 404, 410, 501, 503),
    extension=True,
)
@endpoint(pro=True)
async def render_account_message(request: Request, call: Call) -> Response:
    options = _options(request)
    mailbox = await call.services.mailboxes.find(call.principal, request.path_params["mailbox"], scope="user")
    png = await call.services.renders.render(mailbox, request.path_params["id"], options)
    return Response(png, media_type="image/png", headers=_HEADERS)


@describe(
    "Render a captured message",
    tag="sandbox",
    description=_DESCRIPTION,
    media_type="image/png",
    query=_QUERY,
    errors=(400, 404, 410, 501, 503),
    extension=True,
)
@endpoint(pro=True)
async def render_sandbox_message(request: Request, call: Call) -> Response:
    options = _options(request)
    mailbox = await call.services.sandboxes.mailbox(call.principal.user)
    png = await call.services.renders.render(mailbox, request.path_params["id"], options)
    return Response(png, media_type="image/png", headers=_HEADERS)


routes = [
    Route("/api/accounts/{mailbox}/messages/{id}/render.png", render_message, methods=["GET"]),
    Route("/api/user/accounts/{mailbox}/messages/{id}/render.png", render_account_message, methods=["GET"]),
]
# Listed after the sandbox's own routes (api/app.py), so the reference keeps its order of tags.
sandbox_routes = [Route("/api/user/sandbox/messages/{id}/render.png", render_sandbox_message, methods=["GET"])]
