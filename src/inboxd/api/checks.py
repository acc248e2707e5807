"""`/api/accounts/{mailbox}/messages/{id}/checks`: a message's check report (issue 24), whole or one
part; `/api/user/sandbox/messages/{id}/checks` the same for a message the SMTP sandbox caught (an
API token reaches the sandbox only under `/api/user/sandbox`). Computed at the first request and
kept (services/checks/reports.py); `?refresh=links` fetches the links again, `?refresh=spam` asks
rspamd again."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.api.openapi import Query, describe
from inboxd.errors import InvalidRequest
from inboxd.http.pipeline import Call, endpoint
from inboxd.http.responses import json_response
from inboxd.mail.checks.report import AuthPart, CheckReport, ContentPart, HtmlPart, LinksPart, SpamPart
from inboxd.services.checks.reports import Refresh
from inboxd.services.mailboxes import Scope

_REFRESH = Query(
    "refresh",
    str,
    "`links`: fetch the message's links again, past the link cache; `spam`: ask rspamd again. The new "
    "report is kept (the other parts stay as kept). Without it a kept report is answered as it is, "
    "but for its spam part when it was computed before rspamd was configured: that is computed again.",
)
_DESCRIPTION = (
    "Computed at the first request and kept; findings are `{severity, code, message, where}`, a part's "
    "verdict its worst finding, the report's its worst judged part. A part that could not be judged is "
    "`skipped` with a `reason` (spam without INBOXD_RSPAMD_URL, SPF for mail received before the client "
    "address was recorded). A part that did not finish within INBOXD_ANALYSIS_BUDGET answers what it "
    "has with an `analysis_cut` finding, and the report is not kept. See the README's Checks section "
    "for every code."
)
_ERRORS = (400, 404, 410)


def _refresh(request: Request) -> Refresh:
    value = request.query_params.get("refresh", "")
    if value == "":
        return None
    if value == "links":
        return "links"
    if value == "spam":
        return "spam"
    raise InvalidRequest("`refresh` must be `links` or `spam`.")


async def _report(request: Request, call: Call, *, scope: Scope = "token") -> CheckReport:
    mailbox = await call.services.mailboxes.find(call.principal, request.path_params["mailbox"], scope=scope)
    return await call.services.checks.report(mailbox, request.path_params["id"], refresh=_refresh(request))


@describe(
    "Check a message",
    tag="messages",
    description=_DESCRIPTION,
    response=CheckReport,
    query=(_REFRESH,),
    errors=_ERRORS,
    extension=True,
)
@endpoint(mailbox_token=True)
async def get_checks(request: Request, call: Call) -> Response:
    return json_response(await _report(request, call))


@describe(
    "Check a message: HTML compatibility",
    tag="messages",
    response=HtmlPart,
    query=(_REFRESH,),
    errors=_ERRORS,
    extension=True,
)
@endpoint(mailbox_token=True)
async def get_checks_html(request: Request, call: Call) -> Response:
    return json_response((await _report(request, call)).html)


@describe(
    "Check a message: links and images",
    tag="messages",
    response=LinksPart,
    query=(_REFRESH,),
    errors=_ERRORS,
    extension=True,
)
@endpoint(mailbox_token=True)
async def get_checks_links(request: Request, call: Call) -> Response:
    return json_response((await _report(request, call)).links)


@describe(
    "Check a message: spam score", tag="messages", response=SpamPart, query=(_REFRESH,), errors=_ERRORS, extension=True
)
@endpoint(mailbox_token=True)
async def get_checks_spam(request: Request, call: Call) -> Response:
    return json_response((await _report(request, call)).spam)


@describe(
    "Check a message: authentication",
    tag="messages",
    response=AuthPart,
    query=(_REFRESH,),
    errors=_ERRORS,
    extension=True,
)
@endpoint(mailbox_token=True)
async def get_checks_auth(request: Request, call: Call) -> Response:
    return json_response((await _report(request, call)).auth)


@describe(
    "Check a message: content", tag="messages", response=ContentPart, query=(_REFRESH,), errors=_ERRORS, extension=True
)
@endpoint(mailbox_token=True)
async def get_checks_content(request: Request, call: Call) -> Response:
    return json_response((await _report(request, call)).content)


@describe(
    "Check a message of any of the user's mailboxes",
    tag="pro",
    description="As `GET /api/accounts/{mailbox}/messages/{id}/checks`, for a mailbox made in the dashboard "
    "or with another token. " + _DESCRIPTION,
    response=CheckReport,
    query=(_REFRESH,),
    errors=_ERRORS,
    extension=True,
)
@endpoint(pro=True)
async def get_account_checks(request: Request, call: Call) -> Response:
    return json_response(await _report(request, call, scope="user"))


@describe(
    "Check a message the SMTP sandbox caught",
    tag="sandbox",
    description=_DESCRIPTION,
    response=CheckReport,
    query=(_REFRESH,),
    errors=_ERRORS,
    extension=True,
)
@endpoint(pro=True)
async def get_sandbox_checks(request: Request, call: Call) -> Response:
    mailbox = await call.services.sandboxes.mailbox(call.principal.user)
    report = await call.services.checks.report(mailbox, request.path_params["id"], refresh=_refresh(request))
    return json_response(report)


_BASE = "/api/accounts/{mailbox}/messages/{id}/checks"
routes = [
    Route(_BASE, get_checks, methods=["GET"]),
    Route("/api/user/accounts/{mailbox}/messages/{id}/checks", get_account_checks, methods=["GET"]),
    Route(f"{_BASE}/html", get_checks_html, methods=["GET"]),
    Route(f"{_BASE}/links", get_checks_links, methods=["GET"]),
    Route(f"{_BASE}/spam", get_checks_spam, methods=["GET"]),
    Route(f"{_BASE}/auth", get_checks_auth, methods=["GET"]),
    Route(f"{_BASE}/content", get_checks_content, methods=["GET"]),
]
# Listed after the sandbox's own routes (api/app.py), under its tag.
sandbox_routes = [Route("/api/user/sandbox/messages/{id}/checks", get_sandbox_checks, methods=["GET"])]
