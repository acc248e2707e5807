"""The client's requests without I/O: how a call is built (`_Call`) and how its answer is read.

Both clients send the same `_Call`s; only `_async/client.py` says which, and `_sync/client.py` is
generated from it.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from inboxd.client.results import (
    ApiError,
    Json,
    Mailbox,
    Message,
    MessageSummary,
    SandboxInfo,
    SandboxMessage,
    ServerInfo,
    WaitTimedOut,
    When,
)

if TYPE_CHECKING:
    from inboxd.mail.checks.report import CheckReport

T = TypeVar("T")

MAX_WAIT = 60.0  # the server's largest `timeout`; longer waits are made of several requests
_RETRIES_429 = 5
_MAX_RETRY_AFTER = 10.0


@dataclass(frozen=True, slots=True)
class _Call(Generic[T]):
    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    timeout: float | None = None  # read timeout of this request; None: the client's
    deadline: float | None = None  # a wait's: when (time.monotonic) the whole wait ends

    def again(self) -> _Call[T] | None:
        """The next request of a wait longer than the server holds one; None when it is over."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0.05:
            return None
        this = min(left, MAX_WAIT)
        params = {**self.params, "timeout": f"{this:g}"}
        return dataclasses.replace(self, params=params, timeout=this + 15.0)


def _get(path: str, read: Callable[[httpx.Response], T], params: Mapping[str, str] | None = None) -> _Call[T]:
    return _Call("GET", path, read, params=dict(params or {}))


def _send(method: str, path: str, read: Callable[[httpx.Response], T], body: Any = None) -> _Call[T]:
    return _Call(method, path, read, body=body)


def _list(base: str, page: int, flt: dict[str, str]) -> _Call[list[MessageSummary]]:
    return _get(base, _messages, {"page": str(page), **flt})


def _wait(base: str, flt: dict[str, str], timeout: float, read: Callable[[httpx.Response], T]) -> _Call[T]:
    """The first request of a wait; `_Call.again` makes the next ones until `timeout` s have passed."""
    if timeout < 0:
        raise ValueError("timeout must be at least 0")
    this = min(timeout, MAX_WAIT)
    params = {**flt, "timeout": f"{this:g}"}
    return _Call("GET", f"{base}/wait", read, params=params, timeout=this + 15.0, deadline=time.monotonic() + timeout)


# --- paths ---------------------------------------------------------------------------------------------


def _seg(value: str) -> str:
    return quote(value, safe="@")


def _own(mailbox: str) -> str:
    """A mailbox on the token's route."""
    return f"/api/accounts/{_seg(mailbox)}"


def _users(mailbox: str) -> str:
    """A mailbox on the user's route (Pro)."""
    return f"/api/user/accounts/{_seg(mailbox)}"


def _box(mailbox: str) -> str:
    return f"{_own(mailbox)}/messages"


def _account(account_id: str) -> str:
    return f"{_users(account_id)}/messages"


_SANDBOX = "/api/user/sandbox/messages"


def _faults_path(mailbox: str | None) -> str:
    """A mailbox's faults, or the sandbox's (None)."""
    return "/api/user/sandbox/faults" if mailbox is None else f"{_own(mailbox)}/faults"


# --- bodies and queries --------------------------------------------------------------------------------


def _when(value: When) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("since/until need a timezone-aware datetime")
        return value.isoformat()
    return value


def _filters(
    *,
    q: str | None = None,
    from_: str | None = None,
    to: str | None = None,
    subject: str | None = None,
    unread: bool | None = None,
    has_attachments: bool | None = None,
    since: When | None = None,
    until: When | None = None,
    tag: str | None = None,
) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in (("q", q), ("from", from_), ("to", to), ("subject", subject), ("tag", tag)):
        if value is not None:
            out[name] = value
    for name, flag in (("unread", unread), ("has_attachments", has_attachments)):
        if flag is not None:
            out[name] = "true" if flag else "false"
    if since is not None:
        out["since"] = _when(since)
    if until is not None:
        out["until"] = _when(until)
    return out


def _render_query(width: int, full: bool, remote: bool, dark: bool) -> dict[str, str]:
    query = {"width": str(width)}
    query.update({name: "true" for name, on in (("full", full), ("remote", remote), ("dark", dark)) if on})
    return query


def _checks_query(refresh_links: bool) -> dict[str, str] | None:
    return {"refresh": "links"} if refresh_links else None


def _faults_body(rules: Sequence[Mapping[str, Any]], expires_in: int | None) -> Json:
    body: Json = {"rules": [dict(rule) for rule in rules]}
    if expires_in is not None:
        body["expires_in"] = expires_in
    return body


def _new_local() -> str:
    return "test-" + secrets.token_hex(6)


def _new_password() -> str:
    return secrets.token_urlsafe(12)


def _default_domain(domains: list[Json]) -> str:
    for domain in domains:
        if domain.get("default"):
            return str(domain["domain"])
    if not domains:
        raise ApiError(0, "no_domain", "the server lists no public domain to create a mailbox on")
    return str(domains[0]["domain"])


# --- reading answers -----------------------------------------------------------------------------------


def _json(response: httpx.Response) -> Json:
    data: Json = response.json()
    return data


def _nothing(response: httpx.Response) -> None:
    return None


def _bytes(response: httpx.Response) -> bytes:
    return response.content


def _report(response: httpx.Response) -> CheckReport:
    import msgspec

    from inboxd.mail.checks.report import CheckReport

    return msgspec.json.decode(response.content, type=CheckReport)


def _domains(response: httpx.Response) -> list[Json]:
    return list(_json(response)["domains"])


def _tags(response: httpx.Response) -> list[str]:
    return list(_json(response)["tags"])


def _rules(response: httpx.Response) -> list[Json]:
    return list(_json(response)["rules"])


def _count(name: str) -> Callable[[httpx.Response], int]:
    return lambda response: int(_json(response)[name])


def _messages(response: httpx.Response) -> list[MessageSummary]:
    return [MessageSummary.from_json(m) for m in _json(response)["messages"]]


def _message(response: httpx.Response) -> Message:
    return Message.from_json(_json(response))


def _sandbox_message(response: httpx.Response) -> SandboxMessage:
    return SandboxMessage.from_json(_json(response))


def _sandbox_info(response: httpx.Response) -> SandboxInfo:
    return SandboxInfo.from_json(_json(response))


def _mailbox(response: httpx.Response) -> Mailbox:
    return Mailbox.from_json(_json(response))


def _server_info(response: httpx.Response) -> ServerInfo:
    return ServerInfo.from_json(_json(response))


def _error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        code, message = str(body.get("error", "")), str(body.get("message", ""))
    else:
        code, message = "", response.text[:200]
    code = code or f"http_{response.status_code}"
    if response.status_code == 408:
        return WaitTimedOut(408, code, message)
    return ApiError(response.status_code, code, message)


def _retry(response: httpx.Response, attempt: int) -> float | None:
    """How long to wait before sending again (a 429, a few times), or None to read the answer."""
    if response.status_code != 429 or attempt >= _RETRIES_429:
        return None
    try:
        return min(max(float(response.headers.get("Retry-After", "1")), 0.05), _MAX_RETRY_AFTER)
    except ValueError:
        return 1.0


def _not_found(exc: ApiError) -> bool:
    return exc.status == 404 and exc.code == "not_found"


class _Base:
    """What the two clients hold besides their httpx client, and how a `_Call` becomes its arguments."""

    def __init__(self, base_url: str, token: str | None, timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout
        # Mailboxes (as named by the caller) that answered through the user's routes: they go
        # there directly from then on, rather than through a 404 each time.
        self._users: set[str] = set()

    @staticmethod
    def _key(mailbox: str) -> str:
        return mailbox.strip().lower()

    def _request_args(self, call: _Call[Any]) -> dict[str, Any]:
        args: dict[str, Any] = {"params": call.params or None, "headers": self._headers}
        if call.body is not None:
            args["json"] = call.body
        if call.timeout is not None:
            args["timeout"] = httpx.Timeout(self._timeout, read=call.timeout)
        return args
