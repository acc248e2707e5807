"""What the `mailbox` and `sandbox` fixtures give a test: an address, `wait_for(...)` and `messages()`.

`wait_for` returns the newest message the filters keep. Each call only accepts a message newer than
the one the previous call returned, so a test that waits twice gets the first mail and then the
next one. When nothing arrives in time it fails the test with an AssertionError that says what it
waited for and lists what did arrive.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar, Unpack

from inboxd.client import Client, Filters, Message, MessageSummary, SandboxInfo, SandboxMessage, WaitTimedOut

M = TypeVar("M", Message, SandboxMessage)

_LISTED = 10


def _after(created_at: str) -> str:
    """An RFC 3339 instant one millisecond after `created_at` (the API's precision)."""
    instant = datetime.fromisoformat(created_at.replace("Z", "+00:00")) + timedelta(milliseconds=1)
    return instant.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _describe(filters: Filters) -> str:
    names = {"from_": "from"}
    parts = [f"{names.get(name, name)}={value!r}" for name, value in filters.items()]
    return "any message" if not parts else "a message with " + ", ".join(parts)


def _arrived(messages: list[MessageSummary]) -> str:
    if not messages:
        return "Nothing arrived."
    lines = [f"What did arrive ({len(messages)}{'+' if len(messages) > _LISTED else ''}, newest first):"]
    for m in messages[:_LISTED]:
        lines.append(f"  - {m.created_at}  from {m.from_ or m.sender!r}  subject {m.subject!r}")
    return "\n".join(lines)


class _Waiting:
    """The shared `wait_for` of a mailbox and of the sandbox."""

    where: str

    def __init__(self) -> None:
        self._last_created_at: str | None = None

    def _wait(
        self,
        wait: Callable[..., M],
        listing: Callable[..., list[MessageSummary]],
        timeout: float,
        filters: Filters,
    ) -> M:
        __tracebackhide__ = True  # a failed wait reports at the test's line
        asked, newer = filters, ""
        if "since" not in filters and self._last_created_at is not None:
            filters = {**filters, "since": _after(self._last_created_at)}
            newer = " newer than the one the previous wait_for returned"
        try:
            found = wait(timeout=timeout, **filters)
        except WaitTimedOut:
            arrived = listing()
            raise AssertionError(
                f"inboxd: {_describe(asked)}{newer} did not arrive at {self.where} within {timeout:g} s.\n"
                + _arrived(arrived)
            ) from None
        self._last_created_at = found.created_at
        return found


class TestMailbox(_Waiting):
    """A mailbox made for one test (the `mailbox` fixture) and deleted after it."""

    __test__ = False  # not a test class, despite its name

    def __init__(self, client: Client, *, id: str, address: str, token: str = "") -> None:
        super().__init__()
        self.client = client
        self.id = id
        self.address = address
        self.token = token  # a mailbox token: REST and WebSocket access to this mailbox alone
        self.where = address

    def __str__(self) -> str:
        return self.address

    def __repr__(self) -> str:
        return f"TestMailbox({self.address!r})"

    def wait_for(self, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> Message:
        """The newest message the filters keep (subject, from_, to, q, unread, has_attachments, since,
        until) newer than the last one returned; AssertionError after `timeout` seconds."""
        __tracebackhide__ = True
        return self._wait(
            lambda **kw: self.client.wait_for(self.id, **kw),
            lambda: self.client.messages(self.id),
            timeout,
            filters,
        )

    def messages(self, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        """A page of 30 messages, newest first."""
        return self.client.messages(self.id, page, **filters)

    def message(self, message_id: str) -> Message:
        return self.client.message(self.id, message_id)

    def delete(self) -> None:
        self.client.delete_mailbox(self.id)


class TestSandbox(_Waiting):
    """The user's SMTP sandbox (the `sandbox` fixture): point the application's SMTP settings at
    `smtp_host`, `smtp_port`, `username` and `password`; what it sends is captured here."""

    __test__ = False

    def __init__(self, client: Client, info: SandboxInfo, password: str) -> None:
        super().__init__()
        self.client = client
        self.info = info
        self.smtp_host = info.smtp_host
        self.smtp_port = info.smtp_port
        self.username = info.username
        self.password = password
        self.address = info.address
        self.where = "the sandbox"

    def wait_for(self, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> SandboxMessage:
        __tracebackhide__ = True
        return self._wait(
            lambda **kw: self.client.wait_for_sandbox(**kw),
            lambda: self.client.sandbox_messages(),
            timeout,
            filters,
        )

    def messages(self, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        return self.client.sandbox_messages(page, **filters)

    def message(self, message_id: str) -> SandboxMessage:
        return self.client.sandbox_message(message_id)

    def purge(self) -> int:
        return self.client.purge_sandbox()
