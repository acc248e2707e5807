"""A report as plain text for a terminal (``inboxd check``)."""

from __future__ import annotations

from inboxd.mail.checks.report import CheckReport

__all__ = ["render_text"]

_WORST_CLIENTS = 5


def render_text(report: CheckReport, name: str = "") -> str:
    lines = [f"{name + ': ' if name else ''}verdict {report.verdict}"]
    html = report.html
    if html.verdict == "skipped":
        lines.append(f"html     skipped: {html.reason}")
    else:
        lines.append(
            f"html     {html.verdict}: {html.support}% support over {len(html.clients)} clients "
            f"(caniemail data {html.data_version})"
        )
        worst = ", ".join(f"{c.name} {c.support}%" for c in html.clients[:_WORST_CLIENTS])
        if worst:
            lines.append(f"         worst clients: {worst}")
    links = report.links
    if links.verdict == "skipped":
        lines.append(f"links    skipped: {links.reason}; {len(links.items)} URL(s) found")
    else:
        lines.append(f"links    {links.verdict}: {len(links.items)} URL(s)")
    spam = report.spam
    lines.append(
        f"spam     skipped: {spam.reason}"
        if spam.verdict == "skipped"
        else f"spam     {spam.verdict}: score {spam.score} of {spam.required} ({spam.action})"
    )
    auth = report.auth
    if auth.verdict == "skipped":
        lines.append(f"auth     skipped: {auth.reason}")
    else:
        spf = "not run" if auth.spf is None else auth.spf.result
        dmarc = "not run" if auth.dmarc is None else auth.dmarc.result
        dkim = ", ".join(f"{d.result} (d={d.domain} s={d.selector})" for d in auth.dkim) or "no signature"
        arc = "not run" if auth.arc is None else auth.arc.result
        lines.append(f"auth     {auth.verdict}: DKIM {dkim}; ARC {arc}; SPF {spf}; DMARC {dmarc}")
    content = report.content
    lines.append(f"content  {content.verdict}: {content.size} bytes, HTML {content.html_size} bytes")
    findings = report.findings()
    if findings:
        lines.append("")
    for part, finding in findings:
        where = f" [{finding.where}]" if finding.where else ""
        lines.append(f"{finding.severity:<7} {part}/{finding.code}{where}: {finding.message}")
    return "\n".join(lines)
