"""`msg.checks()` and `msg.assert_checks(...)` on the messages the `mailbox` and `sandbox` fixtures
return: the server's check report (issue 24), and one assertion over it that lists every shortfall.

A part the server could not judge (spam without INBOXD_RSPAMD_URL, DKIM for a message it could not
verify, the HTML support of a message without HTML) is ``skipped`` with a reason. An assertion that
needs a skipped part fails and gives that reason: a check that did not run never passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Literal, overload

from inboxd.client import Client, Message, SandboxMessage

if TYPE_CHECKING:
    from inboxd.mail.checks.report import CheckReport, Finding

__all__ = ["CheckableMessage", "CheckableSandboxMessage", "shortfalls", "with_checks"]

Level = Literal["ok", "no-errors"]
_LEVELS = ("ok", "no-errors")
_SHOWN = 5  # findings quoted per shortfall


def _level_shortfall(name: str, wanted: Level, verdict: str, reason: str, found: list[Finding]) -> str | None:
    if wanted not in _LEVELS:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, _LEVELS))}, not {wanted!r}")
    if verdict == "skipped":
        return f"{name}: wanted {wanted!r}, but the part was skipped: {reason or 'no reason given'}"
    bad = [f for f in found if f.severity == "error" or (wanted == "ok" and f.severity == "warning")]
    if not bad:
        return None
    quoted = "; ".join(f"{f.severity} {f.code}{f' at {f.where}' if f.where else ''}" for f in bad[:_SHOWN])
    more = f" (and {len(bad) - _SHOWN} more)" if len(bad) > _SHOWN else ""
    return f"{name}: wanted {wanted!r}, got {verdict!r}: {quoted}{more}"


def shortfalls(
    report: CheckReport,
    *,
    html_support: float | None = None,
    spam_score_below: float | None = None,
    links: Level | None = None,
    dkim: Literal["pass"] | None = None,
    content: Level | None = None,
) -> list[str]:
    """What in `report` falls short of each given requirement, one line each; [] when all hold.

    `html_support`: the HTML part's overall support (percent) is at least this. `spam_score_below`:
    rspamd's score is below this. `links` / `content`: ``"ok"`` (no error or warning finding) or
    ``"no-errors"`` (warnings allowed). `dkim="pass"`: the message carries at least one DKIM
    signature and every signature passes."""
    out: list[str] = []
    if html_support is not None:
        html = report.html
        if html.verdict == "skipped" or html.support is None:
            out.append(f"html_support: wanted at least {html_support:g}%, but the part was skipped: {html.reason}")
        elif html.support < html_support:
            worst = ", ".join(f"{c.name} {c.support:g}%" for c in html.clients[:3])
            out.append(f"html_support: {html.support:g}% is below {html_support:g}% (worst: {worst})")
    if spam_score_below is not None:
        spam = report.spam
        if not spam.configured:
            out.append(f"spam_score_below: spam is not configured on the server, so there is no score ({spam.reason})")
        elif spam.score is None:
            out.append(f"spam_score_below: rspamd gave no score: {spam.reason or spam.verdict}")
        elif spam.score >= spam_score_below:
            top = sorted(spam.symbols, key=lambda s: -s.score)[:3]
            why = ", ".join(f"{s.name} {s.score:g}" for s in top if s.score > 0)
            out.append(
                f"spam_score_below: score {spam.score:g} is not below {spam_score_below:g}"
                + (f" (top symbols: {why})" if why else "")
            )
    if links is not None:
        line = _level_shortfall("links", links, report.links.verdict, report.links.reason, report.links.findings)
        if line:
            out.append(line)
    if dkim is not None:
        if dkim != "pass":
            raise ValueError(f"dkim must be 'pass', not {dkim!r}")
        auth = report.auth
        if auth.verdict == "skipped":
            out.append(f"dkim: wanted 'pass', but authentication was skipped: {auth.reason}")
        elif not auth.dkim:
            out.append("dkim: wanted 'pass', but the message has no DKIM signature")
        else:
            failed = [s for s in auth.dkim if s.result != "pass"]
            if failed:
                out.append(
                    "dkim: wanted 'pass', got "
                    + "; ".join(
                        f"{s.result} for d={s.domain} s={s.selector}{f' ({s.error})' if s.error else ''}"
                        for s in failed
                    )
                )
    if content is not None:
        c = report.content
        line = _level_shortfall("content", content, c.verdict, "", c.findings)
        if line:
            out.append(line)
    return out


class _Checks:
    """The two methods; the message classes below carry the client and the mailbox they need."""

    __slots__ = ()
    _checks_client: Client | None
    _checks_mailbox: str
    subject: str
    id: str

    def checks(self, *, refresh_links: bool = False) -> CheckReport:
        """The message's check report (computed by the server at the first request, then kept);
        `refresh_links=True` fetches its links again."""
        if self._checks_client is None:
            raise RuntimeError("this message was not returned by an inboxd fixture")
        if not self._checks_mailbox:  # the sandbox: an API token reaches it under /api/user/sandbox
            return self._checks_client.sandbox_checks(self.id, refresh_links=refresh_links)
        return self._checks_client.checks(self._checks_mailbox, self.id, refresh_links=refresh_links)

    def assert_checks(
        self,
        *,
        html_support: float | None = None,
        spam_score_below: float | None = None,
        links: Level | None = None,
        dkim: Literal["pass"] | None = None,
        content: Level | None = None,
    ) -> CheckReport:
        """Fails the test, listing exactly what fell short, unless every given requirement holds
        (see `shortfalls`); returns the report. A requirement on a skipped part fails with the
        part's reason (spam not configured, say)."""
        __tracebackhide__ = True
        report = self.checks()
        missing = shortfalls(
            report,
            html_support=html_support,
            spam_score_below=spam_score_below,
            links=links,
            dkim=dkim,
            content=content,
        )
        if missing:
            raise AssertionError(
                f"inboxd: message {self.subject!r} fell short of its checks:\n"
                + "\n".join(f"  - {line}" for line in missing)
            )
        return report


@dataclass(frozen=True, slots=True)
class CheckableMessage(_Checks, Message):
    """A `Message` with `checks()` and `assert_checks()`."""

    _checks_client: Client | None = field(default=None, repr=False, compare=False)
    _checks_mailbox: str = field(default="", repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class CheckableSandboxMessage(_Checks, SandboxMessage):
    """A `SandboxMessage` with `checks()` and `assert_checks()`."""

    _checks_client: Client | None = field(default=None, repr=False, compare=False)
    _checks_mailbox: str = field(default="", repr=False, compare=False)


@overload
def with_checks(message: SandboxMessage, client: Client, mailbox: str) -> CheckableSandboxMessage: ...
@overload
def with_checks(message: Message, client: Client, mailbox: str) -> CheckableMessage: ...
def with_checks(
    message: Message | SandboxMessage, client: Client, mailbox: str
) -> CheckableMessage | CheckableSandboxMessage:
    """`message` as its checkable subclass, asking `client` about `mailbox` (an id or address; ""
    for the user's SMTP sandbox)."""
    values = {f.name: getattr(message, f.name) for f in fields(message) if not f.name.startswith("_checks")}
    if isinstance(message, SandboxMessage):
        return CheckableSandboxMessage(**values, _checks_client=client, _checks_mailbox=mailbox)
    return CheckableMessage(**values, _checks_client=client, _checks_mailbox=mailbox)
