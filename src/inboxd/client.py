"""A small typed client for the inboxd REST API over httpx: `Client` (sync) and `AsyncClient`.

    from inboxd.client import Client

    with Client("http://127.0.0.1:8025", token="ibx_...") as inboxd:
        box = inboxd.create_mailbox()                   # a random address on the default domain
        ...                                             # the code under test sends mail to box.address
        msg = inboxd.wait_for(box.address, subject="Verify", timeout=30)
        print(msg.code, msg.links[0].url)

Every operation is described once (`_Call`: method, path, query, body and how to read the
answer) and run by either client, so the two cannot drift apart. Mailboxes are named by id or
address wherever the API accepts either. Errors answer `ApiError` with the API's `error` code;
a wait that ends without a message raises `WaitTimedOut`. A 429 is retried after its
`Retry-After` (a few times, at most 10 s each), so a test suite may run into the rate limits of a
shared server without failing.

`/api/accounts/...` answers only for the mailboxes the token made; the user's other mailboxes (made
in the dashboard, or with another token) answer 404 there and are reached through the user's routes
(`/api/user/accounts/{id}/...`, Pro). Listing, waiting, reading a message, deleting and resetting
a password try the token's route, then the user's on a 404, and remember which one answered.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar, Unpack
from urllib.parse import quote

import httpx

if TYPE_CHECKING:
    from inboxd.mail.checks.report import CheckReport

__all__ = [
    "ApiError",
    "AsyncClient",
    "Attachment",
    "Client",
    "Filters",
    "Link",
    "Mailbox",
    "Message",
    "MessageSummary",
    "NoCodeFound",
    "SandboxInfo",
    "SandboxMessage",
    "ServerInfo",
    "WaitTimedOut",
]

T = TypeVar("T")
Json = dict[str, Any]
When = datetime | str

MAX_WAIT = 60.0  # the server's largest `timeout`; longer waits are made of several requests
_RETRIES_429 = 5
_MAX_RETRY_AFTER = 10.0


# --- errors --------------------------------------------------------------------------------------------


class ApiError(Exception):
    """An answer other than 2xx: `status`, the API's `code` (`error`) and `message`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}" if message else f"{status} {code}")
        self.status = status
        self.code = code
        self.message = message


class WaitTimedOut(ApiError):
    """No message matched within the wait's timeout (408 `timeout`)."""


class NoCodeFound(AssertionError):
    """`Message.code` on a message in which no one-time code was found."""


# --- results -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Link:
    url: str
    text: str


@dataclass(frozen=True, slots=True)
class Attachment:
    index: int
    filename: str
    content_type: str
    size: int


@dataclass(frozen=True, slots=True)
class Mailbox:
    id: str
    address: str
    quota: int = 0
    used: int = 0
    created_at: str = ""
    role: str = ""
    token: str = ""  # a mailbox token, when the mailbox was just created or signed in to

    @classmethod
    def from_json(cls, data: Json) -> Mailbox:
        return cls(
            id=data["id"],
            address=data["address"],
            quota=data.get("quota", 0),
            used=data.get("used", 0),
            created_at=data.get("created_at", ""),
            role=data.get("role", ""),
            token=data.get("token", ""),
        )


@dataclass(frozen=True, slots=True)
class MessageSummary:
    """A message as lists show it."""

    id: str
    sender: str
    from_: str
    subject: str
    preview_text: str
    size: int
    is_read: bool
    created_at: str
    recipients: tuple[str, ...] = ()  # sandbox lists only: the envelope recipients
    tags: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Json) -> MessageSummary:
        return cls(
            id=data["id"],
            sender=data["sender"],
            from_=data["from"],
            subject=data["subject"],
            preview_text=data["preview_text"],
            size=data["size"],
            is_read=data["is_read"],
            created_at=data["created_at"],
            recipients=tuple(data.get("recipients", ())),
            tags=tuple(data.get("tags", ())),
        )


@dataclass(frozen=True, slots=True)
class _Detail:
    id: str
    sender: str
    from_: str
    subject: str
    address: str
    size: int
    created_at: str
    text_body: str
    html_body: str
    attachments: tuple[Attachment, ...]
    is_read: bool
    headers: tuple[tuple[str, str], ...]
    codes: tuple[str, ...]
    links: tuple[Link, ...]
    tags: tuple[str, ...]
    raw: Json = field(repr=False, compare=False)

    @property
    def code(self) -> str:
        """The most likely one-time code; raises `NoCodeFound` (an AssertionError) when there is none."""
        if not self.codes:
            preview = " ".join((self.text_body or self.html_body).split())[:300]
            raise NoCodeFound(f"no one-time code found in message {self.subject!r} from {self.from_}: {preview!r}")
        return self.codes[0]

    def header(self, name: str) -> str | None:
        """The first header of that name (any case), decoded; None when absent."""
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), None)

    @staticmethod
    def _common(data: Json) -> Json:
        return {
            "id": data["id"],
            "sender": data["sender"],
            "from_": data["from"],
            "subject": data["subject"],
            "address": data["address"],
            "size": data["size"],
            "created_at": data["created_at"],
            "text_body": data["text_body"],
            "html_body": data["html_body"],
            "attachments": tuple(Attachment(**a) for a in data["attachments"]),
            "is_read": data.get("is_read", False),
            "headers": tuple((name, value) for name, value in data.get("headers", ())),
            "codes": tuple(data.get("codes", ())),
            "links": tuple(Link(url=link["url"], text=link["text"]) for link in data.get("links", ())),
            "tags": tuple(data.get("tags", ())),
            "raw": data,
        }


@dataclass(frozen=True, slots=True)
class Message(_Detail):
    """A message detail: bodies, attachments, and the codes and links found in it."""

    to: str = ""  # "Name <addr>, addr2", as `from_`
    cc: str = ""

    @classmethod
    def from_json(cls, data: Json) -> Message:
        return cls(**cls._common(data), to=data.get("to", ""), cc=data.get("cc", ""))


@dataclass(frozen=True, slots=True)
class SandboxMessage(_Detail):
    """A message the SMTP sandbox captured: the detail plus where it was sent."""

    recipients: tuple[str, ...] = ()
    to: str = ""  # as in `Message`; the envelope is in `recipients`
    cc: str = ""
    bcc: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Json) -> SandboxMessage:
        return cls(
            **cls._common(data),
            recipients=tuple(data.get("recipients", ())),
            to=data.get("to", ""),
            cc=data.get("cc", ""),
            bcc=tuple(data.get("bcc", ())),
        )


@dataclass(frozen=True, slots=True)
class SandboxInfo:
    smtp_host: str
    smtp_port: int
    username: str
    address: str
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Json) -> SandboxInfo:
        return cls(
            smtp_host=data["smtp_host"],
            smtp_port=data["smtp_port"],
            username=data["username"],
            address=data["address"],
            raw=data,
        )


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """`GET /api/server`: the server's version and where its SMTP listener receives mail."""

    version: str
    smtp_host: str
    smtp_port: int
    raw: Json = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Json) -> ServerInfo:
        smtp = data["smtp"]
        return cls(version=data["version"], smtp_host=smtp["host"], smtp_port=smtp["port"], raw=data)


# --- operations ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Call(Generic[T]):
    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    timeout: float | None = None  # read timeout of this request; None: the client's


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


def _checks(mailbox: str, message_id: str, refresh_links: bool) -> _Call[CheckReport]:
    query = {"refresh": "links"} if refresh_links else None
    return _Ops.get(f"{_box(mailbox)}/{_seg(message_id)}/checks", _report, query)


def _sandbox_checks(message_id: str, refresh_links: bool) -> _Call[CheckReport]:
    query = {"refresh": "links"} if refresh_links else None
    return _Ops.get(f"{_SANDBOX}/{_seg(message_id)}/checks", _report, query)


def _render(base: str, message_id: str, *, width: int, full: bool, remote: bool, dark: bool) -> _Call[bytes]:
    query = {"width": str(width)}
    query.update({name: "true" for name, on in (("full", full), ("remote", remote), ("dark", dark)) if on})
    return _Ops.get(f"{base}/{_seg(message_id)}/render.png", _bytes, query)


def _seg(value: str) -> str:
    return quote(value, safe="@")


def _when(value: When) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("since/until need a timezone-aware datetime")
        return value.isoformat()
    return value


class Filters(TypedDict, total=False):
    """The filters of message lists and waits; `from_` is the API's `from`."""

    q: str  # full text: every word must match; `word*` matches a prefix
    from_: str
    to: str
    subject: str
    unread: bool
    has_attachments: bool
    since: When  # RFC 3339 string or aware datetime; created_at at or after it
    until: When
    tag: str  # only messages carrying this tag


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


def _tags(response: httpx.Response) -> list[str]:
    return list(_json(response)["tags"])


def _set_tags(mailbox: str, message_id: str, tags: Sequence[str]) -> _Call[list[str]]:
    return _Ops.send("PUT", f"{_box(mailbox)}/{_seg(message_id)}/tags", _tags, {"tags": list(tags)})


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


class _Ops:
    """Every API operation as a `_Call`; the clients run them."""

    @staticmethod
    def health() -> _Call[Json]:
        return _Call("GET", "/healthz", _json)

    @staticmethod
    def domains() -> _Call[list[Json]]:
        return _Call("GET", "/api/domains", lambda r: list(_json(r)["domains"]))

    @staticmethod
    def create_mailbox(address: str, password: str) -> _Call[Mailbox]:
        return _Call("POST", "/api/accounts", _mailbox, body={"address": address, "password": password})

    @staticmethod
    def sign_in(address: str, password: str) -> _Call[Mailbox]:
        return _Call("POST", "/api/token", _mailbox, body={"address": address, "password": password})

    @staticmethod
    def mailbox(mailbox: str) -> _Call[Mailbox]:
        return _Call("GET", f"/api/accounts/{_seg(mailbox)}", _mailbox)

    @staticmethod
    def delete_mailbox(mailbox: str) -> _Call[None]:
        return _Call("DELETE", f"/api/accounts/{_seg(mailbox)}", _nothing)

    @staticmethod
    def reset_password(mailbox: str, password: str) -> _Call[None]:
        return _Call("PUT", f"/api/accounts/{_seg(mailbox)}/reset-password", _nothing, body={"password": password})

    @staticmethod
    def delete_account(account: str) -> _Call[None]:
        return _Call("DELETE", f"/api/user/accounts/{_seg(account)}", _nothing)

    @staticmethod
    def reset_account_password(account: str, password: str) -> _Call[None]:
        path = f"/api/user/accounts/{_seg(account)}/reset-password"
        return _Call("PUT", path, _nothing, body={"password": password})

    @staticmethod
    def messages(base: str, page: int, flt: dict[str, str]) -> _Call[list[MessageSummary]]:
        return _Call("GET", base, _messages, params={"page": str(page), **flt})

    @staticmethod
    def wait(base: str, flt: dict[str, str], timeout: float, read: Callable[[httpx.Response], T]) -> _Call[T]:
        params = {**flt, "timeout": f"{timeout:g}"}
        return _Call("GET", f"{base}/wait", read, params=params, timeout=timeout + 15.0)

    @staticmethod
    def get(path: str, read: Callable[[httpx.Response], T], params: Mapping[str, str] | None = None) -> _Call[T]:
        return _Call("GET", path, read, params=dict(params or {}))

    @staticmethod
    def send(method: str, path: str, read: Callable[[httpx.Response], T], body: Any = None) -> _Call[T]:
        return _Call(method, path, read, body=body)


def _box(mailbox: str) -> str:
    return f"/api/accounts/{_seg(mailbox)}/messages"


def _account(account_id: str) -> str:
    return f"/api/user/accounts/{_seg(account_id)}/messages"


_SANDBOX = "/api/user/sandbox/messages"


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


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(max(float(response.headers.get("Retry-After", "1")), 0.05), _MAX_RETRY_AFTER)
    except ValueError:
        return 1.0


def _new_local() -> str:
    return "test-" + secrets.token_hex(6)


def _wait_slices(timeout: float) -> tuple[float, float]:
    """This request's timeout and the deadline of the whole wait."""
    if timeout < 0:
        raise ValueError("timeout must be at least 0")
    return min(timeout, MAX_WAIT), time.monotonic() + timeout


# --- the clients ---------------------------------------------------------------------------------------


def _not_found(exc: ApiError) -> bool:
    return exc.status == 404 and exc.code == "not_found"


class _Base:
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


# --- SMTP faults (issue 27): the calls both clients share -------------------------------------------


def _faults_path(mailbox: str | None) -> str:
    """A mailbox's faults, or the sandbox's (None)."""
    return "/api/user/sandbox/faults" if mailbox is None else f"/api/accounts/{_seg(mailbox)}/faults"


def _rules(response: httpx.Response) -> list[Json]:
    return list(_json(response)["rules"])


def _faults_body(rules: Sequence[Mapping[str, Any]], expires_in: int | None) -> Json:
    body: Json = {"rules": [dict(rule) for rule in rules]}
    if expires_in is not None:
        body["expires_in"] = expires_in
    return body


class _FaultCalls:
    """`Client`'s SMTP fault calls: a PUT replaces a mailbox's (or the sandbox's) rules."""

    def _run(self, call: _Call[T]) -> T:
        raise NotImplementedError

    def set_faults(
        self, mailbox: str, rules: Sequence[Mapping[str, Any]], *, expires_in: int | None = None
    ) -> list[Json]:
        return self._run(_Ops.send("PUT", _faults_path(mailbox), _rules, _faults_body(rules, expires_in)))

    def faults(self, mailbox: str) -> list[Json]:
        return self._run(_Ops.get(_faults_path(mailbox), _rules))

    def clear_faults(self, mailbox: str) -> None:
        self._run(_Ops.send("DELETE", _faults_path(mailbox), _nothing))

    def set_sandbox_faults(self, rules: Sequence[Mapping[str, Any]], *, expires_in: int | None = None) -> list[Json]:
        return self._run(_Ops.send("PUT", _faults_path(None), _rules, _faults_body(rules, expires_in)))

    def sandbox_faults(self) -> list[Json]:
        return self._run(_Ops.get(_faults_path(None), _rules))

    def clear_sandbox_faults(self) -> None:
        self._run(_Ops.send("DELETE", _faults_path(None), _nothing))


class _AsyncFaultCalls:
    """`AsyncClient`'s SMTP fault calls, the same as `Client`'s, awaited."""

    async def _run(self, call: _Call[T]) -> T:
        raise NotImplementedError

    async def set_faults(
        self, mailbox: str, rules: Sequence[Mapping[str, Any]], *, expires_in: int | None = None
    ) -> list[Json]:
        return await self._run(_Ops.send("PUT", _faults_path(mailbox), _rules, _faults_body(rules, expires_in)))

    async def faults(self, mailbox: str) -> list[Json]:
        return await self._run(_Ops.get(_faults_path(mailbox), _rules))

    async def clear_faults(self, mailbox: str) -> None:
        await self._run(_Ops.send("DELETE", _faults_path(mailbox), _nothing))

    async def set_sandbox_faults(
        self, rules: Sequence[Mapping[str, Any]], *, expires_in: int | None = None
    ) -> list[Json]:
        return await self._run(_Ops.send("PUT", _faults_path(None), _rules, _faults_body(rules, expires_in)))

    async def sandbox_faults(self) -> list[Json]:
        return await self._run(_Ops.get(_faults_path(None), _rules))

    async def clear_sandbox_faults(self) -> None:
        await self._run(_Ops.send("DELETE", _faults_path(None), _nothing))


class Client(_FaultCalls, _Base):
    """The synchronous client. `token`: an API token (Pro or admin for `/api/user/*`) or a mailbox token."""

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
        for attempt in range(_RETRIES_429 + 1):
            response = self._http.request(call.method, call.path, **self._request_args(call))
            if response.status_code == 429 and attempt < _RETRIES_429:
                time.sleep(_retry_after(response))
                continue
            if response.is_success:
                return call.read(response)
            raise _error(response)
        raise AssertionError("unreachable")

    def _either(self, mailbox: str, own: Callable[[], T], users: Callable[[], T]) -> T:
        """`own` (the token's route); on its 404, `users` (the user's route), whose own refusal
        (403 for a free plan or a mailbox token, 404) gives way to the first 404."""
        key = self._key(mailbox)
        if key in self._users:
            return users()
        try:
            return own()
        except ApiError as exc:
            if not _not_found(exc):
                raise
            try:
                found = users()
            except ApiError as again:
                if again.status in (403, 404):
                    raise exc from None
                raise
            self._users.add(key)
            return found

    # mailboxes
    def health(self) -> Json:
        return self._run(_Ops.health())

    def server(self) -> ServerInfo:
        """The server's version and where its SMTP listener receives mail (`GET /api/server`)."""
        return self._run(_Ops.get("/api/server", _server_info))

    def domains(self) -> list[Json]:
        return self._run(_Ops.domains())

    def create_mailbox(self, address: str | None = None, password: str | None = None) -> Mailbox:
        """A new mailbox; without `address`, a random one on the server's default domain."""
        if address is None:
            address = f"{_new_local()}@{_default_domain(self.domains())}"
        return self._run(_Ops.create_mailbox(address, password or secrets.token_urlsafe(12)))

    def sign_in(self, address: str, password: str) -> Mailbox:
        return self._run(_Ops.sign_in(address, password))

    def mailbox(self, mailbox: str) -> Mailbox:
        return self._run(_Ops.mailbox(mailbox))

    def delete_mailbox(self, mailbox: str) -> None:
        self._either(
            mailbox,
            lambda: self._run(_Ops.delete_mailbox(mailbox)),
            lambda: self._run(_Ops.delete_account(mailbox)),
        )

    def reset_password(self, mailbox: str, password: str) -> None:
        self._either(
            mailbox,
            lambda: self._run(_Ops.reset_password(mailbox, password)),
            lambda: self._run(_Ops.reset_account_password(mailbox, password)),
        )

    # messages
    def messages(self, mailbox: str, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        """A page of 30, newest first. Filters: q, from_, to, subject, unread, has_attachments, since, until, tag."""
        flt = _filters(**filters)
        return self._either(
            mailbox,
            lambda: self._run(_Ops.messages(_box(mailbox), page, flt)),
            lambda: self._run(_Ops.messages(_account(mailbox), page, flt)),
        )

    def message(self, mailbox: str, message_id: str) -> Message:
        return self._either(
            mailbox,
            lambda: self._run(_Ops.get(f"{_box(mailbox)}/{_seg(message_id)}", _message)),
            lambda: self._run(_Ops.get(f"{_account(mailbox)}/{_seg(message_id)}", _message)),
        )

    def wait_for(self, mailbox: str, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> Message:
        """The newest message the filters keep, once there is one; `WaitTimedOut` after `timeout` s."""
        flt = _filters(**filters)
        return self._either(
            mailbox,
            lambda: self._wait(_box(mailbox), flt, timeout, _message),
            lambda: self._wait(_account(mailbox), flt, timeout, _message),
        )

    def source(self, mailbox: str, message_id: str) -> bytes:
        return self._run(_Ops.get(f"{_box(mailbox)}/{_seg(message_id)}/source", _bytes))

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
        return self._run(_render(_box(mailbox), message_id, width=width, full=full, remote=remote, dark=dark))

    def render_sandbox(self, message_id: str, *, width: int = 600, full: bool = False, dark: bool = False) -> bytes:
        """As `render`, for a message the SMTP sandbox captured."""
        return self._run(_render(_SANDBOX, message_id, width=width, full=full, remote=False, dark=dark))

    def checks(self, mailbox: str, message_id: str, *, refresh_links: bool = False) -> CheckReport:
        """The message's check report (computed by the server at the first request, then kept)."""
        return self._run(_checks(mailbox, message_id, refresh_links))

    def attachment(self, mailbox: str, message_id: str, index: int) -> bytes:
        return self._run(_Ops.get(f"{_box(mailbox)}/{_seg(message_id)}/attachments/{index}", _bytes))

    def mark_read(self, mailbox: str, message_id: str) -> None:
        self._run(_Ops.send("PUT", f"{_box(mailbox)}/{_seg(message_id)}/read", _nothing))

    def mark_all_read(self, mailbox: str) -> int:
        return int(self._run(_Ops.send("PUT", f"{_box(mailbox)}/read", _json, {"all": True}))["updated"])

    def delete_message(self, mailbox: str, message_id: str) -> None:
        self._run(_Ops.send("DELETE", f"{_box(mailbox)}/{_seg(message_id)}", _nothing))

    def set_tags(self, mailbox: str, message_id: str, tags: Sequence[str]) -> list[str]:
        """Replace the message's tags; returns them as kept (lowercase, repeats removed)."""
        return self._run(_set_tags(mailbox, message_id, tags))

    # Pro: the user's mailboxes, domains, tokens, webhooks
    def me(self) -> Json:
        return self._run(_Ops.get("/api/user/me", _json))

    def accounts(self, cursor: str = "") -> Json:
        return self._run(_Ops.get("/api/user/accounts", _json, {"cursor": cursor} if cursor else None))

    def delete_account(self, account_id: str) -> None:
        self._run(_Ops.delete_account(account_id))

    def account_messages(self, account_id: str, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        return self._run(_Ops.messages(_account(account_id), page, _filters(**filters)))

    def wait_for_account(self, account_id: str, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> Message:
        return self._wait(_account(account_id), _filters(**filters), timeout, _message)

    def user_domains(self) -> Json:
        return self._run(_Ops.get("/api/user/domains", _json))

    def add_domain(self, domain: str) -> Json:
        return self._run(_Ops.send("POST", "/api/user/domains", _json, {"domain": domain}))

    def verify_domain(self, domain_id: str) -> Json:
        return self._run(_Ops.send("POST", f"/api/user/domains/{_seg(domain_id)}/verify", _json))

    def delete_domain(self, domain_id: str) -> None:
        self._run(_Ops.send("DELETE", f"/api/user/domains/{_seg(domain_id)}", _nothing))

    def tokens(self) -> Json:
        return self._run(_Ops.get("/api/user/tokens", _json))

    def create_token(self, name: str) -> Json:
        return self._run(_Ops.send("POST", "/api/user/tokens", _json, {"name": name}))

    def revoke_token(self, token_id: str) -> None:
        self._run(_Ops.send("DELETE", f"/api/user/tokens/{_seg(token_id)}", _nothing))

    def webhooks(self) -> Json:
        return self._run(_Ops.get("/api/user/webhooks", _json))

    def create_webhook(self, url: str, events: list[str]) -> Json:
        return self._run(_Ops.send("POST", "/api/user/webhooks", _json, {"url": url, "events": events}))

    def delete_webhook(self, webhook_id: str) -> None:
        self._run(_Ops.send("DELETE", f"/api/user/webhooks/{_seg(webhook_id)}", _nothing))

    def rotate_webhook_secret(self, webhook_id: str) -> Json:
        return self._run(_Ops.send("POST", f"/api/user/webhooks/{_seg(webhook_id)}/rotate", _json))

    def deliveries(self, webhook_id: str) -> Json:
        return self._run(_Ops.get(f"/api/user/webhooks/{_seg(webhook_id)}/deliveries", _json))

    # Pro: the SMTP sandbox
    def sandbox(self) -> SandboxInfo:
        return self._run(_Ops.get("/api/user/sandbox", _sandbox_info))

    def sandbox_messages(self, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        return self._run(_Ops.messages(_SANDBOX, page, _filters(**filters)))

    def sandbox_message(self, message_id: str) -> SandboxMessage:
        return self._run(_Ops.get(f"{_SANDBOX}/{_seg(message_id)}", _sandbox_message))

    def wait_for_sandbox(self, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> SandboxMessage:
        return self._wait(_SANDBOX, _filters(**filters), timeout, _sandbox_message)

    def sandbox_checks(self, message_id: str, *, refresh_links: bool = False) -> CheckReport:
        """The check report of a message the sandbox caught."""
        return self._run(_sandbox_checks(message_id, refresh_links))

    def delete_sandbox_message(self, message_id: str) -> None:
        self._run(_Ops.send("DELETE", f"{_SANDBOX}/{_seg(message_id)}", _nothing))

    def purge_sandbox(self) -> int:
        return int(self._run(_Ops.send("DELETE", _SANDBOX, _json))["deleted"])

    def _wait(self, base: str, flt: dict[str, str], timeout: float, read: Callable[[httpx.Response], T]) -> T:
        this, deadline = _wait_slices(timeout)
        while True:
            try:
                return self._run(_Ops.wait(base, flt, this, read))
            except WaitTimedOut:
                left = deadline - time.monotonic()
                if left <= 0.05:
                    raise
                this = min(left, MAX_WAIT)

    # Release (issue 27): send a caught message on through the server's relay.
    def release(self, mailbox: str, message_id: str, to: list[str]) -> Json:
        """The release record: `recipients`, the relay's answer for each (`accepted`, `code`, `message`)."""
        return self._run(_Ops.send("POST", f"{_box(mailbox)}/{_seg(message_id)}/release", _json, {"to": to}))

    def releases(self, mailbox: str, message_id: str) -> Json:
        return self._run(_Ops.get(f"{_box(mailbox)}/{_seg(message_id)}/releases", _json))

    def release_sandbox_message(self, message_id: str, to: list[str]) -> Json:
        return self._run(_Ops.send("POST", f"{_SANDBOX}/{_seg(message_id)}/release", _json, {"to": to}))

    def sandbox_releases(self, message_id: str) -> Json:
        return self._run(_Ops.get(f"{_SANDBOX}/{_seg(message_id)}/releases", _json))


class AsyncClient(_AsyncFaultCalls, _Base):
    """The asyncio client; the same operations as `Client`, awaited.

    A wait's `timeout` is the server's (how long it holds the request), not a local deadline, so
    the waits take it as a parameter rather than leaving it to `asyncio.timeout`.
    """

    def __init__(
        self, base_url: str, token: str | None = None, *, timeout: float = 30.0, http: httpx.AsyncClient | None = None
    ) -> None:
        super().__init__(base_url, token, timeout)
        self._http = http or httpx.AsyncClient(base_url=self.base_url, timeout=timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _run(self, call: _Call[T]) -> T:
        for attempt in range(_RETRIES_429 + 1):
            response = await self._http.request(call.method, call.path, **self._request_args(call))
            if response.status_code == 429 and attempt < _RETRIES_429:
                await asyncio.sleep(_retry_after(response))
                continue
            if response.is_success:
                return call.read(response)
            raise _error(response)
        raise AssertionError("unreachable")

    async def _either(self, mailbox: str, own: Callable[[], Awaitable[T]], users: Callable[[], Awaitable[T]]) -> T:
        """As `Client._either`."""
        key = self._key(mailbox)
        if key in self._users:
            return await users()
        try:
            return await own()
        except ApiError as exc:
            if not _not_found(exc):
                raise
            try:
                found = await users()
            except ApiError as again:
                if again.status in (403, 404):
                    raise exc from None
                raise
            self._users.add(key)
            return found

    async def health(self) -> Json:
        return await self._run(_Ops.health())

    async def server(self) -> ServerInfo:
        return await self._run(_Ops.get("/api/server", _server_info))

    async def domains(self) -> list[Json]:
        return await self._run(_Ops.domains())

    async def create_mailbox(self, address: str | None = None, password: str | None = None) -> Mailbox:
        if address is None:
            address = f"{_new_local()}@{_default_domain(await self.domains())}"
        return await self._run(_Ops.create_mailbox(address, password or secrets.token_urlsafe(12)))

    async def sign_in(self, address: str, password: str) -> Mailbox:
        return await self._run(_Ops.sign_in(address, password))

    async def mailbox(self, mailbox: str) -> Mailbox:
        return await self._run(_Ops.mailbox(mailbox))

    async def delete_mailbox(self, mailbox: str) -> None:
        await self._either(
            mailbox,
            lambda: self._run(_Ops.delete_mailbox(mailbox)),
            lambda: self._run(_Ops.delete_account(mailbox)),
        )

    async def reset_password(self, mailbox: str, password: str) -> None:
        await self._either(
            mailbox,
            lambda: self._run(_Ops.reset_password(mailbox, password)),
            lambda: self._run(_Ops.reset_account_password(mailbox, password)),
        )

    async def messages(self, mailbox: str, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        flt = _filters(**filters)
        return await self._either(
            mailbox,
            lambda: self._run(_Ops.messages(_box(mailbox), page, flt)),
            lambda: self._run(_Ops.messages(_account(mailbox), page, flt)),
        )

    async def message(self, mailbox: str, message_id: str) -> Message:
        return await self._either(
            mailbox,
            lambda: self._run(_Ops.get(f"{_box(mailbox)}/{_seg(message_id)}", _message)),
            lambda: self._run(_Ops.get(f"{_account(mailbox)}/{_seg(message_id)}", _message)),
        )

    async def wait_for(self, mailbox: str, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> Message:  # noqa: ASYNC109
        flt = _filters(**filters)
        return await self._either(
            mailbox,
            lambda: self._wait(_box(mailbox), flt, timeout, _message),
            lambda: self._wait(_account(mailbox), flt, timeout, _message),
        )

    async def source(self, mailbox: str, message_id: str) -> bytes:
        return await self._run(_Ops.get(f"{_box(mailbox)}/{_seg(message_id)}/source", _bytes))

    async def render(
        self,
        mailbox: str,
        message_id: str,
        *,
        width: int = 600,
        full: bool = False,
        remote: bool = False,
        dark: bool = False,
    ) -> bytes:
        """The HTML body as a PNG (see `Client.render`)."""
        return await self._run(_render(_box(mailbox), message_id, width=width, full=full, remote=remote, dark=dark))

    async def render_sandbox(
        self, message_id: str, *, width: int = 600, full: bool = False, dark: bool = False
    ) -> bytes:
        """As `render`, for a message the SMTP sandbox captured."""
        return await self._run(_render(_SANDBOX, message_id, width=width, full=full, remote=False, dark=dark))

    async def checks(self, mailbox: str, message_id: str, *, refresh_links: bool = False) -> CheckReport:
        """The message's check report (computed by the server at the first request, then kept)."""
        return await self._run(_checks(mailbox, message_id, refresh_links))

    async def attachment(self, mailbox: str, message_id: str, index: int) -> bytes:
        return await self._run(_Ops.get(f"{_box(mailbox)}/{_seg(message_id)}/attachments/{index}", _bytes))

    async def mark_read(self, mailbox: str, message_id: str) -> None:
        await self._run(_Ops.send("PUT", f"{_box(mailbox)}/{_seg(message_id)}/read", _nothing))

    async def mark_all_read(self, mailbox: str) -> int:
        return int((await self._run(_Ops.send("PUT", f"{_box(mailbox)}/read", _json, {"all": True})))["updated"])

    async def delete_message(self, mailbox: str, message_id: str) -> None:
        await self._run(_Ops.send("DELETE", f"{_box(mailbox)}/{_seg(message_id)}", _nothing))

    async def set_tags(self, mailbox: str, message_id: str, tags: Sequence[str]) -> list[str]:
        """Replace the message's tags; returns them as kept (lowercase, repeats removed)."""
        return await self._run(_set_tags(mailbox, message_id, tags))

    async def me(self) -> Json:
        return await self._run(_Ops.get("/api/user/me", _json))

    async def accounts(self, cursor: str = "") -> Json:
        return await self._run(_Ops.get("/api/user/accounts", _json, {"cursor": cursor} if cursor else None))

    async def delete_account(self, account_id: str) -> None:
        await self._run(_Ops.delete_account(account_id))

    async def account_messages(
        self, account_id: str, page: int = 1, **filters: Unpack[Filters]
    ) -> list[MessageSummary]:
        return await self._run(_Ops.messages(_account(account_id), page, _filters(**filters)))

    async def wait_for_account(self, account_id: str, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> Message:  # noqa: ASYNC109
        return await self._wait(_account(account_id), _filters(**filters), timeout, _message)

    async def user_domains(self) -> Json:
        return await self._run(_Ops.get("/api/user/domains", _json))

    async def add_domain(self, domain: str) -> Json:
        return await self._run(_Ops.send("POST", "/api/user/domains", _json, {"domain": domain}))

    async def verify_domain(self, domain_id: str) -> Json:
        return await self._run(_Ops.send("POST", f"/api/user/domains/{_seg(domain_id)}/verify", _json))

    async def delete_domain(self, domain_id: str) -> None:
        await self._run(_Ops.send("DELETE", f"/api/user/domains/{_seg(domain_id)}", _nothing))

    async def tokens(self) -> Json:
        return await self._run(_Ops.get("/api/user/tokens", _json))

    async def create_token(self, name: str) -> Json:
        return await self._run(_Ops.send("POST", "/api/user/tokens", _json, {"name": name}))

    async def revoke_token(self, token_id: str) -> None:
        await self._run(_Ops.send("DELETE", f"/api/user/tokens/{_seg(token_id)}", _nothing))

    async def webhooks(self) -> Json:
        return await self._run(_Ops.get("/api/user/webhooks", _json))

    async def create_webhook(self, url: str, events: list[str]) -> Json:
        return await self._run(_Ops.send("POST", "/api/user/webhooks", _json, {"url": url, "events": events}))

    async def delete_webhook(self, webhook_id: str) -> None:
        await self._run(_Ops.send("DELETE", f"/api/user/webhooks/{_seg(webhook_id)}", _nothing))

    async def rotate_webhook_secret(self, webhook_id: str) -> Json:
        return await self._run(_Ops.send("POST", f"/api/user/webhooks/{_seg(webhook_id)}/rotate", _json))

    async def deliveries(self, webhook_id: str) -> Json:
        return await self._run(_Ops.get(f"/api/user/webhooks/{_seg(webhook_id)}/deliveries", _json))

    async def sandbox(self) -> SandboxInfo:
        return await self._run(_Ops.get("/api/user/sandbox", _sandbox_info))

    async def sandbox_messages(self, page: int = 1, **filters: Unpack[Filters]) -> list[MessageSummary]:
        return await self._run(_Ops.messages(_SANDBOX, page, _filters(**filters)))

    async def sandbox_message(self, message_id: str) -> SandboxMessage:
        return await self._run(_Ops.get(f"{_SANDBOX}/{_seg(message_id)}", _sandbox_message))

    async def wait_for_sandbox(self, *, timeout: float = 30.0, **filters: Unpack[Filters]) -> SandboxMessage:  # noqa: ASYNC109
        return await self._wait(_SANDBOX, _filters(**filters), timeout, _sandbox_message)

    async def sandbox_checks(self, message_id: str, *, refresh_links: bool = False) -> CheckReport:
        """The check report of a message the sandbox caught."""
        return await self._run(_sandbox_checks(message_id, refresh_links))

    async def delete_sandbox_message(self, message_id: str) -> None:
        await self._run(_Ops.send("DELETE", f"{_SANDBOX}/{_seg(message_id)}", _nothing))

    async def purge_sandbox(self) -> int:
        return int((await self._run(_Ops.send("DELETE", _SANDBOX, _json)))["deleted"])

    async def _wait(self, base: str, flt: dict[str, str], timeout: float, read: Callable[[httpx.Response], T]) -> T:  # noqa: ASYNC109
        this, deadline = _wait_slices(timeout)
        while True:
            try:
                return await self._run(_Ops.wait(base, flt, this, read))
            except WaitTimedOut:
                left = deadline - time.monotonic()
                if left <= 0.05:
                    raise
                this = min(left, MAX_WAIT)

    # Release (issue 27): send a caught message on through the server's relay.
    async def release(self, mailbox: str, message_id: str, to: list[str]) -> Json:
        """The release record: `recipients`, the relay's answer for each (`accepted`, `code`, `message`)."""
        return await self._run(_Ops.send("POST", f"{_box(mailbox)}/{_seg(message_id)}/release", _json, {"to": to}))

    async def releases(self, mailbox: str, message_id: str) -> Json:
        return await self._run(_Ops.get(f"{_box(mailbox)}/{_seg(message_id)}/releases", _json))

    async def release_sandbox_message(self, message_id: str, to: list[str]) -> Json:
        return await self._run(_Ops.send("POST", f"{_SANDBOX}/{_seg(message_id)}/release", _json, {"to": to}))

    async def sandbox_releases(self, message_id: str) -> Json:
        return await self._run(_Ops.get(f"{_SANDBOX}/{_seg(message_id)}/releases", _json))


def _default_domain(domains: list[Json]) -> str:
    for domain in domains:
        if domain.get("default"):
            return str(domain["domain"])
    if not domains:
        raise ApiError(0, "no_domain", "the server lists no public domain to create a mailbox on")
    return str(domains[0]["domain"])
