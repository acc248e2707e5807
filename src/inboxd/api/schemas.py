"""Request bodies (msgspec structs) and the encoders from model objects to the spec's JSON.

Responses are built field by field here, so a new column never becomes an API field by accident.
"""

from __future__ import annotations

from typing import Any

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


class MailboxSecret(msgspec.Struct):
    password: str | None = None
    auth_key: str | None = None


class CreateMailbox(msgspec.Struct):
    address: str
    password: str | None = None
    auth_key: str | None = None


class SignIn(msgspec.Struct):
    address: str
    password: str | None = None
    auth_key: str | None = None


class MarkRead(msgspec.Struct):
    ids: list[str] | None = None
    all: bool = False


class AddDomain(msgspec.Struct):
    domain: str


class CreateToken(msgspec.Struct):
    name: str


def public_domain(d: PublicDomain) -> dict[str, Any]:
    return {
        "id": d.id,
        "domain": d.domain,
        "default": d.default,
        "sort_order": d.sort_order,
        "pro_only": d.pro_only,
    }


def mailbox(m: Mailbox) -> dict[str, Any]:
    return {
        "id": m.id,
        "address": m.address,
        "role": m.role,
        "quota": m.quota,
        "used": m.used,
        "created_at": iso(m.created_at),
    }


def mailbox_listed(m: Mailbox) -> dict[str, Any]:
    return {
        "id": m.id,
        "address": m.address,
        "quota": m.quota,
        "used": m.used,
        "created_at": iso(m.created_at),
    }


def message_item(m: MessageSummary) -> dict[str, Any]:
    return {
        "id": m.id,
        "sender": m.sender,
        "from": m.from_,
        "subject": m.subject,
        "preview_text": m.preview_text,
        "size": m.size,
        "is_read": m.is_read,
        "created_at": iso(m.created_at),
    }


def message_detail(d: MessageDetail) -> dict[str, Any]:
    s = d.summary
    return {
        "id": s.id,
        "sender": s.sender,
        "from": s.from_,
        "subject": s.subject,
        "address": d.address,
        "size": s.size,
        "created_at": iso(s.created_at),
        "text_body": d.text_body,
        "html_body": d.html_body,
        "attachments": [
            {"index": a.index, "filename": a.filename, "content_type": a.content_type, "size": a.size}
            for a in d.attachments
        ],
    }


def profile(p: Profile) -> dict[str, Any]:
    u = p.user
    return {
        "id": u.id,
        "email": u.email,
        "plan": u.plan,
        "role": u.role,
        "status": u.status,
        "max_domains": p.max_domains,
        "ops_used": p.ops_used,
        "ops_limit": p.ops_limit,
        "domain_count": p.domain_count,
        "created_at": iso(u.created_at),
        "downgraded": p.downgraded,
    }


def custom_domain(d: CustomDomain) -> dict[str, Any]:
    return {
        "id": d.id,
        "domain": d.domain,
        "verify_status": d.verify_status,
        "verify_token": d.verify_token,
        "verified_at": None if d.verified_at is None else iso(d.verified_at),
        "mx_configured": d.mx_configured,
        "created_at": iso(d.created_at),
    }


def dns_record(r: DnsRecord, *, with_ok: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"type": r.type, "host": r.host, "value": r.value}
    if r.priority is not None:
        out["priority"] = r.priority
    if with_ok:
        out["ok"] = r.ok
    return out


def verification(v: Verification) -> dict[str, Any]:
    out: dict[str, Any] = {"verify_status": v.domain.verify_status, "txt_record": v.txt_ok, "mx_record": v.mx_ok}
    if not v.verified:
        out["dns_records"] = [dns_record(r, with_ok=True) for r in v.missing]
    return out


def api_token(t: ApiToken) -> dict[str, Any]:
    return {
        "id": t.id,
        "name": t.name,
        "last_used_at": None if t.last_used_at is None else iso(t.last_used_at),
        "created_at": iso(t.created_at),
        "revoked_at": None if t.revoked_at is None else iso(t.revoked_at),
    }


class CreateWebhook(msgspec.Struct):
    url: str
    events: list[str]


def webhook(w: Webhook) -> dict[str, Any]:
    """A webhook as listed: never its secret."""
    return {
        "id": w.id,
        "url": w.url,
        "events": list(w.events),
        "status": w.status,
        "failure_count": w.failure_count,
        "last_triggered_at": None if w.last_triggered_at is None else iso(w.last_triggered_at),
        "created_at": iso(w.created_at),
    }


def webhook_created(w: Webhook) -> dict[str, Any]:
    return {
        "id": w.id,
        "url": w.url,
        "events": list(w.events),
        "secret": w.secret,
        "status": w.status,
        "created_at": iso(w.created_at),
    }


def delivery(d: Delivery) -> dict[str, Any]:
    return {
        "id": d.id,
        "event_type": d.event_type,
        "event_id": d.event_id,
        "status_code": d.status_code,
        "error": d.error,
        "attempt": d.attempt,
        "duration_ms": d.duration_ms,
        "created_at": iso(d.created_at),
    }


def sandbox_info(i: SandboxInfo) -> dict[str, Any]:
    """`GET /api/user/sandbox`: the `mailtd` SDK's `SandboxInfo`, plus TLS details and snippets."""
    mailbox = i.sandbox.mailbox
    return {
        "enabled": i.enabled,
        "smtp_host": i.smtp.host,
        "smtp_port": i.smtp.port,
        "auth_method": i.smtp.auth_method,
        "username": i.smtp.username,
        "note": i.note,
        "account_id": mailbox.id,
        "address": mailbox.address,
        "quota": mailbox.quota,
        "used": mailbox.used,
        "starttls": i.smtp.starttls,
        "smtps_port": i.smtp.tls_port,
        "snippets": i.snippets,
    }


def sandbox_item(m: SandboxMessage) -> dict[str, Any]:
    item = message_item(m.summary)
    item["recipients"] = list(m.recipients)
    return item


def sandbox_detail(d: SandboxDetail) -> dict[str, Any]:
    out = message_detail(d.detail)
    out["recipients"] = list(d.recipients)
    out["to"] = list(d.to)
    out["cc"] = list(d.cc)
    out["bcc"] = list(d.bcc)
    return out
