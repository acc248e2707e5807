"""A sign-up page that mails a verification code through the `inboxd` fixture's SMTP address, in
Debian's chromium: the application under test of the README's example ("Testing with inboxd"),
run by `tests/test_sign_up_example.py` and, through pytester, by `tests/test_testing_plugin.py`.
"""

from __future__ import annotations

import contextlib
import secrets
import smtplib
import threading
from collections.abc import Iterator
from email.message import EmailMessage
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from playwright.sync_api import Page, sync_playwright

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


@contextlib.contextmanager
def sign_up_page(inboxd: InboxdServer) -> Iterator[Page]:
    """A chromium page on the sign-up form (the README example's `page` fixture)."""
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
