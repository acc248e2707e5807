"""The account page: plan, this month's operations against the quota, domains, and API tokens
(create: shown once; revoke: after a confirmation page, so it works without JavaScript)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.errors import NotFound
from inboxd.services.users import NewToken
from inboxd.web.pages import WebCall, page, redirect, render

_NOTICES = {"revoked": "The token was revoked. Requests that use it are refused from now on."}


async def _account(request: Request, call: WebCall, *, created: NewToken | None = None, status: int = 200) -> Response:
    services, user = call.services, call.user
    profile = await services.profiles.of(user, usage=await services.admission.usage(user))
    tokens = [t for t in await services.users.list_tokens(user) if t.revoked_at is None]
    return render(
        request,
        call,
        "account.html",
        status=status,
        profile=profile,
        tokens=tokens,
        identities=await services.sign_in.identities(user),
        sessions=await services.sessions.count(user),
        created=created,
        notice=_NOTICES.get(request.query_params.get("notice", ""), ""),
    )


@page()
async def account(request: Request, call: WebCall) -> Response:
    return await _account(request, call)


@page(operation=True)
async def create_token(request: Request, call: WebCall) -> Response:
    """The new value is shown in this answer only; it is stored nowhere but as a hash."""
    created = await call.services.users.create_token(call.user, call.form.get("name", ""))
    return await _account(request, call, created=created)


async def _own_token(call: WebCall, token_id: str) -> str:
    for token in await call.services.users.list_tokens(call.user):
        if token.id == token_id and token.revoked_at is None:
            return token.name
    raise NotFound("No such token: it may have been revoked already.")


@page()
async def confirm_revoke(request: Request, call: WebCall) -> Response:
    name = await _own_token(call, request.path_params["id"])
    return render(request, call, "revoke_token.html", token_id=request.path_params["id"], token_name=name)


@page(operation=True)
async def revoke_token(request: Request, call: WebCall) -> Response:
    await call.services.users.revoke_token(call.user, request.path_params["id"])
    return redirect("/account?notice=revoked")


routes = [
    Route("/account", account, methods=["GET"]),
    Route("/account/tokens", create_token, methods=["POST"]),
    Route("/account/tokens/{id}/revoke", confirm_revoke, methods=["GET"]),
    Route("/account/tokens/{id}/revoke", revoke_token, methods=["POST"]),
]
