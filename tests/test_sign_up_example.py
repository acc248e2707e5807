"""The README's example, as written, against a sign-up page this test serves, in Debian's chromium.

The page mails a verification code through inboxd's SMTP port (the `inboxd` fixture's embedded
server), then asks for the code; `mailbox` and `wait_for` come from inboxd's pytest plugin.
"""

from __future__ import annotations

import secrets
import smtplib
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from inboxd.testing import InboxdServer
from tests.browser import CHROMIUM

SIGN_UP = (
    '<form method="post" action="/sign-up"><input id="email" name="email" type="email"><button>Sign up</button></form>'
)
ENTER_CODE = (
    '<p>We sent a code to {email}.</p><form method="post" action="/verify">'
    '<input type="hidden" name="email" value="{email}"><input id="code" name="code">'
    "<button>Verify</button></form>"
)


def sign_up_app(inboxd: InboxdServer) -> ThreadingHTTPServer:
    codes: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.answer(SIGN_UP)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            email = form.get("email", "")
            if self.path == "/sign-up":
                codes[email] = f"{secrets.randbelow(10**6):06d}"
                send_code(email, codes[email])
                self.answer(ENTER_CODE.format(email=escape(email)))
            else:
                verified = codes.get(email) == form.get("code")
                self.answer(f'<p id="result">{"Verified" if verified else "Wrong code"}</p>')

        def answer(self, body: str) -> None:
            data = f"<!doctype html><html><body>{body}</body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    def send_code(email: str, code: str) -> None:
        message = EmailMessage()
        message["From"] = "Acme <no-reply@acme.example>"
        message["To"] = email
        message["Subject"] = "Verify your email address"
        message.set_content(f"Welcome to Acme!\n\nYour verification code is {code}.\n")
        message.add_alternative(
            f"<p>Welcome to Acme!</p><p>Your verification code:</p><p><strong>{code}</strong></p>",
            subtype="html",
        )
        assert inboxd.smtp_host is not None and inboxd.smtp_port is not None
        with smtplib.SMTP(inboxd.smtp_host, inboxd.smtp_port, timeout=30) as smtp:
            smtp.send_message(message)

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def page(inboxd: InboxdServer) -> Iterator[Page]:
    """A chromium page on the sign-up form."""
    app = sign_up_app(inboxd)
    thread = threading.Thread(target=app.serve_forever, daemon=True)
    thread.start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM)
            try:
                tab = browser.new_page()
                tab.goto(f"http://127.0.0.1:{app.server_address[1]}/")
                yield tab
            finally:
                browser.close()
    finally:
        app.shutdown()
        app.server_close()


# The README's lines, kept as they are written there.
# fmt: off
def test_sign_up(mailbox, page):  # type: ignore[no-untyped-def]  # `mailbox` fixture from inboxd's pytest plugin
    page.fill("#email", mailbox.address); page.click("text=Sign up")  # noqa: E702
    msg = mailbox.wait_for(subject="Verify", timeout=30)
    page.fill("#code", msg.code)               # or: page.goto(msg.links[0].url)
    # Beyond the example: the page accepts the code.
    page.click("text=Verify")
    expect(page.locator("#result")).to_have_text("Verified")
# fmt: on
