"""The mail pages: the mailbox list, a mailbox's live inbox, and the message view with its tabs.

Handlers decode, call the same services as the REST API, and render; the rules (who reaches what,
which domains a user may use, what HTML is safe) live in those services. Everything works without
JavaScript; `static/inbox.js` only makes the list live and the copy buttons copy.

The message's HTML is never part of the page: it is served by `message_html` with a sandboxing CSP
and shown in an `<iframe sandbox>` without scripts or our origin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from inboxd.auth import cookies
from inboxd.errors import NotFound
from inboxd.http.pipeline import Call
from inboxd.http.query import page_number
from inboxd.http.responses import content_disposition
from inboxd.mail.html_view import content_security_policy, with_color_scheme
from inboxd.model import NO_FILTER, Mailbox
from inboxd.services.filters import parse_filter
from inboxd.web.checks import message_checks
from inboxd.web.faults import banner as faults_banner
from inboxd.web.pages import page, redirect, render
from inboxd.web.releases import release_context

# Bodies longer than this are cut on the page, with a link to the whole message: a 25 MB text part
# would take the browser seconds to lay out.
MAX_PAGE_TEXT = 256 * 1024
MAX_PAGE_SOURCE = 256 * 1024
MAILBOXES_PER_PAGE = 50
SANDBOX = "/sandbox"


@dataclass(frozen=True, slots=True)
class Tab:
    """One view of a message: `?tab=<key>` shows `templates/message_tabs/<key>.html`. A new view
    (a check, say) adds its entry here and its template."""

    key: str
    label: str


TABS = (
    Tab("html", "HTML"),
    Tab("text", "Text"),
    Tab("links", "Links"),
    Tab("headers", "Headers"),
    Tab("source", "Source"),
    Tab("checks", "Checks"),
)
TAB_KEYS = frozenset(t.key for t in TABS)
_NOTICES = {
    "deleted": "The message was deleted.",
    "mailbox_deleted": "The mailbox was deleted, with all its messages.",
    "password_reset": "The password was changed. Earlier mailbox tokens stop working.",
    "created": "Mailbox created: it receives mail at once.",
    "faults_cleared": "The SMTP faults were cleared: mail is answered normally again.",
}
# The session's name (with the mailbox's id) for a generated password on its way to the new mailbox's page.
_NEW_PASSWORD = "new_mailbox_password"


async def _mailbox(call: Call, request: Request) -> Mailbox:
    """The mailbox the path names: `/mailboxes/{mailbox}/...`, or the user's sandbox under `/sandbox/...`."""
    if "mailbox" not in request.path_params:
        return await call.services.sandboxes.mailbox(call.user)
    return await call.services.mailboxes.find(call.principal, request.path_params["mailbox"], scope="user")


async def _ordinary_mailbox(call: Call, request: Request) -> Mailbox:
    """A mailbox that has a password and can be deleted: the sandbox has neither (its service
    answers "No such mailbox" to a delete), so its forms are not found either."""
    mailbox = await _mailbox(call, request)
    if await call.services.sandboxes.is_sandbox(mailbox):
        raise NotFound("No such mailbox.")
    return mailbox


def home_of(mailbox: Mailbox) -> str:
    """Where a mailbox's list lives: the sandbox is its own place in the dashboard, not a mailbox."""
    return SANDBOX if mailbox.kind == "sandbox" else f"/mailboxes/{mailbox.id}"


@page()
async def mailboxes(request: Request, call: Call) -> Response:
    services = call.services
    cursor = request.query_params.get("cursor", "")
    boxes, next_cursor = await services.mailboxes.page_for_user(call.user, cursor, limit=MAILBOXES_PER_PAGE)
    return render(
        request,
        call,
        "mailboxes.html",
        mailboxes=boxes,
        unread=await services.messages.unread_counts(boxes),
        domains=await services.mailboxes.domains_for(call.user),
        next_cursor=next_cursor,
        notice=_NOTICES.get(request.query_params.get("notice", ""), ""),
    )


@page(creates_mailbox=True)
async def create_mailbox(request: Request, call: Call) -> Response:
    form = call.form
    created, password = await call.services.mailboxes.create_in_dashboard(
        call.user,
        local=form.get("local", ""),
        domain=form.get("domain", ""),
        password=form.get("password", ""),
        admit=call.admit_creation,
    )
    mailbox = created.mailbox
    if password is not None:
        await _show_once(request, call, mailbox, password)
    # Post, redirect, get: the answer is the new mailbox, and a reload does not send the form again.
    return redirect(f"/mailboxes/{mailbox.id}?notice=created")


async def _show_once(request: Request, call: Call, mailbox: Mailbox, password: str) -> None:
    """Keep a generated password in this browser session until the mailbox's page shows it, once
    (sealed by the sessions service: the database never holds it readable)."""
    assert call.session is not None
    cookie = cookies.read(request, call.services.settings)
    await call.services.sessions.keep_secret(call.session, cookie, f"{_NEW_PASSWORD}:{mailbox.id}", password)


async def _take_shown_once(request: Request, call: Call, mailbox: Mailbox) -> str | None:
    """The generated password of `mailbox` if this session has not been shown it yet; forgotten now."""
    if call.session is None:
        return None
    cookie = cookies.read(request, call.services.settings)
    return await call.services.sessions.take_secret(call.session, cookie, f"{_NEW_PASSWORD}:{mailbox.id}")


@page()
async def confirm_delete_mailbox(request: Request, call: Call) -> Response:
    mailbox = await _ordinary_mailbox(call, request)
    return render(
        request,
        call,
        "confirm.html",
        title=f"Delete {mailbox.address}?",
        body="The mailbox and every message in it are deleted for good. Mail sent to it afterwards is refused.",
        action=f"/mailboxes/{mailbox.id}/delete",
        button="Delete mailbox",
        back=f"/mailboxes/{mailbox.id}",
    )


@page(operation=True)
async def delete_mailbox(request: Request, call: Call) -> Response:
    mailbox = await _mailbox(call, request)
    await call.services.mailboxes.delete(call.principal, mailbox.id, scope="user")
    return redirect("/mailboxes?notice=mailbox_deleted")


@page()
async def password_form(request: Request, call: Call) -> Response:
    mailbox = await _ordinary_mailbox(call, request)
    return render(request, call, "mailbox_password.html", mailbox=mailbox)


@page(operation=True)
async def reset_password(request: Request, call: Call) -> Response:
    mailbox = await _mailbox(call, request)
    await call.services.mailboxes.reset_password(
        call.principal, mailbox.id, password=call.form.get("password", ""), auth_key=None, scope="user"
    )
    return redirect(f"/mailboxes/{mailbox.id}?notice=password_reset")


async def _inbox_context(request: Request, call: Call, mailbox: Mailbox | None = None) -> dict[str, Any]:
    mailbox = mailbox or await _mailbox(call, request)
    number = page_number(request)
    # The search box sends `q` (full text); the list takes every filter of the API's message lists.
    flt = parse_filter(request.query_params)
    services = call.services
    envelopes: dict[str, tuple[str, ...]] | None = None
    if await services.sandboxes.is_sandbox(mailbox):
        # The sandbox lists each message's envelope recipients: who the application sent it to.
        caught = await services.sandboxes.page(call.user, number, flt)
        messages = [m.summary for m in caught]
        envelopes = {m.summary.id: m.recipients for m in caught}
    else:
        messages = await services.messages.page(mailbox, number, flt)
    unread = (await services.messages.unread_counts([mailbox])).get(mailbox.id, 0)
    return {
        "mailbox": mailbox,
        "home": home_of(mailbox),
        "envelopes": envelopes,
        "messages": messages,
        "page_number": number,
        "unread": unread,
        "q": request.query_params.get("q", ""),
        "tag": flt.tag,
        "filtered": flt != NO_FILTER,
    }


@page()
async def inbox(request: Request, call: Call) -> Response:
    mailbox = await _mailbox(call, request)
    if await call.services.sandboxes.is_sandbox(mailbox):
        return redirect(SANDBOX + (f"?{request.url.query}" if request.url.query else ""))
    context = await _inbox_context(request, call, mailbox)
    smtp_host, smtp_port = call.services.mailboxes.smtp_endpoint
    return render(
        request,
        call,
        "mailbox.html",
        **context,
        smtp_host=smtp_host,
        smtp_port=smtp_port,
        password=await _take_shown_once(request, call, mailbox),
        notice=_NOTICES.get(request.query_params.get("notice", ""), ""),
        faults=await faults_banner(call.services, context["mailbox"]),
    )


@page()
async def inbox_rows(request: Request, call: Call) -> Response:
    """The list's rows alone: what the live inbox swaps in after a new mail or a reconnect."""
    return render(request, call, "message_rows.html", **await _inbox_context(request, call))


@page()
async def sandbox(request: Request, call: Call) -> Response:
    """The SMTP sandbox: its settings and snippets, and what it caught, listed like any mailbox."""
    info = await call.services.sandboxes.info(call.user)
    context = await _inbox_context(request, call, info.sandbox.mailbox)
    notice = _NOTICES.get(request.query_params.get("notice", ""), "")
    faults = await faults_banner(call.services, info.sandbox.mailbox)
    return render(request, call, "sandbox.html", **context, info=info, notice=notice, faults=faults)


@page()
async def live_token(request: Request, call: Call) -> Response:
    """A token for this page's WebSocket, bound to this browser session; POST with the CSRF token,
    so no other site gets one."""
    assert call.session is not None  # the page is for the signed-in
    token = await call.services.mailboxes.live_token(
        call.principal, request.path_params["mailbox"], session_id=call.session.id
    )
    return JSONResponse({"token": token}, headers={"Cache-Control": "no-store"})


@page()
async def message(request: Request, call: Call) -> Response:
    mailbox = await _mailbox(call, request)
    message_id = request.path_params["message"]
    services = call.services
    envelope: tuple[str, ...] = ()
    if await services.sandboxes.is_sandbox(mailbox):
        if "mailbox" in request.path_params:  # an old address of a caught message: it lives under Sandbox
            query = f"?{request.url.query}" if request.url.query else ""
            return redirect(f"{SANDBOX}/messages/{quote(message_id, safe='')}{query}")
        caught = await services.sandboxes.detail(call.user, message_id)
        detail, envelope = caught.detail, caught.recipients
    else:
        detail = await services.messages.detail(mailbox, message_id)
    tab = request.query_params.get("tab", "html" if detail.html_body else "text")
    if tab not in TAB_KEYS:
        tab = "text"
    if not detail.summary.is_read:
        await services.messages.mark_read(mailbox, message_id)
    source = ""
    if tab == "source":
        raw = await services.messages.source(mailbox, message_id)
        source = raw[:MAX_PAGE_SOURCE].decode("utf-8", "replace")
    checks = await message_checks(call, mailbox, message_id) if tab == "checks" else None
    remote = request.query_params.get("remote") == "1"
    home = home_of(mailbox)
    base = f"{home}/messages/{detail.summary.id}"
    return render(
        request,
        call,
        "message.html",
        mailbox=mailbox,
        home=home,
        detail=detail,
        tab=tab,
        tabs=TABS,
        tab_counts={"links": len(detail.links)},
        text=detail.text_body[:MAX_PAGE_TEXT],
        text_cut=len(detail.text_body) > MAX_PAGE_TEXT,
        source=source,
        source_cut=detail.summary.size > MAX_PAGE_SOURCE,
        remote=remote,
        html_src=f"{base}/html" + ("?" + urlencode({"remote": "1"}) if remote else ""),
        base=base,
        envelope=envelope,
        to_line=detail.to,
        cc_line=detail.cc,
        headers=detail.headers,
        **await release_context(call, mailbox, message_id),
        checks=checks,
    )


@page()
async def message_html(request: Request, call: Call) -> Response:
    """The HTML body on its own, inert: cleaned, and sandboxed by its CSP (no scripts, no fetches)."""
    mailbox = await _mailbox(call, request)
    remote = request.query_params.get("remote") == "1"
    safe = await call.services.messages.html_view(mailbox, request.path_params["message"], allow_remote=remote)
    # The preview's dark background (templates/message_preview.html): the frame's document asks for it.
    document = with_color_scheme(safe.document, dark=request.query_params.get("dark") == "1")
    if safe.remote_blocked or safe.truncated:
        # Said inside the frame too, for a reader who opens it on its own.
        document = document.replace("<body>", f"<body data-remote-blocked='{safe.remote_blocked}'>", 1)
    return Response(
        document,
        media_type="text/html; charset=utf-8",
        headers={
            "Content-Security-Policy": content_security_policy(allow_remote=remote),
            "X-Frame-Options": "SAMEORIGIN",
            "Cache-Control": "no-store",
            "X-Remote-Blocked": str(safe.remote_blocked),
        },
    )


@page()
async def message_source(request: Request, call: Call) -> Response:
    mailbox = await _mailbox(call, request)
    raw = await call.services.messages.source(mailbox, request.path_params["message"])
    return Response(
        raw,
        media_type="message/rfc822",
        headers={"Content-Disposition": 'attachment; filename="message.eml"', "Cache-Control": "no-store"},
    )


@page()
async def message_attachment(request: Request, call: Call) -> Response:
    """Always a download: a browser never renders a part of a message in our origin."""
    mailbox = await _mailbox(call, request)
    part = await call.services.messages.attachment(
        mailbox, request.path_params["message"], request.path_params["index"]
    )
    return Response(
        part.data,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": content_disposition(part.filename),
            "Cache-Control": "no-store",
        },
    )


@page(operation=True)
async def mark(request: Request, call: Call) -> Response:
    mailbox = await _mailbox(call, request)
    message_id = request.path_params["message"]
    if request.path_params["state"] == "unread":
        await call.services.messages.mark_unread(mailbox, message_id)
        return redirect(home_of(mailbox))
    await call.services.messages.mark_read(mailbox, message_id)
    return redirect(f"{home_of(mailbox)}/messages/{quote(message_id, safe='')}")


@page(operation=True)
async def mark_all_read(request: Request, call: Call) -> Response:
    mailbox = await _mailbox(call, request)
    await call.services.messages.mark_many_read(mailbox, ids=None, all_=True)
    return redirect(home_of(mailbox))


@page(operation=True)
async def delete_message(request: Request, call: Call) -> Response:
    mailbox = await _mailbox(call, request)
    await call.services.messages.delete(mailbox, request.path_params["message"])
    return redirect(f"{home_of(mailbox)}?notice=deleted")


# A caught message's pages, under /sandbox as under /mailboxes/{mailbox}: the same handlers.
_MESSAGE_ROUTES = [
    ("/messages/{message}", message, "GET"),
    ("/messages/{message}/html", message_html, "GET"),
    ("/messages/{message}/source", message_source, "GET"),
    ("/messages/{message}/attachments/{index}", message_attachment, "GET"),
    ("/messages/{message}/mark/{state:str}", mark, "POST"),
    ("/messages/{message}/delete", delete_message, "POST"),
]

routes = [
    Route("/sandbox", sandbox, methods=["GET"]),
    Route("/sandbox/rows", inbox_rows, methods=["GET"]),
    *(Route(SANDBOX + path, handler, methods=[method]) for path, handler, method in _MESSAGE_ROUTES),
    Route("/mailboxes", mailboxes, methods=["GET"]),
    Route("/mailboxes", create_mailbox, methods=["POST"]),
    Route("/mailboxes/{mailbox}", inbox, methods=["GET"]),
    Route("/mailboxes/{mailbox}/rows", inbox_rows, methods=["GET"]),
    Route("/mailboxes/{mailbox}/live-token", live_token, methods=["POST"]),
    Route("/mailboxes/{mailbox}/read-all", mark_all_read, methods=["POST"]),
    Route("/mailboxes/{mailbox}/delete", confirm_delete_mailbox, methods=["GET"]),
    Route("/mailboxes/{mailbox}/delete", delete_mailbox, methods=["POST"]),
    Route("/mailboxes/{mailbox}/password", password_form, methods=["GET"]),
    Route("/mailboxes/{mailbox}/password", reset_password, methods=["POST"]),
    *(Route("/mailboxes/{mailbox}" + path, handler, methods=[method]) for path, handler, method in _MESSAGE_ROUTES),
]
