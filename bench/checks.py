"""`python -m bench.checks`: how long the pure part of a message's report takes (HTML compatibility,
content checks, link extraction; no link checks, no DNS) for a typical 30 KB HTML newsletter.

Issue 24's bar is 300 ms for the whole report without links and DNS. The first report of a process
also reads caniemail's data (printed apart); every later one reuses it.
"""

from __future__ import annotations

import statistics
import sys
import time

from inboxd.mail.checks import judge_message
from inboxd.mail.checks.html import clear_caches
from inboxd.mail.parse import parse_message

_STYLE = """
body { margin: 0; padding: 0; background-color: #f4f4f4; }
table { border-collapse: collapse; }
.wrapper { width: 100%; max-width: 600px; margin: 0 auto; }
.button a { display: inline-block; padding: 12px 24px; border-radius: 4px; background: #0066cc; color: #ffffff; }
.footer p { font-size: 12px; line-height: 18px; color: #888888; }
@media screen and (max-width: 600px) {
  .wrapper { width: 100% !important; }
  .column { display: block !important; width: 100% !important; }
}
@media (prefers-color-scheme: dark) { body, .wrapper { background-color: #111111 !important; color: #eeeeee; } }
"""


def newsletter(target: int = 30 * 1024) -> bytes:
    """A newsletter of article blocks (a table per article, inline styles as inliners write them)
    grown to ``target`` bytes of HTML, with a text part and the usual headers."""
    blocks = []
    i = 0
    html = ""
    while len(html) < target:
        blocks.append(
            f'<table role="presentation" class="column" width="100%" cellpadding="0" cellspacing="0">'
            f'<tr><td style="padding: 16px 24px; font-family: Helvetica, Arial, sans-serif; font-size: 16px; '
            f'line-height: 24px; color: #333333;">'
            f'<img src="https://cdn.example.com/news/{i}.jpg" alt="Article {i}" width="552" '
            f'style="display: block; width: 100%; height: auto; border: 0;">'
            f'<h2 style="margin: 16px 0 8px; font-size: 22px; font-weight: bold;">Article number {i}</h2>'
            f'<p style="margin: 0 0 12px;">Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do '
            f"eiusmod tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam.</p>"
            f'<div class="button"><a href="https://example.com/articles/{i}?utm_source=news" '
            f'style="color: #ffffff; text-decoration: none;">Read more</a></div></td></tr></table>\n'
        )
        i += 1
        html = (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><style>{_STYLE}</style></head>'
            f'<body><div class="wrapper">{"".join(blocks)}'
            '<div class="footer"><p>You get this because you signed up. '
            '<a href="https://example.com/unsubscribe">Unsubscribe</a></p></div></div></body></html>'
        )
    headers = (
        "From: Example News <news@example.com>\r\nTo: dev@inboxd.test\r\nSubject: This week\r\n"
        "Date: Tue, 14 May 2024 10:00:00 +0000\r\nMessage-ID: <news-1@example.com>\r\n"
        "List-Unsubscribe: <https://example.com/unsubscribe>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"
        'MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary="b"\r\n\r\n'
    )
    body = (
        "--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nThis week: https://example.com/articles\r\n"
        f"--b\r\nContent-Type: text/html; charset=utf-8\r\n\r\n{html}\r\n--b--\r\n"
    )
    return (headers + body).encode()


def main(runs: int = 30) -> None:
    raw = newsletter()
    start = time.perf_counter()
    judge_message(raw)
    first = (time.perf_counter() - start) * 1000
    times = []
    for _ in range(runs):
        # From cold each run: no style sheet seen before, the MIME parse included.
        clear_caches()
        start = time.perf_counter()
        judge_message(raw, parse_message(raw))
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    print(
        f"report of a {len(raw) / 1024:.0f} KB HTML message (no links, no DNS), {runs} runs: "
        f"median {statistics.median(times):.1f} ms, worst {times[-1]:.1f} ms; "
        f"first in a process {first:.1f} ms (reads caniemail's data)"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
