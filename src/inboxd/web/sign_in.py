"""Signing in and out: the sign-in page, one-time sign-in links, sign-out (here or everywhere)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api.public import client_ip
from inboxd.auth import cookies
from inboxd.auth.providers import configured
from inboxd.model import User
from inboxd.web.pages import WebCall, page, redirect, render, safe_next

_REASONS = {
    "expired": "Your session has ended. Please sign in again.",
    "signed-out": "You are signed out.",
    "signed-out-everywhere": "You are signed out on every device.",
}


@page("public")
async def home(request: Request, call: WebCall) -> Response:
    signed_in = call.session is not None and call.session.user is not None
    return redirect("/account" if signed_in else "/auth/sign-in")


@page("public")
async def sign_in_page(request: Request, call: WebCall) -> Response:
    target = safe_next(request.query_params.get("next"), "/account")
    if call.session is not None and call.session.user is not None:
        return redirect(target)
    return render(
        request,
        call,
        "sign_in.html",
        providers=configured(call.services.settings),
        notice=_REASONS.get(request.query_params.get("reason", ""), ""),
        next=target,
    )


@page("public")
async def link_page(request: Request, call: WebCall) -> Response:
    """A link only shows a button: a link preview or prefetch must not use it up."""
    return render(request, call, "sign_in_link.html", action=request.url.path)


@page("public", csrf_session=False)
async def use_link(request: Request, call: WebCall) -> Response:
    await call.services.admission.admit_web_sign_in(client=client_ip(request))
    user = await call.services.sign_in.redeem_link(request.path_params["secret"])
    return await start_session(call, user, target="/account")


async def start_session(call: WebCall, user: User, *, target: str) -> Response:
    """Sign `user` in: a new session (the old one, signed in or not, is ended) and its cookie."""
    opened = await call.services.sessions.open(user, replacing=call.session)
    response = redirect(target)
    cookies.put(
        response, call.services.settings, opened.value, max_age=opened.session.expires_at - opened.session.created_at
    )
    return response


@page("user")
async def sign_out(request: Request, call: WebCall) -> Response:
    assert call.session is not None
    await call.services.sessions.end(call.session)
    response = redirect("/auth/sign-in?reason=signed-out")
    cookies.clear(response, call.services.settings)
    return response


@page("user")
async def sign_out_everywhere(request: Request, call: WebCall) -> Response:
    await call.services.sessions.end_all(call.user)
    response = redirect("/auth/sign-in?reason=signed-out-everywhere")
    cookies.clear(response, call.services.settings)
    return response


routes = [
    Route("/", home, methods=["GET"]),
    Route("/auth/sign-in", sign_in_page, methods=["GET"]),
    Route("/auth/link/{secret}", link_page, methods=["GET"]),
    Route("/auth/link/{secret}", use_link, methods=["POST"]),
    Route("/auth/sign-out", sign_out, methods=["POST"]),
    Route("/auth/sign-out-everywhere", sign_out_everywhere, methods=["POST"]),
]
