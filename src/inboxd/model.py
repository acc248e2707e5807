"""The frozen dataclasses the services speak. Table rows never leave `store/`; these do.

Timestamps are Unix seconds as floats; `api/` renders them as ISO 8601.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Literal

import msgspec

Plan = Literal["free", "pro"]
Role = Literal["user", "admin"]
UserStatus = Literal["active", "suspended"]


@dataclass(frozen=True, slots=True)
class User:
    id: str
    email: str
    plan: str
    role: str
    status: str
    created_at: float

    @property
    def is_pro(self) -> bool:
        return self.plan == "pro"


@dataclass(frozen=True, slots=True)
class ApiToken:
    id: str
    user_id: str
    name: str
    created_at: float
    last_used_at: float | None
    revoked_at: float | None
    # The first characters of the value (`ibx_` and four more), for telling tokens apart.
    prefix: str | None = None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: an API token of a user, or a mailbox token naming one mailbox."""

    user: User
    token_id: str | None = None
    mailbox_id: str | None = None
    # The user's own signed-in browser (the dashboard): reaches what the user owns, as `/api/user/*` does.
    session: bool = False

    @property
    def is_mailbox_token(self) -> bool:
        return self.mailbox_id is not None


@dataclass(frozen=True, slots=True)
class WebSession:
    """A browser session. `user` is None while a sign-in is under way; `data` holds the
    provider's state for that sign-in (Authlib's `request.session`)."""

    id: str
    user: User | None
    csrf_token: str
    data: dict[str, object]
    created_at: float
    last_seen_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class Identity:
    """A provider's account (`provider`, `subject`) linked to a user."""

    provider: str
    subject: str
    user_id: str
    email: str
    created_at: float
    last_sign_in_at: float


@dataclass(frozen=True, slots=True)
class PublicDomain:
    id: str
    domain: str
    default: bool
    sort_order: int
    pro_only: bool


@dataclass(frozen=True, slots=True)
class Mailbox:
    id: str
    user_id: str
    token_id: str | None
    address: str
    domain_id: str | None
    quota: int
    used: int
    password_gen: int
    created_at: float
    role: str = "user"
    # "mailbox", or "sandbox" for a user's SMTP sandbox (Pro only, reached with API tokens, no password).
    kind: str = "mailbox"


class MessageSummary(msgspec.Struct, frozen=True):
    """A msgspec Struct rather than a dataclass: a list page builds thirty of these per request,
    and a frozen dataclass's __init__ (one object.__setattr__ per field) is a visible share of it
    (docs/performance.md, "Figures behind the code")."""

    id: str
    mailbox_id: str
    sender: str
    from_: str
    subject: str
    preview_text: str
    size: int
    is_read: bool
    created_at: float
    expires_at: float
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Term:
    """One word of a full-text query; `prefix` when it came with a trailing `*`."""

    text: str
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class MessageFilter:
    """What a list or a wait keeps. Text needles are lowercased; times are Unix seconds."""

    terms: tuple[Term, ...] = ()
    from_: str = ""
    to: str = ""
    subject: str = ""
    unread: bool | None = None
    has_attachments: bool | None = None
    since: float | None = None  # inclusive
    until: float | None = None  # exclusive
    tag: str = ""  # a valid tag (services/tags.py), or "" for any

    @property
    def needs_index(self) -> bool:
        """Whether it reads what only the background indexer fills (full text, recipients,
        attachments): a wait on it must also wake when the index catches up."""
        return bool(self.terms or self.to or self.has_attachments is not None)


NO_FILTER = MessageFilter()


@dataclass(frozen=True, slots=True)
class Attachment:
    index: int
    filename: str
    content_type: str
    size: int


@dataclass(frozen=True, slots=True)
class MessageDetail:
    summary: MessageSummary
    address: str
    text_body: str
    html_body: str
    attachments: tuple[Attachment, ...] = field(default_factory=tuple)
    to: str = ""
    cc: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    codes: tuple[str, ...] = ()
    links: tuple[Link, ...] = ()


@dataclass(frozen=True, slots=True)
class Link:
    url: str
    text: str


@dataclass(frozen=True, slots=True)
class AttachmentContent:
    filename: str
    content_type: str
    data: bytes


@dataclass(frozen=True, slots=True)
class CustomDomain:
    id: str
    user_id: str
    domain: str
    verify_status: str
    verify_token: str
    verified_at: float | None
    mx_configured: bool
    created_at: float


@dataclass(frozen=True, slots=True)
class Webhook:
    id: str
    user_id: str
    url: str
    events: tuple[str, ...]
    secret: str
    status: str
    failure_count: int
    last_triggered_at: float | None
    created_at: float


@dataclass(frozen=True, slots=True)
class Delivery:
    id: str
    webhook_id: str
    event_type: str
    event_id: str
    status_code: int
    error: str | None
    attempt: int
    duration_ms: int
    created_at: float


@dataclass(frozen=True, slots=True)
class NewMailEvent:
    """What the bus carries after a message commits: the spec's `new_email` / `email.received` data."""

    message_id: str
    mailbox_id: str
    user_id: str
    address: str
    sender: str
    from_: str
    subject: str
    preview_text: str
    size: int
    created_at: float


@lru_cache(maxsize=16384)
def _iso_second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def iso(ts: float) -> str:
    """Unix seconds → ISO 8601 in UTC with milliseconds, e.g. 2026-11-21T15:16:00.123Z.

    Every list item carries one, so the part down to the second is memoized (a pure function).
    """
    millis = int(ts * 1000)
    return f"{_iso_second(millis // 1000)}.{millis % 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A user's SMTP sandbox: the username it authenticates as and the mailbox it captures into."""

    user_id: str
    username: str
    mailbox: Mailbox
    created_at: float


@dataclass(frozen=True, slots=True)
class SandboxMessage:
    """A captured message's summary and its envelope recipients (every RCPT, in order)."""

    summary: MessageSummary
    recipients: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RelayAnswer:
    """The relay's answer for one recipient of a release: its RCPT refusal, or the DATA reply."""

    address: str
    accepted: bool
    code: int
    message: str


@dataclass(frozen=True, slots=True)
class Release:
    """One release of a stored message to a relay: who, when, to whom, and the relay's answers."""

    id: str
    user_id: str
    mailbox_id: str
    message_id: str
    created_at: float
    answers: tuple[RelayAnswer, ...]


# SMTP faults (services/faults.py) -------------------------------------------------------------

DEFAULT_RATE_REPLY = "421 4.7.0 Try again later"


class RateRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    messages: int
    per_s: float
    reply: str = DEFAULT_RATE_REPLY


class GreylistRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    min_retry_s: float = 1.0


class Rule(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One rule as the API takes it; `expires_at` (epoch seconds) is set from `expires_in`."""

    stage: str
    reply: str | None = None
    times: int | None = None
    probability: float | None = None
    delay_ms: int | None = None
    disconnect: bool = False
    rate: RateRule | None = None
    greylist: GreylistRule | None = None
    expires_in: int | None = None
    expires_at: float | None = None


@dataclass(frozen=True, slots=True)
class FaultSet:
    """A mailbox's rules as stored; `version` changes at each PUT, so counters start afresh."""

    mailbox_id: str
    version: str
    rules: tuple[Rule, ...]
    stages: frozenset[str]

    def active(self, now: float) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.expires_at is None or r.expires_at > now)
