"""The README's example, as written, against a sign-up page this test serves, in Debian's chromium.

The page mails a verification code through inboxd's SMTP port (the `inboxd` fixture's embedded
server), then asks for the code; `mailbox` and `wait_for` come from inboxd's pytest plugin.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from inboxd.testing import InboxdServer
from tests.sign_up_app import sign_up_page


@pytest.fixture
def page(inboxd: InboxdServer) -> Iterator[Page]:
    """A chromium page on the sign-up form."""
    with sign_up_page(inboxd) as tab:
        yield tab


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
