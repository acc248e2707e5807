"""Request bodies and response shapes (msgspec structs), and the encoders from model objects.

Responses are built field by field here, so a new column never becomes an API field by accident.
The same structs describe the API: `api/openapi.py` turns them into the OpenAPI document, so a
handler that answers one of these answers exactly what the document says.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from inboxd.model import (
    ApiToken,
    CustomDomain,
    Delivery,
    Mailbox,
    MessageDetail,
    MessageSummary,
    PublicDomain,
    SandboxMessage,
    Webhook,
    iso,
)
from inboxd.services.domains import DnsRecord, Verification
from inboxd.services.profile import Profile
from inboxd.services.sandbox import SandboxDetail, SandboxInfo

Uuid = Annotated[
    str, msgspec.Meta(extra_json_schema={"format": "uuid"}, examples=["0b7c6e1e-5a8e-4c43-9a57-2d1f0e1e9c11"])
]
Timestamp = Annotated[
    str, msgspec.Meta(description="ISO 8601 in UTC with milliseconds.", examples=["2026-11-21T15:16:00.123Z"])
]
Address = Annotated[str, msgspec.Meta(description="local@domain", examples=["alice@inboxd.localhost"])]
Extension = {"x-inboxd-extension": True}
Tags = Annotated[
    list[str],
    msgspec.Meta(
        description="Tags from `X-Tags`, the plus part of the address, or set by hand.",
        examples=[["signup"]],
        extra_json_schema=Extension,
    ),
]


# ---- request bodies ------------------------------------------------------------------------


class MailboxSecret(msgspec.Struct):
    """A password (at least 6 characters) or its Argon2id `auth_key`; one of the two."""

    password: str | None = None
    auth_key: str | None = None


class CreateMailbox(msgspec.Struct):
    address: Address
    password: str | None = None
    auth_key: str | None = None


class SignIn(msgspec.Struct):
    address: Address
    password: str | None = None
    auth_key: str | None = None


class MarkRead(msgspec.Struct):
    """`ids` (1 to 200 message ids) or `all: true`."""

    ids: list[str] | None = None
    all: bool = False


class AddDomain(msgspec.Struct):
    domain: Annotated[str, msgspec.Meta(examples=["mail.example.com"])]


class CreateToken(msgspec.Struct):
    name: Annotated[str, msgspec.Meta(examples=["ci"])]


class CreateWebhook(msgspec.Struct):
    url: Annotated[str, msgspec.Meta(examples=["https://hooks.example.com/inboxd"])]
    events: Annotated[list[str], msgspec.Meta(examples=[["email.received"]])]


# ---- responses -----------------------------------------------------------------------------


class ErrorBody(msgspec.Struct, omit_defaults=True):
    """Every error: `{error, message}`; a 429 `rate_limit_exceeded` carries only `error`."""

    error: Annotated[str, msgspec.Meta(examples=["not_found"])]
    message: str | None = None


class Status(msgspec.Struct):
    status: Annotated[str, msgspec.Meta(examples=["ok"])]


class PasswordReset(msgspec.Struct):
    message: Literal["password_reset"]


class PublicDomainOut(msgspec.Struct):
    id: Uuid
    domain: Annotated[str, msgspec.Meta(examples=["inboxd.localhost"])]
    default: bool
    sort_order: int
    pro_only: Annotated[bool, msgspec.Meta(extra_json_schema=Extension)]


class PublicDomains(msgspec.Struct):
    domains: list[PublicDomainOut]


class MailboxCreated(msgspec.Struct):
    id: Uuid
    address: Address
    token: Annotated[
        str,
        msgspec.Meta(description="A mailbox token for this mailbox (REST and WebSocket).", extra_json_schema=Extension),
    ]


class SignedIn(msgspec.Struct):
    token: Annotated[str, msgspec.Meta(description="A mailbox token for this mailbox.")]
    id: Uuid
    address: Address


class MailboxOut(msgspec.Struct):
    id: Uuid
    address: Address
    role: Annotated[str, msgspec.Meta(examples=["user"])]
    quota: int
    used: int
    created_at: Timestamp


class MailboxListed(msgspec.Struct):
    id: Uuid
    address: Address
    quota: int
    used: int
    created_at: Timestamp


class MailboxPage(msgspec.Struct):
    accounts: list[MailboxListed]
    next_cursor: Annotated[
        str,
        msgspec.Meta(description="Pass as `cursor` for the next page; empty on the last.", extra_json_schema=Extension),
    ]


class MessageItem(msgspec.Struct):
    id: Uuid
    sender: Annotated[str, msgspec.Meta(description="Envelope sender (MAIL FROM).", examples=["bounce@example.com"])]
    from_: Annotated[str, msgspec.Meta(examples=["Alice <alice@example.com>"])] = msgspec.field(name="from")
    subject: Annotated[str, msgspec.Meta(examples=["Your sign-in code"])]
    preview_text: Annotated[str, msgspec.Meta(examples=["Your code is 123456."])]
    size: int
    is_read: bool
    created_at: Timestamp
    tags: Tags = []


class MessagePage(msgspec.Struct):
    messages: list[MessageItem]
    page: int


class AttachmentOut(msgspec.Struct):
    index: int
    filename: Annotated[str, msgspec.Meta(examples=["invoice.pdf"])]
    content_type: Annotated[str, msgspec.Meta(examples=["application/pdf"])]
    size: int


class LinkOut(msgspec.Struct):
    url: Annotated[str, msgspec.Meta(examples=["https://app.example.com/verify?t=abc"])]
    text: Annotated[str, msgspec.Meta(examples=["Verify your email"])]


class MessageDetailOut(msgspec.Struct):
    id: Uuid
    sender: str
    from_: Annotated[str, msgspec.Meta(examples=["Alice <alice@example.com>"])] = msgspec.field(name="from")
    subject: str
    address: Address
    size: int
    created_at: Timestamp
    text_body: str
    html_body: str
    attachments: list[AttachmentOut]
    to: Annotated[str, msgspec.Meta(description="The To header's addresses, decoded, rendered as `from`.")]
    cc: Annotated[str, msgspec.Meta(description="The Cc header's addresses, decoded, rendered as `from`.")]
    is_read: bool
    headers: Annotated[
        list[tuple[str, str]],
        msgspec.Meta(
            description="Every top-level header in order as [name, decoded value].", examples=[[["Subject", "Hi"]]]
        ),
    ]
    codes: Annotated[
        list[str],
        msgspec.Meta(
            description="One-time codes in the subject and bodies, the most likely first.", examples=[["123456"]]
        ),
    ]
    links: Annotated[
        list[LinkOut], msgspec.Meta(description="The http(s) links of the HTML and text bodies, in document order.")
    ]
    tags: Tags = []


class Updated(msgspec.Struct):
    updated: int


class ProfileOut(msgspec.Struct):
    id: Uuid
    email: Annotated[str, msgspec.Meta(examples=["dev@example.com"])]
    plan: Literal["free", "pro"]
    role: Literal["user", "admin"]
    status: Literal["active", "suspended"]
    max_domains: int
    ops_used: int
    ops_limit: int
    domain_count: int
    created_at: Timestamp
    downgraded: bool


class CustomDomainOut(msgspec.Struct):
    id: Uuid
    domain: str
    verify_status: Literal["pending", "verified"]
    verify_token: str
    verified_at: Timestamp | None
    mx_configured: bool
    created_at: Timestamp


class CustomDomains(msgspec.Struct):
    domains: list[CustomDomainOut]


class DnsRecordOut(msgspec.Struct, omit_defaults=True):
    type: Literal["TXT", "MX"]
    host: str
    value: str
    priority: Annotated[int | None, msgspec.Meta(description="MX only.")] = None


class DnsRecordChecked(msgspec.Struct, omit_defaults=True):
    type: Literal["TXT", "MX"]
    host: str
    value: str
    ok: Annotated[bool, msgspec.Meta(description="Whether the record was found.", extra_json_schema=Extension)]
    priority: Annotated[int | None, msgspec.Meta(description="MX only.")] = None


class DomainAdded(msgspec.Struct):
    id: Uuid
    domain: str
    verify_token: str
    dns_records: list[DnsRecordOut]


class VerificationOut(msgspec.Struct, omit_defaults=True):
    verify_status: Literal["pending", "verified"]
    txt_record: bool
    mx_record: bool
    dns_records: Annotated[
        list[DnsRecordChecked] | None, msgspec.Meta(description="The records still missing; only while pending.")
    ] = None


class ApiTokenOut(msgspec.Struct):
    id: Uuid
    name: str
    last_used_at: Timestamp | None
    created_at: Timestamp
    revoked_at: Timestamp | None


class ApiTokens(msgspec.Struct):
    tokens: list[ApiTokenOut]


class TokenCreated(msgspec.Struct):
    id: Uuid
    name: str
    token: Annotated[str, msgspec.Meta(description="`ibx_` and 43 characters; shown only here.")]


class WebhookOut(msgspec.Struct):
    id: Uuid
    url: str
    events: list[str]
    status: Literal["active", "disabled"]
    failure_count: int
    last_triggered_at: Timestamp | None
    created_at: Timestamp


class Webhooks(msgspec.Struct):
    webhooks: list[WebhookOut]


class WebhookCreated(msgspec.Struct):
    id: Uuid
    url: str
    events: list[str]
    secret: Annotated[
        str, msgspec.Meta(description="`whsec_` and 32 random bytes in base64; shown on create and rotate.")
    ]
    status: Literal["active", "disabled"]
    created_at: Timestamp


class SecretRotated(msgspec.Struct):
    id: Uuid
    secret: str


class DeliveryOut(msgspec.Struct):
    id: str
    event_type: Annotated[str, msgspec.Meta(examples=["email.received"])]
    event_id: Annotated[str, msgspec.Meta(examples=["evt_5f0c1f4d2a9b4c3e8d7a6b5c4d3e2f10"])]
    status_code: Annotated[int, msgspec.Meta(description="0 when the connection failed.")]
    error: str | None
    attempt: int
    duration_ms: int
    created_at: Timestamp


class Deliveries(msgspec.Struct):
    deliveries: list[DeliveryOut]


Recipients = Annotated[list[str], msgspec.Meta(description="The envelope recipients (every RCPT TO), in order.")]


class SandboxSnippets(msgspec.Struct):
    smtplib: str
    django: str
    nodemailer: str


class SandboxInfoOut(msgspec.Struct):
    enabled: bool
    smtp_host: Annotated[str, msgspec.Meta(examples=["localhost"])]
    smtp_port: Annotated[int, msgspec.Meta(examples=[2587])]
    auth_method: Annotated[
        str, msgspec.Meta(description="`api_token`: the password is any live API token of the user.")
    ]
    username: Annotated[str, msgspec.Meta(examples=["sbx_k3v9q0x2m1ab"])]
    note: str
    account_id: Uuid
    address: Annotated[str, msgspec.Meta(examples=["sbx_k3v9q0x2m1ab@sandbox.invalid"])]
    quota: int
    used: int
    starttls: Annotated[bool, msgspec.Meta(description="Whether STARTTLS is offered.", extra_json_schema=Extension)]
    smtps_port: Annotated[
        int | None, msgspec.Meta(description="The implicit-TLS port, if any.", extra_json_schema=Extension)
    ]
    snippets: Annotated[
        SandboxSnippets, msgspec.Meta(description="Copyable configuration.", extra_json_schema=Extension)
    ]


class SandboxItem(msgspec.Struct):
    id: Uuid
    sender: str
    from_: str = msgspec.field(name="from")
    subject: str
    preview_text: str
    size: int
    is_read: bool
    created_at: Timestamp
    recipients: Recipients
    tags: Tags = []


class SandboxPage(msgspec.Struct):
    messages: list[SandboxItem]
    page: int


class SandboxDetailOut(msgspec.Struct):
    id: Uuid
    sender: str
    from_: str = msgspec.field(name="from")
    subject: str
    address: Address
    size: int
    created_at: Timestamp
    text_body: str
    html_body: str
    attachments: list[AttachmentOut]
    recipients: Recipients
    to: Annotated[str, msgspec.Meta(description="As in the message detail.")]
    cc: Annotated[str, msgspec.Meta(description="As in the message detail.")]
    bcc: Annotated[
        list[str],
        msgspec.Meta(description="A Bcc header's addresses and the envelope recipients the headers do not show."),
    ]
    is_read: bool
    headers: Annotated[list[tuple[str, str]], msgspec.Meta(description="As in the message detail.")]
    codes: Annotated[list[str], msgspec.Meta(description="As in the message detail.")]
    links: Annotated[list[LinkOut], msgspec.Meta(description="As in the message detail.")]
    tags: Tags = []


class Deleted(msgspec.Struct):
    deleted: int


# ---- encoders: model → response struct -----------------------------------------------------


def public_domain(d: PublicDomain) -> PublicDomainOut:
    return PublicDomainOut(id=d.id, domain=d.domain, default=d.default, sort_order=d.sort_order, pro_only=d.pro_only)


def mailbox(m: Mailbox) -> MailboxOut:
    return MailboxOut(id=m.id, address=m.address, role=m.role, quota=m.quota, used=m.used, created_at=iso(m.created_at))


def mailbox_listed(m: Mailbox) -> MailboxListed:
    return MailboxListed(id=m.id, address=m.address, quota=m.quota, used=m.used, created_at=iso(m.created_at))


def message_item(m: MessageSummary) -> MessageItem:
    return MessageItem(
        id=m.id,
        sender=m.sender,
        from_=m.from_,
        subject=m.subject,
        preview_text=m.preview_text,
        size=m.size,
        is_read=m.is_read,
        created_at=iso(m.created_at),
        tags=list(m.tags),
    )


def message_detail(d: MessageDetail) -> MessageDetailOut:
    s = d.summary
    return MessageDetailOut(
        id=s.id,
        sender=s.sender,
        from_=s.from_,
        subject=s.subject,
        address=d.address,
        size=s.size,
        created_at=iso(s.created_at),
        text_body=d.text_body,
        html_body=d.html_body,
        attachments=[
            AttachmentOut(index=a.index, filename=a.filename, content_type=a.content_type, size=a.size)
            for a in d.attachments
        ],
        to=d.to,
        cc=d.cc,
        is_read=s.is_read,
        headers=list(d.headers),
        codes=list(d.codes),
        links=[LinkOut(url=link.url, text=link.text) for link in d.links],
        tags=list(s.tags),
    )


def profile(p: Profile) -> ProfileOut:
    u = p.user
    return ProfileOut(
        id=u.id,
        email=u.email,
        plan=u.plan,  # type: ignore[arg-type]
        role=u.role,  # type: ignore[arg-type]
        status=u.status,  # type: ignore[arg-type]
        max_domains=p.max_domains,
        ops_used=p.ops_used,
        ops_limit=p.ops_limit,
        domain_count=p.domain_count,
        created_at=iso(u.created_at),
        downgraded=p.downgraded,
    )


def custom_domain(d: CustomDomain) -> CustomDomainOut:
    return CustomDomainOut(
        id=d.id,
        domain=d.domain,
        verify_status=d.verify_status,  # type: ignore[arg-type]
        verify_token=d.verify_token,
        verified_at=None if d.verified_at is None else iso(d.verified_at),
        mx_configured=d.mx_configured,
        created_at=iso(d.created_at),
    )


def dns_record(r: DnsRecord) -> DnsRecordOut:
    return DnsRecordOut(type=r.type, host=r.host, value=r.value, priority=r.priority)  # type: ignore[arg-type]


def dns_record_checked(r: DnsRecord) -> DnsRecordChecked:
    return DnsRecordChecked(type=r.type, host=r.host, value=r.value, ok=r.ok, priority=r.priority)  # type: ignore[arg-type]


def verification(v: Verification) -> VerificationOut:
    return VerificationOut(
        verify_status=v.domain.verify_status,  # type: ignore[arg-type]
        txt_record=v.txt_ok,
        mx_record=v.mx_ok,
        dns_records=None if v.verified else [dns_record_checked(r) for r in v.missing],
    )


def api_token(t: ApiToken) -> ApiTokenOut:
    return ApiTokenOut(
        id=t.id,
        name=t.name,
        last_used_at=None if t.last_used_at is None else iso(t.last_used_at),
        created_at=iso(t.created_at),
        revoked_at=None if t.revoked_at is None else iso(t.revoked_at),
    )


def webhook(w: Webhook) -> WebhookOut:
    """A webhook as listed: never its secret."""
    return WebhookOut(
        id=w.id,
        url=w.url,
        events=list(w.events),
        status=w.status,  # type: ignore[arg-type]
        failure_count=w.failure_count,
        last_triggered_at=None if w.last_triggered_at is None else iso(w.last_triggered_at),
        created_at=iso(w.created_at),
    )


def webhook_created(w: Webhook) -> WebhookCreated:
    return WebhookCreated(
        id=w.id,
        url=w.url,
        events=list(w.events),
        secret=w.secret,
        status=w.status,  # type: ignore[arg-type]
        created_at=iso(w.created_at),
    )


def delivery(d: Delivery) -> DeliveryOut:
    return DeliveryOut(
        id=d.id,
        event_type=d.event_type,
        event_id=d.event_id,
        status_code=d.status_code,
        error=d.error,
        attempt=d.attempt,
        duration_ms=d.duration_ms,
        created_at=iso(d.created_at),
    )


def sandbox_info(i: SandboxInfo) -> SandboxInfoOut:
    """`GET /api/user/sandbox`: the `mailtd` SDK's `SandboxInfo`, plus TLS details and snippets."""
    mailbox = i.sandbox.mailbox
    return SandboxInfoOut(
        enabled=i.enabled,
        smtp_host=i.smtp.host,
        smtp_port=i.smtp.port,
        auth_method=i.smtp.auth_method,
        username=i.smtp.username,
        note=i.note,
        account_id=mailbox.id,
        address=mailbox.address,
        quota=mailbox.quota,
        used=mailbox.used,
        starttls=i.smtp.starttls,
        smtps_port=i.smtp.tls_port,
        snippets=SandboxSnippets(**i.snippets),
    )


def sandbox_item(m: SandboxMessage) -> SandboxItem:
    s = m.summary
    return SandboxItem(
        id=s.id,
        sender=s.sender,
        from_=s.from_,
        subject=s.subject,
        preview_text=s.preview_text,
        size=s.size,
        is_read=s.is_read,
        created_at=iso(s.created_at),
        recipients=list(m.recipients),
        tags=list(s.tags),
    )


def sandbox_detail(d: SandboxDetail) -> SandboxDetailOut:
    base = message_detail(d.detail)
    return SandboxDetailOut(
        id=base.id,
        sender=base.sender,
        from_=base.from_,
        subject=base.subject,
        address=base.address,
        size=base.size,
        created_at=base.created_at,
        text_body=base.text_body,
        html_body=base.html_body,
        attachments=base.attachments,
        recipients=list(d.recipients),
        to=base.to,
        cc=base.cc,
        bcc=list(d.bcc),
        is_read=base.is_read,
        headers=base.headers,
        codes=base.codes,
        links=base.links,
        tags=base.tags,
    )


class TagsIn(msgspec.Struct, forbid_unknown_fields=True):
    tags: Annotated[
        list[str],
        msgspec.Meta(
            description="The message's whole set of tags (replaces it): at most 10, each 1 to 32 characters "
            "of a-z, 0-9, `.`, `_` and `-` (upper case is lowered).",
            examples=[["signup", "welcome"]],
        ),
    ]


class TagsOut(msgspec.Struct):
    tags: list[str]
