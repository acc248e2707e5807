"""Signing in and out: the sign-in page, the providers' redirects and callbacks, one-time sign-in
links, sign-out (here or everywhere)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from inboxd.auth import cookies
from inboxd.auth.providers import Providers, configured
from inboxd.errors import InvalidRequest, NotFound
from inboxd.hints import BOOTSTRAP_ADMIN, YOUR_EMAIL, sign_in_command
from inboxd.http.client_address import client_ip
from inboxd.http.pipeline import Call
from inboxd.model import User
from inboxd.services.sessions import FLOW_TTL
from inboxd.web.pages import page, redirect, render, safe_next

_REASONS = {
    "expired": "Your session has ended. Please sign in again.",
    "signed-out": "You are signed out.",
    "signed-out-everywhere": "You are signed out on every device.",
}


@page("public")
async def home(request: Request, call: Call) -> Response:
    signed_in = call.session is not None and call.session.user is not None
    return redirect("/mailboxes" if signed_in else "/auth/sign-in")


@page("public")
async def sign_in_page(request: Request, call: Call) -> Response:
    target = safe_next(request.query_params.get("next"), "/account")
    if call.session is not None and call.session.user is not None:
        return redirect(target)
    providers = configured(call.services.settings)
    return render(
        request,
        call,
        "sign_in.html",
        providers=providers,
        notice=_REASONS.get(request.query_params.get("reason", ""), ""),
        next=target,
        command="" if providers else await _link_command(call),
    )


async def _link_command(call: Call) -> str:
    """The operator's command for a sign-in link, as the start-up hint prints it (`hints.py`): the
    bootstrap admin's while it exists, else with YOUR_EMAIL for the reader to fill in."""
    try:
        email = (await call.services.users.user_by_email(BOOTSTRAP_ADMIN)).email
    except NotFound:
        email = YOUR_EMAIL
    return sign_in_command(call.services.settings, email=email)


@page("public")
async def link_page(request: Request, call: Call) -> Response:
    """A link only shows a button: a link preview or prefetch must not use it up."""
    return render(request, call, "sign_in_link.html", action=request.url.path)


@page("public", csrf_session=False)
async def use_link(request: Request, call: Call) -> Response:
    await call.services.admission.admit_web_sign_in(client=client_ip(request))
    user = await call.services.sign_in.redeem_link(request.path_params["secret"])
    return await start_session(call, user, target="/account")


def providers_of(request: Request) -> Providers:
    providers: Providers = request.app.state.providers
    return providers


@page("public")
async def provider_start(request: Request, call: Call) -> Response:
    """Send the browser to the provider to sign in. The flow's state lives in a session: the
    visitor's own, or a new one that exists only for this sign-in."""
    providers_of(request).info(request.path_params["provider"])  # 404 for a provider not configured
    await call.services.admission.admit_web_sign_in(client=client_ip(request))
    opened = None
    if call.session is None:
        opened = await call.services.sessions.open(None)
        call.session = opened.session
    next_path = safe_next(request.query_params.get("next"), "/account")
    location = await begin_flow(request, call, request.path_params["provider"], next_path=next_path)
    response = RedirectResponse(location, status_code=302)
    if opened is not None:
        cookies.put(response, call.services.settings, opened.value, max_age=FLOW_TTL)
    return response


async def begin_flow(request: Request, call: Call, key: str, *, next_path: str, link_to: User | None = None) -> str:
    """The provider's authorization URL for a flow kept in the (open) session; the caller has
    admitted the attempt. `link_to` (the signed-in user, from a form with the session's CSRF token)
    makes the callback link the provider account to that user instead of signing in."""
    assert call.session is not None
    providers = providers_of(request)
    data: dict[str, object] = {**call.session.data, "next": next_path}
    data.pop(_LINK_TO, None)
    if link_to is not None:
        data[_LINK_TO] = link_to.id
    request.scope["session"] = data
    location = await providers.begin(key, request)
    await call.services.sessions.save_data(call.session, data)
    return location


# The session data key of a flow that links a provider account to the signed-in user.
_LINK_TO = "link_to"


@page("public")
async def provider_callback(request: Request, call: Call) -> Response:
    """Check the provider's answer against the flow's state, then sign in whom it vouches for, or
    link it to the signed-in user who started a linking flow."""
    providers, key = providers_of(request), request.path_params["provider"]
    providers.info(key)
    await call.services.admission.admit_web_sign_in(client=client_ip(request))
    session = call.session
    data: dict[str, object] = dict(session.data) if session else {}
    link_to = data.pop(_LINK_TO, None)
    request.scope["session"] = data
    try:
        vouched = await providers.finish(key, request)
    finally:
        if session is not None:  # the state is spent whatever happened: a replay finds none
            await call.services.sessions.save_data(session, data)
    if link_to is not None:
        if session is None or session.user is None or session.user.id != link_to:
            raise InvalidRequest(
                "This link was started by a session that is no longer signed in. Sign in, then link the "
                "provider again from your account page.",
                code="sign_in_state",
            )
        await call.services.sign_in.link_identity(session.user, vouched)
        return redirect("/account?notice=linked")
    user = await call.services.sign_in.sign_in_identity(vouched)
    return await start_session(call, user, target=safe_next(str(data.get("next") or ""), "/account"))


async def start_session(call: Call, user: User, *, target: str) -> Response:
    """Sign `user` in: a new session (the old one, signed in or not, is ended) and its cookie."""
    opened = await call.services.sessions.open(user, replacing=call.session)
    response = redirect(target)
    cookies.put(
        response, call.services.settings, opened.value, max_age=opened.session.expires_at - opened.session.created_at
    )
    return response


@page("user")
async def sign_out(request: Request, call: Call) -> Response:
    assert call.session is not None
    await call.services.sessions.end(call.session)
    response = redirect("/auth/sign-in?reason=signed-out")
    cookies.clear(response, call.services.settings)
    return response


@page("user")
async def sign_out_everywhere(request: Request, call: Call) -> Response:
    await call.services.sessions.end_all(call.user)
    response = redirect("/auth/sign-in?reason=signed-out-everywhere")
    cookies.clear(response, call.services.settings)
    return response


routes = [
    Route("/", home, methods=["GET"]),
    Route("/auth/sign-in", sign_in_page, methods=["GET"]),
    Route("/auth/{provider}/start", provider_start, methods=["GET"]),
    Route("/auth/{provider}/callback", provider_callback, methods=["GET"]),
    Route("/auth/link/{secret}", link_page, methods=["GET"]),
    Route("/auth/link/{secret}", use_link, methods=["POST"]),
    Route("/auth/sign-out", sign_out, methods=["POST"]),
    Route("/auth/sign-out-everywhere", sign_out_everywhere, methods=["POST"]),
]
