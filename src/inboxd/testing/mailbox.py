"""What the `mailbox` and `sandbox` fixtures give a test: an address, `wait_for(...)` and `messages()`.

`wait_for` returns the matches oldest-first, each once: every call returns the oldest match that
comes after the last message it returned in the server's order (`created_at`, then `id`: the
message lists' order, read backwards). The cursor is that message's `created_at` plus the ids
returned so far, not a time one millisecond later, so two mails that arrived before the first call,
or in the same millisecond, are both returned, in order. The server's wait answers the newest match,
so a call lists what is there first and waits only when nothing new is: list, take the oldest new
one; else wait for the next and list again (two mails may have been committed together). When
nothing arrives in time it fails the test with an AssertionError that says what it waited for and
lists what did arrive.

The messages they return also have `checks()` and `assert_checks(...)` (testing/checks.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar, Unpack

from inboxd.client import (
    ApiError,
    Client,
    Filters,
    Message,
    MessageSummary,
    SandboxInfo,
    SandboxMessage,
    WaitTimedOut,
    When,
)
from inboxd.testing.checks import CheckableMessage, CheckableSandboxMessage, with_checks
from inboxd.testing.faults import MailboxFaults, SandboxFaults

M = TypeVar("M", Message, SandboxMessage)

_LISTED = 10
_PAGE = 30  # the server's page size: a shorter page is the last


def _instant(value: When) -> datetime:
    instant = value if isinstance(value, datetime) else datetime.fromisoformat(value.replace("Z", "+00:00"))
    if instant.tzinfo is None:
        raise ValueError("since/until need a timezone-aware datetime")
    return instant


def _rfc3339(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
        self._returned: set[str] = set()
        self._last: datetime | None = None  # `created_at` of the last message returned

    def _wait(
        self,
        *,
        wait: Callable[..., M],
        listing: Callable[..., list[MessageSummary]],
        read: Callable[[str], M],
        timeout: float,
        filters: Filters,
    ) -> M:
        __tracebackhide__ = True  # a failed wait reports at the test's line
        asked = filters
        # Listing from the cursor's millisecond on (inclusive) and leaving out what was returned
        # keeps a message of that same millisecond; the server's wait, which answers the newest,
        # is asked only for a later one (a late one of the same millisecond is found by the listing
        # that follows the wait, at the latest when it times out).
        listed, waited, newer = filters, filters, ""
        if self._last is not None:
            since = _instant(filters["since"]) if "since" in filters else None
            if since is None or since <= self._last:
                listed = {**filters, "since": _rfc3339(self._last)}
                waited = {**filters, "since": _rfc3339(self._last + timedelta(milliseconds=1))}
                newer = " newer than the one the previous wait_for returned"
        found = self._next(listing, read, listed)
        if found is None:
            try:
                woke: M | None = wait(timeout=timeout, **waited)
            except WaitTimedOut:
                woke = None
            found = self._next(listing, read, listed, woke=woke)
        if found is None:
            raise AssertionError(
                f"inboxd: {_describe(asked)}{newer} did not arrive at {self.where} within {timeout:g} s.\n"
                + _arrived(listing(1))
            )
        self._returned.add(found.id)
        self._last = _instant(found.created_at)
        return found

    def _next(
        self,
        listing: Callable[..., list[MessageSummary]],
        read: Callable[[str], M],
        filters: Filters,
        *,
        woke: M | None = None,
    ) -> M | None:
        """The oldest listed match not returned yet (the lists are newest first), or None."""
        fresh: list[MessageSummary] = []
        page = 1
        while True:
            batch = listing(page, **filters)
            fresh.extend(m for m in batch if m.id not in self._returned)
            if len(batch) < _PAGE:
                break
            page += 1
        for summary in reversed(fresh):
            if woke is not None and woke.id == summary.id:
                return woke
            try:
                return read(summary.id)
            except ApiError as exc:
                if exc.status not in (404, 410):
                    raise
                self._returned.add(summary.id)  # deleted or expired since it was listed
        return None


class TestMailbox(MailboxFaults, _Waiting):
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

    def wait_for(self, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> CheckableMessage:
        """The oldest message the filters keep (subject, from_, to, q, unread, has_attachments, since,
        until, tag) after the last one returned, the moment there is one; AssertionError after `timeout`
        seconds."""
        __tracebackhide__ = True
        found = self._wait(
            wait=lambda **kw: self.client.wait_for(self.id, **kw),
            listing=lambda page, **kw: self.client.messages(self.id, page, **kw),
            read=lambda message_id: self.client.message(self.id, message_id),
            timeout=timeout,
            filters=filters,
        )
        return with_checks(found, self.client, self.id)

    def messages(self, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        """A page of 30 messages, newest first."""
        return self.client.messages(self.id, page, **filters)

    def tagged(self, tag: str) -> str:
        """The plus address that delivers here with `tag` (`box+signup@…`): `wait_for(tag=tag)` finds it."""
        local, _, domain = self.address.partition("@")
        return f"{local}+{tag}@{domain}"

    def set_tags(self, message_id: str, tags: list[str]) -> list[str]:
        """Replace a message's tags; returns them as kept."""
        return self.client.set_tags(self.id, message_id, tags)

    def message(self, message_id: str) -> CheckableMessage:
        return with_checks(self.client.message(self.id, message_id), self.client, self.id)

    def delete(self) -> None:
        self.client.delete_mailbox(self.id)


class TestSandbox(SandboxFaults, _Waiting):
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

    def wait_for(self, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> CheckableSandboxMessage:
        __tracebackhide__ = True
        found = self._wait(
            wait=lambda **kw: self.client.wait_for_sandbox(**kw),
            listing=lambda page, **kw: self.client.sandbox_messages(page, **kw),
            read=self.client.sandbox_message,
            timeout=timeout,
            filters=filters,
        )
        return with_checks(found, self.client, "")

    def messages(self, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        return self.client.sandbox_messages(page, **filters)

    def message(self, message_id: str) -> CheckableSandboxMessage:
        return with_checks(self.client.sandbox_message(message_id), self.client, "")

    def purge(self) -> int:
        return self.client.purge_sandbox()
