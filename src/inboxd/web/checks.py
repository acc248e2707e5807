"""The message view's Checks tab: the report `CheckService` computes for the API, laid out for a
reader (the verdicts at a glance, then each part with its findings and its figures), and the
form that fetches the links again.

Nothing here judges: the verdicts, findings and figures are the service's; this module only
orders and words them for the page (`templates/message_checks.html`). Everything in a report
that comes from the mail (URLs, `where`, rspamd's descriptions) is text on the page, escaped by
the templates, never a link.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.http.pipeline import Call
from inboxd.model import Mailbox
from inboxd.web.pages import page, redirect

if TYPE_CHECKING:
    from inboxd.mail.checks.report import CheckReport, Finding

VERDICT_LABELS = {"error": "Error", "warning": "Warning", "ok": "OK", "skipped": "Not run"}
# Where each part's verdict comes from, said under its heading and in the README.
SOURCES = {
    "html": "Every HTML element, attribute and CSS property of the message looked up in caniemail's data "
    "(shipped with inboxd); a client's figure is the mean of its support of each feature.",
    "links": "Each link and image URL fetched by inboxd (HEAD, then GET), every redirect followed and "
    "checked; private addresses are refused unless INBOXD_LINK_CHECK_ALLOW_PRIVATE is set.",
    "spam": "rspamd's score, action and symbols for the raw message and its envelope (INBOXD_RSPAMD_URL).",
    "auth": "SPF for the client address, HELO and MAIL FROM recorded at reception; every DKIM signature "
    "and the ARC chain (dkimpy); DMARC from the From domain's policy; over INBOXD_DNS_NAMESERVERS.",
    "content": "inboxd's rules: unsubscribe headers, Message-ID and Date, a text part beside the HTML, "
    "Gmail's 102 KB clipping, alt text, cid: references, sender domains, 8-bit headers.",
}
PART_LABELS = {
    "html": "HTML compatibility",
    "links": "Links and images",
    "spam": "Spam score",
    "auth": "Authentication",
    "content": "Content",
}


@dataclass(frozen=True, slots=True)
class PartView:
    key: str
    label: str
    verdict: str
    verdict_label: str
    summary: str
    source: str
    reason: str
    findings: list[Finding]


def _count(findings: list[Finding]) -> str:
    errors = sum(f.severity == "error" for f in findings)
    warnings = sum(f.severity == "warning" for f in findings)
    said = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in ((errors, "error"), (warnings, "warning")) if n]
    return ", ".join(said) or "no problems"


def _num(value: float | None) -> str:
    return "?" if value is None else f"{round(value, 2):g}"


def _summaries(report: CheckReport) -> dict[str, str]:
    html, links, spam, auth, content = report.html, report.links, report.spam, report.auth, report.content
    broken = sum(f.code in ("link_broken", "link_redirect_loop") for f in links.findings)
    dkim = ", ".join(d.result for d in auth.dkim) or "none"
    return {
        "html": html.reason
        if html.verdict == "skipped" or html.support is None
        else f"{html.support:g}% support over {len(html.clients)} clients",
        "links": links.reason
        if links.verdict == "skipped"
        else f"{len(links.items)} URL{'s' if len(links.items) != 1 else ''}, {broken} broken",
        "spam": spam.reason
        if spam.score is None
        else f"score {_num(spam.score)} of {_num(spam.required)} ({spam.action})",
        "auth": auth.reason
        if auth.verdict == "skipped"
        else f"SPF {auth.spf.result if auth.spf else 'not run'}, DKIM {dkim}, "
        f"DMARC {auth.dmarc.result if auth.dmarc else 'not run'}",
        "content": f"{_count(content.findings)}; {content.size:,} bytes",
    }


def checks_context(report: CheckReport) -> dict[str, Any]:
    """What `message_checks.html` shows of `report`."""
    summaries = _summaries(report)
    parts = []
    for key in ("html", "links", "spam", "auth", "content"):
        part = getattr(report, key)
        parts.append(
            PartView(
                key=key,
                label=PART_LABELS[key],
                verdict=part.verdict,
                verdict_label=VERDICT_LABELS[part.verdict],
                summary=summaries[key],
                source=SOURCES[key],
                reason=getattr(part, "reason", ""),
                findings=list(part.findings),
            )
        )
    return {
        "report": report,
        "verdict_label": VERDICT_LABELS[report.verdict],
        "parts": parts,
        # The features some client does not fully support: the ones a reader acts on.
        "features": [f for f in report.html.features if f.support < 100],
        "symbols": sorted(report.spam.symbols, key=lambda s: (-abs(s.score), s.name)),
    }


async def _mailbox(call: Call, request: Request) -> Mailbox:
    """The mailbox the path names, or the user's sandbox for a caught message under `/sandbox`."""
    if "mailbox" not in request.path_params:
        return await call.services.sandboxes.mailbox(call.user)
    return await call.services.mailboxes.find(call.principal, request.path_params["mailbox"], scope="user")


async def message_checks(call: Call, mailbox: Mailbox, message_id: str) -> dict[str, Any]:
    """The tab's context: the kept report, or computed now (the first view computes it, as the API).
    The page itself is no operation; a report the service computes for it is one, admitted (the
    request rate, the monthly quota) and counted as the API's `GET …/checks` is."""
    services, user = call.services, call.user

    async def admit() -> None:
        await services.admission.admit(user, creates_mailbox=False)

    return checks_context(await services.checks.report(mailbox, message_id, admit=admit))


@page(operation=True)
async def recheck_links(request: Request, call: Call) -> Response:
    """Fetch the message's links again, past the link cache (the API's `?refresh=links`)."""
    mailbox = await _mailbox(call, request)
    message_id = request.path_params["message"]
    await call.services.checks.report(mailbox, message_id, refresh="links")
    home = "/sandbox" if "mailbox" not in request.path_params else f"/mailboxes/{mailbox.id}"
    return redirect(f"{home}/messages/{message_id}?tab=checks#ck-links")


# A caught message's form posts under /sandbox, where its page is (web/mail.py).
routes = [
    Route("/mailboxes/{mailbox}/messages/{message}/checks/links", recheck_links, methods=["POST"]),
    Route("/sandbox/messages/{message}/checks/links", recheck_links, methods=["POST"]),
]
