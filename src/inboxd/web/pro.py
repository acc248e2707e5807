"""The Pro pages: custom domains (add, the DNS records to publish, verify, delete) and webhooks
(create, secret shown once, rotate, re-create a disabled one, delete, the delivery log).

The same services as `/api/user/domains` and `/api/user/webhooks`; the Pro rule is theirs too
(`require_pro`), so a free user gets the same answer here as from the API.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.errors import NotFound
from inboxd.http.pipeline import Call
from inboxd.model import CustomDomain, Webhook
from inboxd.services.credentials import require_pro
from inboxd.services.domains import Verification
from inboxd.web.pages import page, redirect, render

EVENTS = ("email.received",)
_NOTICES = {
    "domain_deleted": "The domain was deleted. Mailboxes on it stop receiving mail.",
    "webhook_deleted": "The webhook was deleted.",
}


async def _domains_page(
    request: Request,
    call: Call,
    *,
    added: CustomDomain | None = None,
    verification: Verification | None = None,
    status: int = 200,
) -> Response:
    require_pro(call.user)
    services = call.services
    domains = await services.domains.list(call.user)
    return render(
        request,
        call,
        "domains.html",
        status=status,
        domains=[(d, services.domains.records(d)) for d in domains],
        added=added,
        verification=verification,
        notice=_NOTICES.get(request.query_params.get("notice", ""), ""),
    )


@page()
async def domains(request: Request, call: Call) -> Response:
    return await _domains_page(request, call)


@page(operation=True)
async def add_domain(request: Request, call: Call) -> Response:
    require_pro(call.user)
    added = await call.services.domains.add(call.user, call.form.get("domain", ""))
    return await _domains_page(request, call, added=added, status=201)


@page(operation=True)
async def verify_domain(request: Request, call: Call) -> Response:
    require_pro(call.user)
    verification = await call.services.domains.verify(call.user, request.path_params["id"])
    return await _domains_page(request, call, verification=verification)


@page()
async def confirm_delete_domain(request: Request, call: Call) -> Response:
    require_pro(call.user)
    domain = await call.services.domains.get(call.user, request.path_params["id"])
    return render(
        request,
        call,
        "confirm.html",
        title=f"Delete {domain.domain}?",
        body="Mailboxes on this domain stop receiving mail. You can add the domain again later.",
        action=f"/domains/{domain.id}/delete",
        button="Delete domain",
        back="/domains",
    )


@page(operation=True)
async def delete_domain(request: Request, call: Call) -> Response:
    require_pro(call.user)
    await call.services.domains.delete(call.user, request.path_params["id"])
    return redirect("/domains?notice=domain_deleted")


async def _webhooks_page(
    request: Request, call: Call, *, secret: tuple[Webhook, str] | None = None, status: int = 200
) -> Response:
    require_pro(call.user)
    return render(
        request,
        call,
        "webhooks.html",
        status=status,
        webhooks=await call.services.webhooks.list_for(call.user),
        secret=secret,
        events=EVENTS,
        notice=_NOTICES.get(request.query_params.get("notice", ""), ""),
    )


@page()
async def webhooks(request: Request, call: Call) -> Response:
    return await _webhooks_page(request, call)


@page(operation=True)
async def create_webhook(request: Request, call: Call) -> Response:
    require_pro(call.user)
    events = [e for e in EVENTS if call.form.get(f"event:{e}")]
    created = await call.services.webhooks.create(call.user, url=call.form.get("url", ""), events=events)
    return await _webhooks_page(request, call, secret=(created, created.secret), status=201)


@page()
async def confirm_webhook_action(request: Request, call: Call) -> Response:
    require_pro(call.user)
    hook = await call.services.webhooks.get(call.user, request.path_params["id"])
    action = request.path_params["action"]
    texts = {
        "rotate": ("Rotate the secret?", "The current secret stops working at once.", "Rotate secret"),
        "recreate": (
            "Re-create this webhook?",
            "A disabled webhook cannot be switched back on: this deletes it and creates a new one for the "
            "same URL, with a new secret and a fresh failure count.",
            "Re-create webhook",
        ),
        "delete": ("Delete this webhook?", "No more deliveries are made to it.", "Delete webhook"),
    }
    if action not in texts:
        raise NotFound("No such page.")
    title, body, button = texts[action]
    return render(
        request,
        call,
        "confirm.html",
        title=title,
        body=f"{hook.url}: {body}",
        action=f"/webhooks/{hook.id}/{action}",
        button=button,
        back="/webhooks",
    )


@page(operation=True)
async def webhook_action(request: Request, call: Call) -> Response:
    require_pro(call.user)
    services, user = call.services, call.user
    hook = await call.services.webhooks.get(call.user, request.path_params["id"])
    action = request.path_params["action"]
    if action == "rotate":
        return await _webhooks_page(request, call, secret=(hook, await services.webhooks.rotate(user, hook.id)))
    if action == "recreate":
        await services.webhooks.delete(user, hook.id)
        created = await services.webhooks.create(user, url=hook.url, events=hook.events)
        return await _webhooks_page(request, call, secret=(created, created.secret), status=201)
    if action == "delete":
        await services.webhooks.delete(user, hook.id)
        return redirect("/webhooks?notice=webhook_deleted")
    raise NotFound("No such page.")


@page()
async def deliveries(request: Request, call: Call) -> Response:
    require_pro(call.user)
    hook = await call.services.webhooks.get(call.user, request.path_params["id"])
    log = await call.services.webhooks.deliveries(call.user, hook.id)
    return render(request, call, "deliveries.html", webhook=hook, deliveries=log)


routes = [
    Route("/domains", domains, methods=["GET"]),
    Route("/domains", add_domain, methods=["POST"]),
    Route("/domains/{id}/verify", verify_domain, methods=["POST"]),
    Route("/domains/{id}/delete", confirm_delete_domain, methods=["GET"]),
    Route("/domains/{id}/delete", delete_domain, methods=["POST"]),
    Route("/webhooks", webhooks, methods=["GET"]),
    Route("/webhooks", create_webhook, methods=["POST"]),
    Route("/webhooks/{id}", deliveries, methods=["GET"]),
    Route("/webhooks/{id}/{action}", confirm_webhook_action, methods=["GET"]),
    Route("/webhooks/{id}/{action}", webhook_action, methods=["POST"]),
]
