"""The dashboard's side of Release: the form and past releases on the message page (a partial,
`message_release.html`), and the page that shows the relay's answer per recipient after a release.

The rules (who may release, to whom, how often) are the release service's; this module only reads
the form and renders.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.errors import Forbidden, InvalidRequest, RateLimited, RelayError
from inboxd.http.pipeline import Call
from inboxd.model import Mailbox
from inboxd.web.pages import page, render

# The form's one field takes addresses separated by commas, semicolons or white space.
_SEPARATORS = re.compile(r"[,;\s]+")


async def release_context(call: Call, mailbox: Mailbox, message_id: str) -> dict[str, Any]:
    """What the message page's release partial shows; reads nothing when releases are off."""
    releases = call.services.releases
    if not releases.enabled:
        return {"release_enabled": False, "releases": []}
    return {
        "release_enabled": True,
        # The form says up front who may release and to whom, rather than after a refused try.
        "release_allowed": releases.allowed,
        "release_permitted": releases.may_release(call.user),
        "releases": await releases.history(mailbox, message_id),
    }


@page(operation=True)
async def release_message(request: Request, call: Call) -> Response:
    if "mailbox" in request.path_params:
        mailbox = await call.services.mailboxes.find(call.principal, request.path_params["mailbox"], scope="user")
        home = f"/mailboxes/{mailbox.id}"
    else:  # a caught message, under /sandbox where its page is (web/mail.py)
        mailbox, home = await call.services.sandboxes.mailbox(call.user), "/sandbox"
    message_id = request.path_params["message"]
    to = [a for a in _SEPARATORS.split(call.form.get("to", "")) if a]
    context: dict[str, Any] = {
        "mailbox": mailbox,
        "base": f"{home}/messages/{message_id}",
        "to": ", ".join(to),
    }
    try:
        done = await call.services.releases.release(call.user, mailbox, message_id, to)
    except (InvalidRequest, Forbidden, RateLimited, RelayError) as exc:
        # Said on the page with the address list kept, so a typo is fixed without retyping.
        return render(
            request, call, "release_result.html", status=exc.status, release=None, error=exc.message, **context
        )
    return render(request, call, "release_result.html", release=done, error="", **context)


routes = [
    Route("/mailboxes/{mailbox}/messages/{message}/release", release_message, methods=["POST"]),
    Route("/sandbox/messages/{message}/release", release_message, methods=["POST"]),
]
