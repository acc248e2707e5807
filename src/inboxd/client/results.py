"""What the client's calls answer: the errors and the frozen results read from the API's JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

Json = dict[str, Any]
When = datetime | str


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
    # A list, as the API's JSON has it, so `msg.tags == ["signup"]` reads as a test means it.
    tags: list[str] = field(default_factory=list)

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
            tags=list(data.get("tags", ())),
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
    tags: list[str]
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
            "tags": list(data.get("tags", ())),
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
