"""`python -m bench.checks [RUNS]`: how long a message's report takes for a typical 30 KB HTML newsletter.

Two figures. The pure part (HTML compatibility, content checks, link extraction) in this process;
then the whole path a user waits on: a real inboxd (SQLite in a temporary directory) receives the
newsletter over SMTP RUNS times, and each `GET /api/accounts/{mailbox}/messages/{id}/checks` is
timed, the first request of each message, which computes the report: reading the message, the pure
part off the loop, SPF/DKIM/DMARC/ARC, keeping the report. Link checks and DNS are left out as
issue 24 asks: the link rate is set so that no URL is fetched (they are listed, "not checked"),
no spam filter is configured, and DNS goes to a local server that answers NXDOMAIN at once. The
next request of the same message (the kept report) is timed too.

Issue 24's bar is 300 ms for the whole report without links and DNS. The first report of a process
also reads caniemail's data (printed apart); every later one reuses it.
"""

from __future__ import annotations

import asyncio
import smtplib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from inboxd.mail.checks import judge_message
from inboxd.mail.checks.css import clear_caches
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


@contextmanager
def _nxdomain_server() -> Iterator[str]:
    """A DNS server on 127.0.0.1 that answers NXDOMAIN to everything, at once."""
    from dnslib import RCODE, DNSRecord
    from dnslib.server import BaseResolver, DNSLogger, DNSServer

    class Nothing(BaseResolver):  # type: ignore[misc]
        def resolve(self, request: DNSRecord, handler: Any) -> DNSRecord:
            reply = request.reply()
            reply.header.rcode = RCODE.NXDOMAIN
            return reply

    server = DNSServer(Nothing(), address="127.0.0.1", port=0, logger=DNSLogger("-request,-reply", logf=_quiet))
    server.start_thread()
    try:
        yield f"127.0.0.1:{server.server.server_address[1]}"
    finally:
        server.stop()


def _quiet(_line: str) -> None:
    pass


def _spread(times: list[float]) -> str:
    times = sorted(times)
    q = statistics.quantiles(times, n=10) if len(times) > 1 else times * 9
    return (
        f"median {statistics.median(times):.1f} ms, p10 {q[0]:.1f}, p90 {q[-1]:.1f}, "
        f"best {times[0]:.1f}, worst {times[-1]:.1f} ms"
    )


def _send(port: int, to: str, raw: bytes) -> None:
    with smtplib.SMTP("127.0.0.1", port, local_hostname="mta.example.com", timeout=30) as client:
        client.sendmail("news@example.com", [to], raw)


async def service(runs: int = 30) -> None:
    """The whole report path through a running inboxd (see the module docstring)."""
    from inboxd.app import Inboxd
    from inboxd.config import Settings

    raw = newsletter()
    with tempfile.TemporaryDirectory() as tmp, _nxdomain_server() as dns:
        settings = Settings(
            data_dir=Path(tmp),
            http_port=0,
            smtp_port=0,
            submission_port=0,
            dns_nameservers=[dns],
            dns_timeout=2.0,
            link_check_rate=0.001,  # below one URL a minute: every URL is listed, none fetched
            free_rps=10_000.0,
            pro_rps=10_000.0,
        )
        server = Inboxd(settings)
        await server.start()
        try:
            base = f"http://127.0.0.1:{server.http_port}"
            auth = {"Authorization": f"Bearer {server.bootstrap_token}"}
            async with httpx.AsyncClient(base_url=base, headers=auth, timeout=60) as http:
                address = f"bench@{settings.default_domain}"
                created = await http.post("/api/accounts", json={"address": address, "auth_key": "ab" * 32})
                created.raise_for_status()
                for _ in range(runs + 1):
                    await asyncio.to_thread(_send, server.smtp_port, address, raw)
                ids: list[str] = []
                page = 1
                while len(ids) < runs + 1:
                    listed = await http.get(f"/api/accounts/{address}/messages", params={"page": page})
                    listed.raise_for_status()
                    ids += [m["id"] for m in listed.json()["messages"]]
                    page += 1
                first, computed, kept = 0.0, [], []
                for n, message_id in enumerate(ids[: runs + 1]):
                    path = f"/api/accounts/{address}/messages/{message_id}/checks"
                    start = time.perf_counter()
                    answer = await http.get(path)
                    took = (time.perf_counter() - start) * 1000
                    answer.raise_for_status()
                    if n == 0:
                        first = took  # the process's first report: imports the checkers, reads caniemail's data
                        continue
                    computed.append(took)
                    start = time.perf_counter()
                    (await http.get(path)).raise_for_status()
                    kept.append((time.perf_counter() - start) * 1000)
        finally:
            await server.stop()
    print(
        f"whole report over HTTP of a {len(raw) / 1024:.0f} KB HTML message (no link fetched, no spam filter, "
        f"DNS answered NXDOMAIN locally), {runs} messages:\n"
        f"  computed: {_spread(computed)}\n"
        f"  kept (the next request): {_spread(kept)}\n"
        f"  first in a process {first:.1f} ms"
    )


def main(runs: int = 30) -> None:
    print(f"reproduce: python -m bench.checks {runs}")
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
    print(
        f"pure part of a {len(raw) / 1024:.0f} KB HTML message's report, {runs} runs:\n"
        f"  {_spread(times)}\n  first in a process {first:.1f} ms (reads caniemail's data)"
    )
    asyncio.run(service(runs))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
