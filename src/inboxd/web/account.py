"""The account page: plan, this month's operations against the quota, domains, API tokens
(create: shown once; revoke: after a confirmation page, so it works without JavaScript), and the
providers one signs in with (link one through its sign-in flow; unlink one, but not the last)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.auth.providers import configured
from inboxd.errors import Conflict
from inboxd.http.client_address import client_ip
from inboxd.http.pipeline import Call
from inboxd.services.users import NewToken
from inboxd.web.pages import page, redirect, render
from inboxd.web.sign_in import begin_flow, providers_of

_NOTICES = {
    "revoked": "The token was revoked. Requests that use it are refused from now on.",
    "linked": "The provider is linked: you can sign in with it from now on.",
    "unlinked": "The provider is unlinked: it no longer signs you in.",
}


async def _account(
    request: Request, call: Call, *, created: NewToken | None = None, problem: str = "", status: int = 200
) -> Response:
    services, user = call.services, call.user
    profile = await services.profiles.of(user, usage=await services.admission.usage(user))
    tokens = [t for t in await services.users.list_tokens(user) if t.revoked_at is None]
    identities = await services.sign_in.identities(user)
    linked = {i.provider for i in identities}
    return render(
        request,
        call,
        "account.html",
        status=status,
        profile=profile,
        tokens=tokens,
        identities=identities,
        linkable=[p for p in configured(services.settings) if p.key not in linked],
        sessions=await services.sessions.count(user),
        created=created,
        problem=problem,
        notice=_NOTICES.get(request.query_params.get("notice", ""), ""),
    )


@page()
async def account(request: Request, call: Call) -> Response:
    return await _account(request, call)


@page(operation=True)
async def create_token(request: Request, call: Call) -> Response:
    """The new value is shown in this answer only; it is stored nowhere but as a hash."""
    created = await call.services.users.create_token(call.user, call.form.get("name", ""))
    return await _account(request, call, created=created)


@page()
async def confirm_revoke(request: Request, call: Call) -> Response:
    token = await call.services.users.active_token(call.user, request.path_params["id"])
    return render(request, call, "revoke_token.html", token_id=token.id, token_name=token.name)


@page(operation=True)
async def revoke_token(request: Request, call: Call) -> Response:
    await call.services.users.revoke_token(call.user, request.path_params["id"])
    return redirect("/account?notice=revoked")


@page()
async def link_provider(request: Request, call: Call) -> Response:
    """Start the provider's sign-in flow; its callback links what it vouches for to this user.
    The browser is sent on by a page, not by a redirect of this form's answer: the pages' CSP
    (`form-action 'self'`) stops a form whose answer redirects to another origin."""
    key = call.form.get("provider", "")
    label = providers_of(request).info(key).label
    await call.services.admission.admit_web_sign_in(client=client_ip(request))
    location = await begin_flow(request, call, key, next_path="/account", link_to=call.user)
    return render(request, call, "link_provider.html", label=label, location=location)


@page()
async def unlink_provider(request: Request, call: Call) -> Response:
    provider, subject = call.form.get("provider", ""), call.form.get("subject", "")
    try:
        await call.services.sign_in.unlink_identity(call.user, provider=provider, subject=subject)
    except Conflict as exc:  # the last way to sign in: say so on the account page itself
        return await _account(request, call, problem=exc.message, status=exc.status)
    return redirect("/account?notice=unlinked")


routes = [
    Route("/account", account, methods=["GET"]),
    Route("/account/tokens", create_token, methods=["POST"]),
    Route("/account/tokens/{id}/revoke", confirm_revoke, methods=["GET"]),
    Route("/account/tokens/{id}/revoke", revoke_token, methods=["POST"]),
    Route("/account/providers/link", link_provider, methods=["POST"]),
    Route("/account/providers/unlink", unlink_provider, methods=["POST"]),
]
