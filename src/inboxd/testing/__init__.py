"""inboxd's pytest plugin (registered through the `pytest11` entry point) and its helpers.

Fixtures: `inboxd` (session: an embedded inboxd, or the one `--inboxd-url` / `INBOXD_URL` names),
`mailbox` (a fresh mailbox per test, deleted after it) and `sandbox` (the user's SMTP sandbox,
emptied before the test: the embedded server's, or a running server's with `--inboxd-empty-sandbox`).
See the README's "Testing with inboxd".
"""

from inboxd.testing.mailbox import TestMailbox, TestSandbox
from inboxd.testing.server import InboxdServer, connect, start_embedded

__all__ = ["InboxdServer", "TestMailbox", "TestSandbox", "connect", "start_embedded"]
