"""The message HTML shown in the browser is inert: the cleaning layer on its own (the browser tests
check the CSP layer and that nothing runs or leaves in a real browser)."""

from __future__ import annotations

import base64

import pytest

from inboxd.mail.html_view import MAX_HTML_CHARS, content_security_policy, render

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

HOSTILE = [
    ("<script>alert(1)</script><p>x</p>", "<script"),
    ('<img src="x" onerror="alert(1)">', "onerror"),
    ('<a href="javascript:alert(1)">x</a>', "javascript:"),
    ('<a href=" JaVaScRiPt:alert(1)">x</a>', "alert"),
    ('<meta http-equiv="refresh" content="0;url=https://evil.example/">', "refresh"),
    ('<base href="https://evil.example/">', "<base"),
    ('<form action="https://evil.example/"><input name="q"></form>', "<form"),
    ('<iframe src="https://evil.example/"></iframe>', "<iframe"),
    ('<object data="https://evil.example/x.swf"></object>', "<object"),
    ("<svg><script>alert(1)</script></svg>", "<script"),
    ('<link rel="stylesheet" href="https://evil.example/x.css">', "<link"),
    ('<a href="data:text/html,<script>alert(1)</script>">x</a>', "data:text/html"),
    ('<div onmouseover="alert(1)">x</div>', "onmouseover"),
    ('<img src="https://tracker.example/pixel.gif">', "tracker.example"),
]


@pytest.mark.parametrize(("markup", "absent"), HOSTILE)
def test_hostile_markup_is_removed(markup: str, absent: str) -> None:
    # Between harmless paragraphs that must survive: an empty render would remove the threat too.
    document = render(f"<p>Before the trap.</p>{markup}<p>After the trap.</p>", {}, allow_remote=False).document
    assert absent.lower() not in document.lower()
    assert "<p>Before the trap.</p>" in document and "<p>After the trap.</p>" in document


def test_links_open_in_a_new_tab_without_referrer() -> None:
    document = render('<a href="https://example.com/verify?t=1">Verify</a>', {}, allow_remote=False).document
    assert 'href="https://example.com/verify?t=1"' in document
    assert 'target="_blank"' in document
    assert 'rel="noopener noreferrer"' in document


def test_cid_images_become_data_urls_of_the_own_parts() -> None:
    safe = render('<img src="cid:logo@x"><img src="cid:missing">', {"logo@x": ("image/png", PNG)}, allow_remote=False)
    assert f'src="data:image/png;base64,{base64.b64encode(PNG).decode()}"' in safe.document
    assert "cid:missing" not in safe.document


def test_cid_of_a_non_image_is_not_inlined() -> None:
    safe = render('<img src="cid:page">', {"page": ("text/html", b"<script>alert(1)</script>")}, allow_remote=False)
    assert "data:" not in safe.document


def test_remote_images_are_counted_and_dropped_unless_asked_for() -> None:
    markup = '<img src="https://a.example/1.png"><img src="//b.example/2.png"><p style="color:red">hi</p>'
    blocked = render(markup, {}, allow_remote=False)
    assert blocked.remote_blocked == 2
    assert "a.example" not in blocked.document and "b.example" not in blocked.document
    assert 'style="color:red"' in blocked.document
    allowed = render(markup, {}, allow_remote=True)
    assert allowed.remote_blocked == 0
    assert 'src="https://a.example/1.png"' in allowed.document


def test_the_policy_sandboxes_and_blocks_fetches_unless_allowed() -> None:
    strict = content_security_policy(allow_remote=False)
    assert strict.startswith("sandbox ")
    assert "allow-scripts" not in strict and "allow-same-origin" not in strict
    assert "default-src 'none'" in strict
    assert "http" not in strict.replace("sandbox allow-popups allow-popups-to-escape-sandbox", "")
    assert "https:" in content_security_policy(allow_remote=True)


def test_huge_bodies_are_cut_and_say_so() -> None:
    safe = render("<p>" + "x" * (MAX_HTML_CHARS + 10) + "</p>", {}, allow_remote=False)
    assert safe.truncated
    assert len(safe.document) < MAX_HTML_CHARS + 500
    assert not render("<p>short</p>", {}, allow_remote=False).truncated


def test_remote_css_is_taken_out_unless_asked_for() -> None:
    markup = (
        "<style>body { background: url(https://t.example/bg.png) } @import 'https://t.example/x.css';</style>"
        "<div style=\"background-image: url('//t.example/s.png'); color: red\">x</div>"
        "<p>see url(https://example.com/) in text</p>"
    )
    blocked = render(markup, {}, allow_remote=False)
    assert "t.example" not in blocked.document
    assert blocked.remote_blocked == 3
    assert "color: red" in blocked.document
    assert "see url(https://example.com/) in text" in blocked.document
    assert "t.example/bg.png" in render(markup, {}, allow_remote=True).document
