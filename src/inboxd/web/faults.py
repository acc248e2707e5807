"""The dashboard's side of SMTP faults: the banner's content (each rule in words), and its "Clear
faults" buttons.

A mailbox (or the sandbox) with faults answers SMTP on purpose as a broken server would; the page
says so plainly, so nobody mistakes a test's 452 for a real problem, and offers to clear them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.http.pipeline import Call
from inboxd.model import Mailbox, Rule, iso
from inboxd.services.credentials import require_pro
from inboxd.services.registry import Services
from inboxd.web.pages import page, redirect


async def banner(services: Services, mailbox: Mailbox) -> list[dict[str, Any]]:
    """The active rules as the banner lists them (empty: no banner)."""
    return [
        {
            "stage": r.stage,
            "text": describe(r),
            "until": None if r.expires_at is None else iso(r.expires_at),
            "until_text": None if r.expires_at is None else _short(r.expires_at),
        }
        for r in await services.faults.get(mailbox)
    ]


def describe(rule: Rule) -> str:
    """A rule in words, for the banner (e.g. "452 4.2.2 Mailbox full, the next 2 times")."""
    if rule.greylist is not None:
        what = f"greylisting: 451 4.7.1 until a retry after {rule.greylist.min_retry_s:g} s"
    elif rule.rate is not None:
        what = f"at most {rule.rate.messages} messages per {rule.rate.per_s:g} s, then {rule.rate.reply}"
    elif rule.disconnect:
        what = "drop the connection without a reply"
    elif rule.reply is not None:
        what = rule.reply
    else:
        what = "no change"
    if rule.delay_ms:
        what = f"wait {rule.delay_ms} ms, then {what}" if rule.reply or rule.disconnect else f"wait {rule.delay_ms} ms"
    if rule.times is not None:
        what += f", the next {rule.times} time{'s' if rule.times != 1 else ''}"
    if rule.probability is not None:
        what += f", with probability {rule.probability:g}"
    return what


def _short(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


@page(operation=True)
async def clear_mailbox_faults(request: Request, call: Call) -> Response:
    principal = call.principal
    mailbox = await call.services.mailboxes.find(principal, request.path_params["mailbox"], scope="user")
    await call.services.faults.clear(mailbox)
    return redirect(f"/mailboxes/{mailbox.id}?notice=faults_cleared")


@page(operation=True)
async def clear_sandbox_faults(request: Request, call: Call) -> Response:
    require_pro(call.user)
    await call.services.faults.clear(await call.services.sandboxes.mailbox(call.user))
    return redirect("/sandbox")


routes = [
    Route("/mailboxes/{mailbox}/faults/clear", clear_mailbox_faults, methods=["POST"]),
    Route("/sandbox/faults/clear", clear_sandbox_faults, methods=["POST"]),
]
