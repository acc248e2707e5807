"""Each mail-analysis step is linear and bounded on hostile input (issue 34): URL trimming, the HTML
nesting guard before every parser, the remote-CSS stripper, CSS nesting, the code finder and the
Subject. The reproductions of the issue are here as inputs; the tests marked ``alone`` compare the
CPU time of a step at twice an input's size with its time at the size (a ratio, never a wall-clock
bound: quadratic steps give about 4, linear ones about 2)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest
from selectolax.lexbor import LexborHTMLParser

from inboxd.mail.checks import judge_html, parse_html
from inboxd.mail.checks.css import inline_style, stylesheet
from inboxd.mail.codes import find_codes, find_links
from inboxd.mail.decoding import MAX_SUBJECT
from inboxd.mail.html_guard import MAX_DEPTH, guard_html
from inboxd.mail.html_lines import MAX_URL_CHARS, render_html, trim_url
from inboxd.mail.html_text import html_to_text
from inboxd.mail.html_view import render, visible_text
from inboxd.mail.parse import parse_message
from inboxd.mail.remote_css import strip_remote_css

# --- the ratio ----------------------------------------------------------------------------------------


def _cpu(step: Callable[[], object]) -> float:
    """The least CPU time of three runs (the machine is shared: the least is the step's own cost),
    with the cyclic collector held off: its full collections scale with every object the process
    holds, not with the step's input, and would be counted against the larger input."""
    best = float("inf")
    for _ in range(3):
        gc.collect()
        gc.disable()
        try:
            started = time.process_time()
            step()
            best = min(best, time.process_time() - started)
        finally:
            gc.enable()
    return best


# Time at 2x the input over time at 1x: a linear step gives 2, a quadratic one 4. Measured on an
# idle machine some linear steps over large strings give up to 3.4 (the nested-<div> view, stray
# end tags, remote CSS in <style>: allocation and cache effects of the larger buffers, found at the
# end of issue 34's session and not yet explained), so the bound sits between that and quadratic.
LINEAR = 3.6


def growth(step: Callable[[str], object], make: Callable[[int], str], size: int) -> float:
    """CPU time of ``step(make(2 * size))`` over that of ``step(make(size))``."""
    small, large = make(size), make(2 * size)
    return _cpu(lambda: step(large)) / max(_cpu(lambda: step(small)), 1e-4)


def _depth(html: str | LexborHTMLParser) -> int:
    """How deep the tree an HTML5 parser builds of ``html`` goes (walked without recursion)."""
    root = (LexborHTMLParser(html) if isinstance(html, str) else html).root
    deepest = 0
    stack = [(root, 0)] if root is not None else []
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        child = node.child
        while child is not None:
            stack.append((child, depth + 1))
            child = child.next
    return deepest


# --- 1. URL trimming --------------------------------------------------------------------------------


def test_trim_url_keeps_balanced_parentheses_and_drops_punctuation() -> None:
    assert (
        trim_url("https://en.wikipedia.org/wiki/Mail_(protocol))).") == "https://en.wikipedia.org/wiki/Mail_(protocol)"
    )
    assert trim_url("https://x.example/a,;:!?'\"") == "https://x.example/a"
    assert trim_url("https://x.example/" + ")" * 5000) == "https://x.example/"


def test_a_url_over_the_cap_is_no_link() -> None:
    long = "https://x.example/" + "a" * MAX_URL_CHARS
    fine = "https://x.example/" + "a" * 100
    assert find_links(f"{long} and {fine}", "") == find_links(fine, "")
    assert [link.url for link in find_links("", f"<p>{long}</p><p>{fine}</p>")] == [fine]


@pytest.mark.alone  # a bound on time
def test_url_ending_in_parentheses_is_trimmed_in_linear_time() -> None:
    """The issue's 120 KB text mail whose URL ends in a run of ")" (11.8 s for the first detail)."""
    assert growth(trim_url, lambda n: "http://x.example/" + ")" * n, 60_000) < LINEAR
    assert growth(lambda t: find_links(t, ""), lambda n: "see http://x.example/" + ")" * n, 60_000) < LINEAR


# --- 2. the nesting guard -----------------------------------------------------------------------------


def test_guard_flattens_past_the_browsers_depth_and_keeps_content() -> None:
    html = "<div>" * 2000 + "deep text" + '<a href="https://x.example/">link</a>' + "</div>" * 2000 + "<p>after</p>"
    guarded = guard_html(html, max_chars=len(html))
    assert guarded.flattened >= 2000 - MAX_DEPTH and not guarded.cut
    assert _depth(guarded.html) <= MAX_DEPTH + 4  # html, body and the text node
    assert _depth(html) > 2000
    text = html_to_text(guarded.html)
    assert text == "deep text link after"
    assert find_links("", html) == find_links("", guarded.html)


def test_guard_leaves_ordinary_markup_alone() -> None:
    html = (
        "<!doctype html><table><tr><td><p>one<td>two<br><img src=x>"
        "<style>a>b{color:red}</style><!-- <div> --><div title='a>b'>x</div></table>"
    )
    assert guard_html(html * 300, max_chars=10**7).html == html * 300
    cut = guard_html(html, max_chars=20)
    assert cut.cut and cut.html == html[:20] and cut.flattened == 0


@pytest.mark.parametrize(
    "nested",
    [
        "<div></span>",  # stray end tags close nothing
        "<object></div>",  # an end tag does not close through an object
        "<table><tr><td>",  # cells nest in tables
        "<ul><li>",
        "<span title='>'>",  # a quoted ">" does not end the tag
        '<i a="x" b=y c>',
        "<svg><g/><g>",  # in SVG "/>" closes, other tags nest
    ],
)
def test_guard_bounds_the_depth_of_tricky_nesting(nested: str) -> None:
    html = nested * 3000 + "end"
    assert _depth(html) > MAX_DEPTH
    assert _depth(guard_html(html, max_chars=len(html)).html) <= 2 * MAX_DEPTH + 4


def test_guard_is_used_by_the_checks_the_view_and_the_text_finders() -> None:
    html = "<div>" * 5000 + "<b>Your code</b> <b>482913</b>" + "</div>" * 5000
    assert _depth(parse_html(html)) <= MAX_DEPTH + 4
    view = render(html, {}, allow_remote=False)
    assert view.flattened >= 5000 - MAX_DEPTH and not view.truncated
    assert "482913" in view.document
    assert "482913" in visible_text(html)
    assert find_codes("Sign in", "", html) == ["482913"]


def _nested_divs(size: int) -> str:
    return "<div>" * (size // 5)


@pytest.mark.alone  # a bound on time
@pytest.mark.parametrize(
    "step",
    [
        judge_html,
        lambda html: render(html, {}, allow_remote=False),
        visible_text,
        render_html,
        html_to_text,
        lambda html: guard_html(html, max_chars=len(html)),
    ],
    ids=["checks", "view", "visible_text", "code_lines", "html_to_text", "guard"],
)
def test_nested_divs_cost_linear_time(step: Callable[[str], object]) -> None:
    """The issue's 200 KB of nested <div> (13.7 s for GET …/checks) and 1.1 MB of it (render.png)."""
    assert growth(step, _nested_divs, 200_000) < LINEAR


@pytest.mark.alone  # a bound on time
def test_the_checks_parse_of_1_1_mb_of_nested_divs_is_cut_and_linear() -> None:
    html = _nested_divs(1_100_000)
    part = judge_html(html)
    assert part.verdict != "skipped"
    assert growth(judge_html, _nested_divs, 550_000) < LINEAR


@pytest.mark.alone  # a bound on time
def test_stray_end_tags_under_deep_nesting_cost_linear_time() -> None:
    """html.parser-based finders matched each end tag against every open element."""
    for step in (visible_text, render_html):
        assert growth(step, lambda n: "<p>" * 400 + "<span>" * 500 + "</i>" * (n // 4), 100_000) < LINEAR
        assert growth(step, lambda n: "<b>x" * (n // 8) + "</b>" * (n // 8), 100_000) < LINEAR


# --- 3. remote CSS ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "css",
    [
        "background:url(//t.example/a.png)",
        "background:url('https://t.example/a.png')",
        'background:url( "//t.example/a.png" )',
        r"background:\75 rl(//t.example/a.png)",  # an escaped "u"
        r"background:u\72 l('//t.example/a.png')",
        r"background:url(\2f\2f t.example/a.png)",  # escaped slashes
        r"background:URL(//t.example/a.png)",
        "background:image-set('//t.example/a.png' 1x, url(//t.example/b.png) 2x)",
        r"background:url(\\\\t.example/a.png)",  # backslashes count as slashes in a URL
    ],
)
def test_remote_css_in_any_spelling_is_taken_out(css: str) -> None:
    markup = f'<style>td {{ {css} }}</style><div style="{css.replace(chr(34), "&quot;")}; color: red">x</div>'
    safe = render(markup, {}, allow_remote=False)
    assert "t.example" not in safe.document
    assert safe.remote_blocked == 2
    assert "color: red" in safe.document
    assert "t.example" in render(markup, {}, allow_remote=True).document


def test_css_that_fetches_nothing_stays_as_written() -> None:
    css = "a{color:red;background:url(data:image/png;base64,AAAA)} b{mask:url(#m)}"
    assert strip_remote_css(css) == (css, 0)
    assert strip_remote_css("@import 'https://t.example/x.css'; a{color:red}") == (" a{color:red}", 1)
    assert strip_remote_css("@IMPORT url(//t.example/x.css) screen;") == ("", 1)


def test_deep_css_in_the_view_is_emptied_not_recursed() -> None:
    deep = "a{b:" + "calc(" * 5000 + "url(//t.example/x)" + ")" * 5000 + "}"
    css, _ = strip_remote_css(deep)
    assert "t.example" not in css
    safe = render(f"<style>{deep}</style><p style='{deep[4:-1]}'>x</p>", {}, allow_remote=False)
    assert "t.example" not in safe.document


@pytest.mark.alone  # a bound on time
def test_remote_css_stripping_is_linear() -> None:
    """The issue's 192 KB of "url(//" (4.9 s, before the render timeout starts)."""

    def view(html: str) -> object:
        return render(html, {}, allow_remote=False)

    assert growth(view, lambda n: "<style>" + "url(//" * (n // 6) + "</style>", 200_000) < LINEAR
    assert growth(view, lambda n: '<p style="' + "url(//" * (n // 6) + '">x</p>', 200_000) < LINEAR
    assert growth(view, lambda n: "<style>" + "a{b:url(//x.example/a)}" * (n // 23) + "</style>", 200_000) < LINEAR


# --- 4. CSS nesting in the checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "html",
    [
        '<div style="width:' + "calc(" * 1000 + "1px" + ")" * 1000 + '">x</div>',  # the 5 KB mail
        "<style>a{width:" + "calc(" * 3000 + "</style>",
        "<style>" + "a{" * 3000 + "</style>",  # nested rules
        "<style>@media " + "(" * 3000 + "{a{b:c}}</style>",
        "<style>" + "@media screen{" * 3000 + "</style>",
        "<style>a" + "[" * 3000 + "{b:c}</style>",  # a deep selector
        '<div style="display:' + "(" * 3000 + '">x</div>',
    ],
)
def test_deep_css_never_raises_recursion_error(html: str) -> None:
    part = judge_html(html)
    assert part.verdict in ("ok", "warning", "error")


def test_css_within_the_bound_is_still_read() -> None:
    assert ("css-unit-calc", "calc()") in inline_style("width:calc(calc(1px + 2px) * 2)")
    assert ("css-display-flex", "display: flex") in stylesheet("@media screen{@supports (x:y){a{display:flex}}}")


@pytest.mark.alone  # a bound on time
def test_deep_css_costs_linear_time() -> None:
    def style(n: int) -> str:
        return '<div style="width:' + "calc(" * (n // 10) + "1px" + ")" * (n // 10) + '">x</div>'

    assert growth(judge_html, style, 100_000) < LINEAR


# --- 5. codes and the Subject --------------------------------------------------------------------------


def test_the_subject_is_kept_up_to_its_cap() -> None:
    raw = b"From: a@example.org\r\nTo: b@example.com\r\nSubject: " + b"123 " * 50_000 + b"\r\n\r\nbody\r\n"
    subject = parse_message(raw).summary.subject
    assert subject.startswith("123 123") and len(subject) <= MAX_SUBJECT


@pytest.mark.alone  # a bound on time
def test_code_finder_is_linear_in_subject_and_bodies() -> None:
    """The issue's 200 KB Subject of "123 123 …" (33 s of CPU on first open)."""
    assert growth(lambda s: find_codes(s, "", ""), lambda n: "123 " * (n // 4), 100_000) < LINEAR
    assert growth(lambda t: find_codes("", t, ""), lambda n: "code 123 " * (n // 9), 100_000) < LINEAR
    assert growth(lambda t: find_codes("", t, ""), lambda n: "x" * n + "\n" + "123456 " * (n // 7), 50_000) < LINEAR
    assert growth(lambda h: find_codes("", "", h), lambda n: "<td>123 456</td>" * (n // 16), 100_000) < LINEAR


# --- other spots ------------------------------------------------------------------------------------------


def test_hidden_styles_are_still_recognised() -> None:
    for style in ("opacity:0", "opacity: 0.0 !important", "opacity:.0;", "font-size:0px", "font-size:00"):
        assert visible_text(f'<p style="{style}">hidden</p><p>shown</p>') == "shown"
    assert visible_text('<p style="opacity:0.5">half</p>') == "half"


@pytest.mark.alone  # a bound on time
def test_a_run_of_zeros_in_a_style_costs_linear_time() -> None:
    """visible_text's opacity pattern tried every split of a run of zeros (10,000 took 3 s)."""
    assert growth(visible_text, lambda n: '<p style="opacity:' + "0" * n + 'x y">a</p>', 20_000) < LINEAR
