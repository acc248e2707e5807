"""The synchronous client, `Client`.

Generated from `_async/client.py` by `python -m inboxd.client.generate`: do not edit; edit
`AsyncClient` there and run it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

import httpx

from inboxd.client.calls import (
    _SANDBOX,
    _account,
    _Base,
    _box,
    _bytes,
    _Call,
    _checks_query,
    _count,
    _default_domain,
    _domains,
    _error,
    _faults_body,
    _faults_path,
    _filters,
    _get,
    _json,
    _list,
    _mailbox,
    _message,
    _new_local,
    _new_password,
    _not_found,
    _nothing,
    _own,
    _render_query,
    _report,
    _retry,
    _rules,
    _sandbox_info,
    _sandbox_message,
    _seg,
    _send,
    _server_info,
    _tags,
    _users,
    _wait,
)
from inboxd.client.results import (
    ApiError,
    Filters,
    Json,
    Mailbox,
    Message,
    MessageSummary,
    SandboxInfo,
    SandboxMessage,
    ServerInfo,
    WaitTimedOut,
)

if TYPE_CHECKING:
    from inboxd.mail.checks.report import CheckReport

T = TypeVar("T")


class _FaultCalls:
    """The SMTP fault calls (issue 27): a PUT replaces a mailbox's (or the sandbox's) rules."""

    def _run(self, call: _Call[T]) -> T:
        raise NotImplementedError

    def set_faults(
        self, mailbox: str, rules: Sequence[Mapping[str, Any]], *, expires_in: int | None = None
    ) -> list[Json]:
        return self._run(_send("PUT", _faults_path(mailbox), _rules, _faults_body(rules, expires_in)))

    def faults(self, mailbox: str) -> list[Json]:
        return self._run(_get(_faults_path(mailbox), _rules))

    def clear_faults(self, mailbox: str) -> None:
        self._run(_send("DELETE", _faults_path(mailbox), _nothing))

    def set_sandbox_faults(self, rules: Sequence[Mapping[str, Any]], *, expires_in: int | None = None) -> list[Json]:
        return self._run(_send("PUT", _faults_path(None), _rules, _faults_body(rules, expires_in)))

    def sandbox_faults(self) -> list[Json]:
        return self._run(_get(_faults_path(None), _rules))

    def clear_sandbox_faults(self) -> None:
        self._run(_send("DELETE", _faults_path(None), _nothing))


class Client(_FaultCalls, _Base):
    """A client of the inboxd API. `token`: an API token (Pro or admin for `/api/user/*`) or a mailbox token.

    A wait's `timeout` is the server's (how long it holds the request), not a local deadline, so
    the waits take it as a parameter rather than leaving it to a cancellation scope.
    """

    def __init__(
        self, base_url: str, token: str | None = None, *, timeout: float = 30.0, http: httpx.Client | None = None
    ) -> None:
        super().__init__(base_url, token, timeout)
        self._http = http or httpx.Client(base_url=self.base_url, timeout=timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _run(self, call: _Call[T]) -> T:
        """The answer to `call`, read; a wait longer than the server holds a request is several."""
        while True:
            try:
                return self._request(call)
            except WaitTimedOut:
                later = call.again()
                if later is None:
                    raise
                call = later

    def _request(self, call: _Call[T]) -> T:
        attempt = 0
        while True:
            response = self._http.request(call.method, call.path, **self._request_args(call))
            pause = _retry(response, attempt)
            if pause is None:
                break
            time.sleep(pause)
            attempt += 1
        if response.is_success:
            return call.read(response)
        raise _error(response)

    def _either(self, mailbox: str, call: Callable[[str], _Call[T]]) -> T:
        """`call` on the token's route (`_own`); on its 404, on the user's (`_users`), whose own
        refusal (403 for a free plan or a mailbox token, 404) gives way to the first 404."""
        key = self._key(mailbox)
        if key in self._users:
            return self._run(call(_users(mailbox)))
        try:
            return self._run(call(_own(mailbox)))
        except ApiError as exc:
            if not _not_found(exc):
                raise
            try:
                found = self._run(call(_users(mailbox)))
            except ApiError as again:
                if again.status in (403, 404):
                    raise exc from None
                raise
            self._users.add(key)
            return found

    # mailboxes
    def health(self) -> Json:
        return self._run(_get("/healthz", _json))

    def server(self) -> ServerInfo:
        """The server's version and where its SMTP listener receives mail (`GET /api/server`)."""
        return self._run(_get("/api/server", _server_info))

    def domains(self) -> list[Json]:
        return self._run(_get("/api/domains", _domains))

    def create_mailbox(self, address: str | None = None, password: str | None = None) -> Mailbox:
        """A new mailbox; without `address`, a random one on the server's default domain."""
        if address is None:
            domain = _default_domain(self.domains())  # not in the f-string: unasync cannot see there
            address = f"{_new_local()}@{domain}"
        body = {"address": address, "password": password or _new_password()}
        return self._run(_send("POST", "/api/accounts", _mailbox, body))

    def sign_in(self, address: str, password: str) -> Mailbox:
        return self._run(_send("POST", "/api/token", _mailbox, {"address": address, "password": password}))

    def mailbox(self, mailbox: str) -> Mailbox:
        return self._run(_get(_own(mailbox), _mailbox))

    def delete_mailbox(self, mailbox: str) -> None:
        self._either(mailbox, lambda route: _send("DELETE", route, _nothing))

    def reset_password(self, mailbox: str, password: str) -> None:
        body = {"password": password}
        self._either(mailbox, lambda route: _send("PUT", f"{route}/reset-password", _nothing, body))

    # messages
    def messages(self, mailbox: str, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        """A page of 30, newest first. Filters: q, from_, to, subject, unread, has_attachments, since, until, tag."""
        flt = _filters(**filters)
        return self._either(mailbox, lambda route: _list(f"{route}/messages", page, flt))

    def message(self, mailbox: str, message_id: str) -> Message:
        return self._either(mailbox, lambda route: _get(f"{route}/messages/{_seg(message_id)}", _message))

    def wait_for(self, mailbox: str, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> Message:
        """The newest message the filters keep, once there is one; `WaitTimedOut` after `timeout` s."""
        flt = _filters(**filters)
        return self._either(mailbox, lambda route: _wait(f"{route}/messages", flt, timeout, _message))

    def source(self, mailbox: str, message_id: str) -> bytes:
        return self._either(mailbox, lambda route: _get(f"{route}/messages/{_seg(message_id)}/source", _bytes))

    def render(
        self,
        mailbox: str,
        message_id: str,
        *,
        width: int = 600,
        full: bool = False,
        remote: bool = False,
        dark: bool = False,
    ) -> bytes:
        """The HTML body as a PNG, drawn by the server's Chromium as the dashboard shows it (width
        320–1600 CSS pixels; `full` for the whole height). 501 `render_unavailable` without it."""
        query = _render_query(width, full, remote, dark)
        return self._either(
            mailbox, lambda route: _get(f"{route}/messages/{_seg(message_id)}/render.png", _bytes, query)
        )

    def render_sandbox(self, message_id: str, *, width: int = 600, full: bool = False, dark: bool = False) -> bytes:
        """As `render`, for a message the SMTP sandbox captured."""
        query = _render_query(width, full, False, dark)
        return self._run(_get(f"{_SANDBOX}/{_seg(message_id)}/render.png", _bytes, query))

    def checks(self, mailbox: str, message_id: str, *, refresh_links: bool = False) -> CheckReport:
        """The message's check report (computed by the server at the first request, then kept)."""
        query = _checks_query(refresh_links)
        return self._either(mailbox, lambda route: _get(f"{route}/messages/{_seg(message_id)}/checks", _report, query))

    def attachment(self, mailbox: str, message_id: str, index: int) -> bytes:
        return self._either(
            mailbox, lambda route: _get(f"{route}/messages/{_seg(message_id)}/attachments/{index}", _bytes)
        )

    def mark_read(self, mailbox: str, message_id: str) -> None:
        self._run(_send("PUT", f"{_box(mailbox)}/{_seg(message_id)}/read", _nothing))

    def mark_all_read(self, mailbox: str) -> int:
        return self._run(_send("PUT", f"{_box(mailbox)}/read", _count("updated"), {"all": True}))

    def delete_message(self, mailbox: str, message_id: str) -> None:
        self._run(_send("DELETE", f"{_box(mailbox)}/{_seg(message_id)}", _nothing))

    def set_tags(self, mailbox: str, message_id: str, tags: Sequence[str]) -> list[str]:
        """Replace the message's tags; returns them as kept (lowercase, repeats removed)."""
        path = f"{_box(mailbox)}/{_seg(message_id)}/tags"
        return self._run(_send("PUT", path, _tags, {"tags": list(tags)}))

    # Pro: the user's mailboxes, domains, tokens, webhooks
    def me(self) -> Json:
        return self._run(_get("/api/user/me", _json))

    def accounts(self, cursor: str = "") -> Json:
        return self._run(_get("/api/user/accounts", _json, {"cursor": cursor} if cursor else None))

    def delete_account(self, account_id: str) -> None:
        self._run(_send("DELETE", _users(account_id), _nothing))

    def account_messages(self, account_id: str, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        return self._run(_list(_account(account_id), page, _filters(**filters)))

    def wait_for_account(self, account_id: str, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> Message:
        return self._run(_wait(_account(account_id), _filters(**filters), timeout, _message))

    def user_domains(self) -> Json:
        return self._run(_get("/api/user/domains", _json))

    def add_domain(self, domain: str) -> Json:
        return self._run(_send("POST", "/api/user/domains", _json, {"domain": domain}))

    def verify_domain(self, domain_id: str) -> Json:
        return self._run(_send("POST", f"/api/user/domains/{_seg(domain_id)}/verify", _json))

    def delete_domain(self, domain_id: str) -> None:
        self._run(_send("DELETE", f"/api/user/domains/{_seg(domain_id)}", _nothing))

    def tokens(self) -> Json:
        return self._run(_get("/api/user/tokens", _json))

    def create_token(self, name: str) -> Json:
        return self._run(_send("POST", "/api/user/tokens", _json, {"name": name}))

    def revoke_token(self, token_id: str) -> None:
        self._run(_send("DELETE", f"/api/user/tokens/{_seg(token_id)}", _nothing))

    def webhooks(self) -> Json:
        return self._run(_get("/api/user/webhooks", _json))

    def create_webhook(self, url: str, events: list[str]) -> Json:
        return self._run(_send("POST", "/api/user/webhooks", _json, {"url": url, "events": events}))

    def delete_webhook(self, webhook_id: str) -> None:
        self._run(_send("DELETE", f"/api/user/webhooks/{_seg(webhook_id)}", _nothing))

    def rotate_webhook_secret(self, webhook_id: str) -> Json:
        return self._run(_send("POST", f"/api/user/webhooks/{_seg(webhook_id)}/rotate", _json))

    def deliveries(self, webhook_id: str) -> Json:
        return self._run(_get(f"/api/user/webhooks/{_seg(webhook_id)}/deliveries", _json))

    # Pro: the SMTP sandbox
    def sandbox(self) -> SandboxInfo:
        return self._run(_get("/api/user/sandbox", _sandbox_info))

    def sandbox_messages(self, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        return self._run(_list(_SANDBOX, page, _filters(**filters)))

    def sandbox_message(self, message_id: str) -> SandboxMessage:
        return self._run(_get(f"{_SANDBOX}/{_seg(message_id)}", _sandbox_message))

    def wait_for_sandbox(self, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> SandboxMessage:
        return self._run(_wait(_SANDBOX, _filters(**filters), timeout, _sandbox_message))

    def sandbox_checks(self, message_id: str, *, refresh_links: bool = False) -> CheckReport:
        """The check report of a message the sandbox caught."""
        path = f"{_SANDBOX}/{_seg(message_id)}/checks"
        return self._run(_get(path, _report, _checks_query(refresh_links)))

    def delete_sandbox_message(self, message_id: str) -> None:
        self._run(_send("DELETE", f"{_SANDBOX}/{_seg(message_id)}", _nothing))

    def purge_sandbox(self) -> int:
        return self._run(_send("DELETE", _SANDBOX, _count("deleted")))

    # Release (issue 27): send a caught message on through the server's relay.
    def release(self, mailbox: str, message_id: str, to: list[str]) -> Json:
        """The release record: `recipients`, the relay's answer for each (`accepted`, `code`, `message`)."""
        return self._run(_send("POST", f"{_box(mailbox)}/{_seg(message_id)}/release", _json, {"to": to}))

    def releases(self, mailbox: str, message_id: str) -> Json:
        return self._run(_get(f"{_box(mailbox)}/{_seg(message_id)}/releases", _json))

    def release_sandbox_message(self, message_id: str, to: list[str]) -> Json:
        return self._run(_send("POST", f"{_SANDBOX}/{_seg(message_id)}/release", _json, {"to": to}))

    def sandbox_releases(self, message_id: str) -> Json:
        return self._run(_get(f"{_SANDBOX}/{_seg(message_id)}/releases", _json))
