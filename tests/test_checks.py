"""Tests of the pure half of a message's checks (inboxd.mail.checks): the report's rules, HTML
compatibility against caniemail's shipped data, content checks, link extraction and `inboxd check`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from inboxd.mail.checks import (
    AuthPart,
    CheckReport,
    ContentPart,
    Finding,
    HtmlPart,
    LinkItem,
    LinksPart,
    SpamPart,
    caniemail,
    combine,
    extract_links,
    judge_html,
    judge_message,
    refresh,
    verdict_of,
)
from inboxd.mail.checks.html import detect_features
from inboxd.mail.parse import parse_message

CORPUS = Path(__file__).parent / "data" / "checks"
DATA = Path(caniemail.__file__).parent / "data"


def report_of(name: str) -> CheckReport:
    return judge_message((CORPUS / name).read_bytes())


def codes(findings: list[Finding]) -> list[str]:
    return sorted(f.code for f in findings)


# --- the corpus: each message's known findings ------------------------------------------------------

# The content codes each message of tests/data/checks must give, and no others.
EXPECTED_CONTENT = {
    "clean.eml": [],
    "outlook-css.eml": [],
    "missing-alt.eml": ["missing_alt"],
    "no-text-part.eml": ["missing_text_part"],
    "big-html.eml": ["html_clipped"],
    "broken-cid.eml": ["broken_cid"],
    "no-list-unsubscribe.eml": ["missing_list_unsubscribe"],
    "mailto-unsubscribe.eml": ["missing_one_click_unsubscribe"],
    "bad-date.eml": ["malformed_date"],
    "bad-headers.eml": [
        "malformed_message_id",
        "missing_date",
        "missing_list_unsubscribe",
        "reply_to_domain_differs",
        "reply_to_domain_differs",
        "unencoded_8bit_header",
    ],
}


def test_corpus_is_all_asserted() -> None:
    assert sorted(p.name for p in CORPUS.glob("*.eml")) == sorted(EXPECTED_CONTENT)


@pytest.mark.parametrize(("name", "expected"), sorted(EXPECTED_CONTENT.items()))
def test_content_findings_of_the_corpus(name: str, expected: list[str]) -> None:
    report = report_of(name)
    assert codes(report.content.findings) == expected
    assert report.content.verdict == verdict_of(report.content.findings)
    assert report.content.size == (CORPUS / name).stat().st_size


def test_unsupported_css_in_outlook() -> None:
    html = report_of("outlook-css.eml").html
    features = {f.slug: f for f in html.features}
    for slug in (
        "css-display-flex",
        "css-display-grid",
        "css-gap",
        "css-border-radius",
        "css-linear-gradient",
        "css-at-media-prefers-color-scheme",
        "css-object-fit",
        "css-background-image",
    ):
        assert slug in features, slug
    flex = features["css-display-flex"]
    outlook = [r for r in flex.results if (r.client, r.platform) == ("outlook", "windows")]
    assert outlook and outlook[0].support == "unsupported"
    assert flex.where == ["display: flex"]
    finding = next(f for f in html.findings if f.where == "display: flex")
    assert finding.severity == "warning" and finding.code == "html_unsupported"
    assert "Outlook Windows" in finding.message
    # Outlook on Windows is among the worst clients, and the list is sorted worst first.
    names = [c.name for c in html.clients]
    assert "Outlook Windows" in names[: len(names) // 2]
    assert [c.support for c in html.clients] == sorted(c.support for c in html.clients)
    assert all(0 < c.tested <= len(html.features) and c.unsupported + c.partial <= c.tested for c in html.clients)
    assert html.verdict == "warning"
    assert 0 < html.support < 100  # type: ignore[operator]
    assert html.support == round(sum(c.support for c in html.clients) / len(html.clients), 1)


def test_missing_alt_names_the_image() -> None:
    findings = report_of("missing-alt.eml").content.findings
    # alt="" marks a decorative image: only the image without alt is named.
    assert [(f.severity, f.where) for f in findings] == [("warning", "https://cdn.acme.example/week/1.jpg")]


def test_broken_cid_is_an_error_and_a_matching_one_is_not() -> None:
    report = report_of("broken-cid.eml")
    broken = [f for f in report.content.findings if f.code == "broken_cid"]
    # cid:logo@… names the image part, also percent-encoded and in another case; cid:banner@… names none.
    assert [(f.severity, f.where) for f in broken] == [("error", "cid:banner@acme.example")]
    assert report.content.verdict == "error" and report.verdict == "error"


def test_120_kb_html_is_clipped() -> None:
    content = report_of("big-html.eml").content
    assert content.html_size > 102 * 1024
    assert [f.severity for f in content.findings] == ["warning"]


def test_severities() -> None:
    severity = {(name, f.code): f.severity for name in EXPECTED_CONTENT for f in report_of(name).content.findings}
    by_code = {code: level for (_, code), level in severity.items()}
    for code in ("broken_cid", "missing_date", "malformed_date", "unencoded_8bit_header"):
        assert by_code[code] == "error", code
    for code in ("missing_alt", "missing_text_part", "html_clipped", "malformed_message_id", "reply_to_domain_differs"):
        assert by_code[code] == "warning", code
    # Unsubscribe headers are owed by bulk mail only: the weekly news (List-Id) is warned, the
    # message with bad headers (nothing marks it as bulk) is told (issue 34; it was a warning).
    assert severity[("no-list-unsubscribe.eml", "missing_list_unsubscribe")] == "warning"
    assert severity[("mailto-unsubscribe.eml", "missing_one_click_unsubscribe")] == "warning"
    assert severity[("bad-headers.eml", "missing_list_unsubscribe")] == "info"


def test_headers_named_where_they_apply() -> None:
    findings = report_of("bad-headers.eml").content.findings
    assert {(f.code, f.where) for f in findings} >= {
        ("unencoded_8bit_header", "Subject"),
        ("reply_to_domain_differs", "Reply-To"),
        ("reply_to_domain_differs", "Return-Path"),
    }


def test_one_click_unsubscribe_needs_both_headers() -> None:
    base = (CORPUS / "clean.eml").read_bytes()
    without_post = base.replace(b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\n", b"")
    assert codes(judge_message(without_post).content.findings) == ["missing_one_click_unsubscribe"]
    assert codes(judge_message(base).content.findings) == []


def test_message_id_missing() -> None:
    raw = (CORPUS / "clean.eml").read_bytes().replace(b"Message-ID: <receipt-1@acme.example>\n", b"")
    assert codes(judge_message(raw).content.findings) == ["missing_message_id"]


def test_envelope_sender_stands_for_return_path() -> None:
    from inboxd.mail.checks import judge_content

    raw = (CORPUS / "clean.eml").read_bytes()
    parsed = parse_message(raw)
    assert codes(judge_content(raw, parsed, mail_from="bounce@mail.acme.example").findings) == []
    assert codes(judge_content(raw, parsed, mail_from="b@sendgrid.example").findings) == ["reply_to_domain_differs"]


@pytest.mark.parametrize(
    ("from_domain", "reply_domain", "differs"),
    [
        ("shop.co.uk", "help.shop.co.uk", False),  # one organization under a two-label suffix
        ("victim.github.io", "attacker.github.io", True),  # github.io is a (private) public suffix
        ("mail.example.com", "example.com", False),
        ("example.com", "example.net", True),
    ],
)
def test_reply_to_is_compared_by_organization_through_the_public_suffix_list(
    from_domain: str, reply_domain: str, differs: bool
) -> None:
    from inboxd.mail.checks import judge_content

    raw = (CORPUS / "clean.eml").read_bytes()
    raw = raw.replace(b"billing@acme.example", f"billing@{from_domain}".encode())
    raw = raw.replace(b"support@help.acme.example", f"support@{reply_domain}".encode())
    found = codes(judge_content(raw, parse_message(raw), mail_from=f"bounce@{from_domain}").findings)
    assert ("reply_to_domain_differs" in found) is differs, found


def test_large_message() -> None:
    raw = (CORPUS / "no-list-unsubscribe.eml").read_bytes() + b"x" * (10 * 1024 * 1024)
    assert "message_too_large" in codes(judge_message(raw).content.findings)


# --- the report's rules ------------------------------------------------------------------------------


def test_verdicts_are_the_worst_finding_and_the_worst_judged_part() -> None:
    info = Finding(severity="info", code="x", message="x")
    warning = Finding(severity="warning", code="y", message="y")
    error = Finding(severity="error", code="z", message="z")
    assert verdict_of([]) == "ok" and verdict_of([info]) == "ok"
    assert verdict_of([info, warning]) == "warning" and verdict_of([warning, error, info]) == "error"
    content = ContentPart(verdict="warning", size=1, html_size=0, findings=[warning])
    report = combine(
        HtmlPart(verdict="skipped", reason="no HTML"),
        LinksPart(verdict="error", findings=[error]),
        SpamPart(verdict="skipped", configured=False, reason="not configured"),
        AuthPart(verdict="ok"),
        content,
    )
    assert report.verdict == "error"
    everything_skipped_but_content = combine(
        HtmlPart(verdict="skipped"),
        LinksPart(verdict="skipped"),
        SpamPart(verdict="skipped", configured=False),
        AuthPart(verdict="skipped"),
        content,
    )
    assert everything_skipped_but_content.verdict == "warning"


def test_parts_not_run_are_skipped_never_faked() -> None:
    report = report_of("clean.eml")
    assert report.spam.verdict == "skipped" and report.spam.configured is False and report.spam.reason
    assert report.spam.score is None and report.spam.symbols == []
    assert (
        report.auth.verdict == "skipped" and report.auth.spf is None and report.auth.dkim == [] and report.auth.reason
    )
    assert report.links.verdict == "skipped" and report.links.reason
    assert all(item.status is None for item in report.links.items)
    text_only = report_of("no-list-unsubscribe.eml").html
    assert text_only.verdict == "skipped" and text_only.support is None and text_only.reason


def test_report_json_round_trips_in_the_issue_shape() -> None:
    report = report_of("outlook-css.eml")
    data = json.loads(msgspec.json.encode(report))
    assert set(data) == {"verdict", "html", "links", "spam", "auth", "content"}
    assert {"verdict", "support", "clients", "features", "findings"} <= set(data["html"])
    assert {"client", "platform", "support"} <= set(data["html"]["clients"][0])
    assert {"verdict", "configured", "score", "required", "action", "symbols", "findings"} <= set(data["spam"])
    assert {"verdict", "spf", "dkim", "dmarc", "arc", "authentication_results", "findings"} <= set(data["auth"])
    assert set(data["links"]["items"][0]) >= {"url", "kind", "status", "final_url", "ms", "error"}
    assert set(data["content"]["findings"][0] if data["content"]["findings"] else {}) <= {
        "severity",
        "code",
        "message",
        "where",
    }
    assert msgspec.json.decode(msgspec.json.encode(report), type=CheckReport) == report


# --- HTML features -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("html", "slug", "where"),
    [
        ("<video src='a.mp4'></video>", "html-video", "<video>"),
        ("<ul><li>a</li></ul>", "html-lists", "<ul>"),
        ("<section>a</section>", "html-semantics", "<section>"),
        ("<input type='checkbox'>", "html-input-checkbox", '<input type="checkbox">'),
        ("<table cellpadding='0'></table>", "html-cellpadding", "<table cellpadding>"),
        ("<p aria-label='x'>a</p>", "html-aria-label", "<p aria-label>"),
        ("<a href='#top'>top</a>", "html-anchor-links", '<a href="#top">'),
        ("<img src='a.png' loading='lazy'>", "html-loading-attribute", "<img loading>"),
        ("<img src='https://x.example/a.webp'>", "image-webp", "<img src>"),
        ("<img src='data:image/png;base64,iVBO'>", "image-base64", "<img src>"),
        ("<div style='margin-top:4px'></div>", "css-margin", "margin-top"),
        ("<div style='border-top-left-radius:4px'></div>", "css-border-radius", "border-top-left-radius"),
        ("<div style='margin-inline-start:4px'></div>", "css-margin-inline-start-end", "margin-inline-start"),
        ("<div style='display:flex'></div>", "css-display-flex", "display: flex"),
        ("<div style='width:calc(100% - 2px)'></div>", "css-unit-calc", "calc()"),
        ("<div style='color:rgb(1,2,3)'></div>", "css-rgb", "rgb()"),
        ("<div style='width:50vw'></div>", "css-unit-vw", "vw"),
        ("<div style='color:red !important'></div>", "css-important", "color: … !important"),
        ("<div style='--brand:red'></div>", "css-variables", "--brand"),
        ("<div style='background:url(a.gif)'></div>", "image-gif", "url(a.gif)"),
        (
            "<style>@media (prefers-color-scheme: dark) { p { color: red } }</style>",
            "css-at-media-prefers-color-scheme",
            "@media (prefers-color-scheme)",
        ),
        ("<style>@font-face { font-family: X; src: url(x.woff2) }</style>", "css-at-font-face", "@font-face"),
        ("<style>a:hover { color: red }</style>", "css-pseudo-class-hover", ":hover"),
        ("<style>p::before { content: '' }</style>", "css-pseudo-element-before", ":before"),
        ("<style>td > p { color: red }</style>", "css-selector-child", "td > p"),
        ("<style>td p { color: red }</style>", "css-selector-descendant", "td p"),
        ("<style>p.note { color: red }</style>", "css-selector-chaining", "p.note"),
        ("<style>[lang] { color: red }</style>", "css-selector-attribute", "[lang]"),
        ("<style>/* dark */ p { color: red }</style>", "css-comments", "/* */"),
    ],
)
def test_features_detected(html: str, slug: str, where: str) -> None:
    counts, places = detect_features(html)
    assert counts[slug] >= 1, sorted(counts)
    assert where in places[slug]
    assert slug in caniemail.load().features


def test_plain_markup_uses_no_advanced_feature() -> None:
    counts, _ = detect_features("<p>Hello <strong>there</strong></p>")
    assert set(counts) == {"html-p", "html-strong"}  # no body or doctype written, no CSS
    assert "css-selector-descendant" not in detect_features("<style>p, td { color: red }</style>")[0]


def test_hostile_css_and_markup_are_bounded() -> None:
    part = judge_html("<div style='" + "color:red;" * 10_000 + "'>" + "<b>" * 20_000 + "</div><style>{{{{")
    assert part.verdict in ("ok", "warning")
    assert "html_partly_analysed" not in codes(part.findings)
    # Past 128 KB of CSS the rest is not read, and the part says so.
    huge = "".join(f"<p style='margin:{i}px;color:#{i:06x}'>x</p>" for i in range(6_000))
    huge += "<p style='display:flex'>late</p>"
    part = judge_html(huge)
    assert "html_partly_analysed" in codes(part.findings)
    assert "css-display-flex" not in {f.slug for f in part.features}


def test_notes_come_with_partial_support() -> None:
    data = caniemail.load()
    noted = [r for f in data.features.values() for r in f.results if r.notes]
    assert noted and all(isinstance(n, str) and n for r in noted for n in r.notes)


# --- the shipped data --------------------------------------------------------------------------------


def test_data_ships_with_its_notice() -> None:
    notice = (DATA / "NOTICE").read_text()
    data = caniemail.load()
    assert "MIT License" in notice and "hteumeuleu/caniemail" in notice
    assert data.version and data.version in notice
    assert len(data.features) > 250 and len(data.clients) > 30


def test_refresh_compacts_to_the_latest_version(tmp_path: Path) -> None:
    source = {
        "api_version": "1.0.4",
        "last_update_date": "2030-01-02 03:04:05 +0000",
        "nicenames": {"family": {"outlook": "Outlook"}, "platform": {"windows": "Windows"}, "support": {}},
        "data": [
            {
                "slug": "css-display-flex",
                "title": "display:flex",
                "url": "https://www.caniemail.com/x/",
                "category": "css",
                "description": "long text not kept",
                "notes_by_num": {"1": "Buggy."},
                "stats": {"outlook": {"windows": {"2016": "n", "2019": "a #1"}}},
            }
        ],
    }
    (tmp_path / "data.json").write_text(json.dumps(source))
    out = tmp_path / "out"
    assert refresh.main([str(tmp_path / "data.json"), "a test file"], out_dir=out) == 0
    written = json.loads((out / "caniemail.json").read_text())
    assert written["features"][0]["stats"] == {"outlook": {"windows": ["2019", "a #1"]}}
    assert "description" not in written["features"][0]
    notice = (out / "NOTICE").read_text()
    assert "2030-01-02 03:04:05 +0000" in notice and "a test file" in notice


# --- links --------------------------------------------------------------------------------------------


def test_links_and_images_of_both_bodies_and_list_unsubscribe() -> None:
    raw = (
        (CORPUS / "clean.eml")
        .read_bytes()
        .replace(
            b"<p>Thanks", b"<div style=\"background-image:url('https://cdn.acme.example/bg.jpg')\"></div><p>Thanks"
        )
    )
    items = extract_links(parse_message(raw))
    assert [(i.url, i.kind, i.source) for i in items] == [
        ("https://cdn.acme.example/logo.png", "image", "html"),
        ("https://cdn.acme.example/bg.jpg", "image", "html"),
        ("https://acme.example/receipts/1", "link", "html"),
        ("https://cdn.acme.example/spacer.gif", "image", "html"),
        ("https://acme.example/unsubscribe/u1", "link", "list-unsubscribe"),
    ]
    assert all(isinstance(i, LinkItem) and i.status is None for i in items)


def test_links_of_a_text_body() -> None:
    items = extract_links(parse_message(b"Subject: x\n\nSee https://example.com/a, and mailto:x@y.\n"))
    assert [(i.url, i.kind, i.source) for i in items] == [("https://example.com/a", "link", "text")]


# --- inboxd check -------------------------------------------------------------------------------------


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inboxd", "check", *args],
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_command_exits_1_on_errors() -> None:
    bad = check(str(CORPUS / "broken-cid.eml"))
    assert bad.returncode == 1, bad.stderr
    assert "verdict error" in bad.stdout and "content/broken_cid [cid:banner@acme.example]" in bad.stdout
    assert "spam     skipped" in bad.stdout and "auth     skipped" in bad.stdout


def test_check_command_passes_a_message_with_warnings_only() -> None:
    done = check(str(CORPUS / "outlook-css.eml"))
    assert done.returncode == 0, done.stderr
    assert "Outlook Windows" in done.stdout and "html/html_unsupported" in done.stdout


def test_check_command_json_is_the_report() -> None:
    done = check("--json", str(CORPUS / "bad-headers.eml"))
    assert done.returncode == 1, done.stderr
    report = msgspec.json.decode(done.stdout, type=CheckReport)
    expected = judge_message((CORPUS / "bad-headers.eml").read_bytes())
    # Without a nameserver the authentication part says how to get one (tests/test_check_command.py).
    assert msgspec.structs.replace(report, auth=expected.auth) == expected
    assert report.auth.verdict == "skipped" and "--dns" in report.auth.reason
    assert report.spam.configured is False


def test_check_command_on_a_missing_file() -> None:
    done = check("/nonexistent/message.eml")
    assert done.returncode == 2 and "does not exist" in done.stderr


def test_eight_bit_bytes_in_a_folded_header_and_not_in_the_body() -> None:
    raw = (
        b"From: a@x.example\r\nDate: Tue, 14 May 2024 10:00:00 +0000\r\nMessage-ID: <a@x.example>\r\n"
        b"X-Note: first line\r\n  caf\xc3\xa9 on the second\r\nSubject: =?utf-8?q?caf=C3=A9?=\r\n\r\n"
        b"caf\xc3\xa9 in the body is fine\r\n"
    )
    findings = [f for f in judge_message(raw).content.findings if f.code == "unencoded_8bit_header"]
    assert [(f.severity, f.where) for f in findings] == [("error", "X-Note")]
