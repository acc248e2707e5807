"""The SMTP sandbox: each user's catch-all that keeps every message its applications submit.

A sandbox is made on first use: a username (`sbx_` + 12 random characters) and a mailbox of kind
"sandbox" (address `<username>@sandbox.invalid`, never a recipient of received mail, not counted
among or listed with the user's mailboxes). Applications authenticate on the submission listener
with the username and any live API token of the user; every RCPT is accepted and recorded, the
message is stored once in the sandbox with its envelope, and nothing is ever relayed.

The sandbox is a Pro resource, as `/api/user/*` is: a free user's credentials are refused at
AUTH and its sandbox is not readable. Messages captured before a downgrade stay until they
expire (the retention of the plan they arrived under).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from inboxd.config import Settings
from inboxd.errors import DuplicateKey, InvalidRequest, MessageRejected, Unauthorized
from inboxd.mail.addresses import header_recipients
from inboxd.model import (
    NO_FILTER,
    AttachmentContent,
    Mailbox,
    MessageDetail,
    MessageFilter,
    Sandbox,
    SandboxMessage,
    User,
)
from inboxd.services.credentials import API_TOKEN_PREFIX, MailboxTokens, hash_token, is_api_token, require_pro
from inboxd.services.ingest import Recipient
from inboxd.services.messages import MessageService
from inboxd.store import sandboxes as store
from inboxd.store import users as user_store
from inboxd.store.db import Database, Tx

USERNAME_PREFIX = "sbx_"
ADDRESS_DOMAIN = "sandbox.invalid"
AUTH_METHOD = "api_token"
_ALPHABET = string.ascii_lowercase + string.digits
_USERNAME = re.compile(USERNAME_PREFIX + "[a-z0-9]{12}")
TOKEN_PLACEHOLDER = "<an API token of your account>"


@dataclass(frozen=True, slots=True)
class SmtpSettings:
    """Where and how an application submits mail to its sandbox."""

    host: str
    port: int
    username: str
    auth_method: str
    starttls: bool
    # The implicit-TLS port, when one is configured.
    tls_port: int | None


@dataclass(frozen=True, slots=True)
class SandboxInfo:
    enabled: bool
    smtp: SmtpSettings
    note: str
    sandbox: Sandbox
    snippets: dict[str, str]


@dataclass(frozen=True, slots=True)
class SandboxDetail:
    detail: MessageDetail
    recipients: tuple[str, ...]
    bcc: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Target:
    """Where a submitted message goes: the sandbox as a recipient, and whose plan it counts against."""

    recipient: Recipient
    user: User


@dataclass(frozen=True, slots=True)
class Submitter:
    """Who authenticated a submission session: the user, its sandbox, and the token's hash."""

    user: User
    sandbox: Sandbox
    token_hash: str


class SandboxService:
    def __init__(
        self,
        db: Database,
        *,
        settings: Settings,
        messages: MessageService,
        tokens: MailboxTokens,
        clock: Callable[[], float],
    ) -> None:
        self._db = db
        self._settings = settings
        self._messages = messages
        self._tokens = tokens
        self._clock = clock
        self._port = settings.submission_port
        self._tls_port = settings.submissions_port
        self._starttls = bool(settings.resolved_tls_cert)
        # A hash to compare against when the username is unknown, so both failures cost the same.
        self._decoy = hash_token(API_TOKEN_PREFIX + secrets.token_urlsafe(32))

    def listening(self, *, port: int, tls_port: int | None) -> None:
        """The ports the listeners bound (they differ from the settings when those ask for port 0)."""
        self._port, self._tls_port = port, tls_port

    # The sandbox itself ----------------------------------------------------------------------

    async def of(self, user: User) -> Sandbox:
        """The user's sandbox, made on first use."""
        found = await self._db.read(partial(store.for_user, user_id=user.id))
        if found is not None:
            return found
        username = USERNAME_PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(12))
        quota = self._settings.pro_mailbox_quota if user.is_pro else self._settings.free_mailbox_quota
        mailbox = Mailbox(
            id=str(uuid.uuid4()),
            user_id=user.id,
            token_id=None,
            address=f"{username}@{ADDRESS_DOMAIN}",
            domain_id=None,
            quota=quota,
            used=0,
            password_gen=0,
            created_at=self._clock(),
            kind="sandbox",
        )
        # No password opens it: the mailbox sign-in hashes what it is given, never this.
        unusable = hashlib.sha256(secrets.token_bytes(32)).hexdigest() + "!"

        async def create(tx: Tx) -> Sandbox:
            existing = await store.for_user(tx, user.id)
            if existing is not None:
                return existing
            await store.insert(tx, user_id=user.id, username=username, mailbox=mailbox, auth_hash=unusable)
            return Sandbox(user_id=user.id, username=username, mailbox=mailbox, created_at=mailbox.created_at)

        try:
            return await self._db.write(create)
        except DuplicateKey:
            # Made at the same moment by another request.
            again = await self._db.read(partial(store.for_user, user_id=user.id))
            if again is None:
                raise
            return again

    async def info(self, user: User) -> SandboxInfo:
        require_pro(user)
        sandbox = await self.of(user)
        smtp = SmtpSettings(
            host=self._settings.resolved_smtp_hostname,
            port=self._port,
            username=sandbox.username,
            auth_method=AUTH_METHOD,
            starttls=self._starttls,
            tls_port=self._tls_port,
        )
        note = (
            f"SMTP AUTH (PLAIN or LOGIN) with username {sandbox.username} and any live API token of "
            "your account as the password. Every message is kept here, whatever its recipients, "
            "and none is ever delivered."
        )
        return SandboxInfo(enabled=True, smtp=smtp, note=note, sandbox=sandbox, snippets=snippets(smtp))

    async def mailbox_token(self, user: User) -> str:
        """A mailbox token for the sandbox (the WebSocket and the dashboard's live list take one)."""
        require_pro(user)
        mailbox = (await self.of(user)).mailbox
        return self._tokens.issue(mailbox.id, mailbox.password_gen, now=self._clock())

    # Submission --------------------------------------------------------------------------------

    async def authenticate(self, username: str, password: str) -> Submitter:
        """Check SMTP credentials. Every failure is the same `Unauthorized`, whichever part was wrong;
        a right pair of a free user is `Forbidden` (`pro_required`)."""
        failure = Unauthorized("Authentication credentials invalid.", code="invalid_token")
        # A value that cannot be one is looked up as a decoy: it costs what a wrong one does, and
        # never reaches the database as typed (PostgreSQL refuses a NUL in text: 451, not 535).
        name = username.strip().lower()
        if not _USERNAME.fullmatch(name):
            name = USERNAME_PREFIX  # no sandbox's
        token_hash = hash_token(password) if is_api_token(password) else self._decoy
        found = await self._db.read(partial(_credentials, username=name, token_hash=token_hash))
        if found is None:
            raise failure
        user, sandbox = found
        require_pro(user)
        return Submitter(user=user, sandbox=sandbox, token_hash=token_hash)

    async def recheck(self, submitter: Submitter) -> Target:
        """The sandbox to capture into now, if the credentials still hold (revocation, suspension
        and a downgrade take effect at the next message of an open session)."""
        found = await self._db.read(
            partial(_credentials, username=submitter.sandbox.username, token_hash=submitter.token_hash)
        )
        if found is None or not found[0].is_pro:
            raise MessageRejected(code="auth_revoked")
        return Target(recipient=_recipient(found[0], found[1].mailbox), user=found[0])

    async def anonymous(self, email: str) -> Target:
        """The sandbox of the operator's `sandbox_anonymous_user`, for unauthenticated submission."""
        user = await self._db.read(partial(user_store.get_user_by_email, email=email.strip().lower()))
        if user is None or user.status != "active":
            raise MessageRejected(code="sandbox_unavailable")
        return Target(recipient=_recipient(user, (await self.of(user)).mailbox), user=user)

    # Reading and deleting captured mail -------------------------------------------------------

    async def is_sandbox(self, mailbox: Mailbox) -> bool:
        """Whether this mailbox is a sandbox (its messages then have envelope recipients)."""
        return mailbox.kind == "sandbox"

    async def _mailbox(self, user: User) -> Mailbox:
        require_pro(user)
        return (await self.of(user)).mailbox

    async def page(self, user: User, page: int, flt: MessageFilter = NO_FILTER) -> list[SandboxMessage]:
        if page < 1:
            raise InvalidRequest("`page` must be an integer of at least 1.")
        mailbox = await self._mailbox(user)
        read = partial(
            store.page,
            mailbox_id=mailbox.id,
            page=page,
            now=self._clock(),
            flt=flt,
            scan_rows=self._settings.filter_scan_rows,
        )
        return await self._messages.read_list(flt, read)

    async def mailbox(self, user: User) -> Mailbox:
        """The sandbox's mailbox (made on first use): what a wait listens on."""
        return await self._mailbox(user)

    async def detail(self, user: User, message_id: str) -> SandboxDetail:
        mailbox = await self._mailbox(user)
        detail = await self._messages.detail(mailbox, message_id)
        envelope = await self._db.read(partial(store.envelope, mailbox_id=mailbox.id, message_id=message_id))
        named = header_recipients(await self._messages.source(mailbox, message_id))
        shown = {a.lower() for a in (*named.to, *named.cc)}
        hidden = [a for a in (*named.bcc, *envelope) if a.lower() not in shown]
        return SandboxDetail(
            detail=detail,
            recipients=envelope,
            bcc=tuple(dict.fromkeys(hidden)),
        )

    async def source(self, user: User, message_id: str) -> bytes:
        return await self._messages.source(await self._mailbox(user), message_id)

    async def attachment(self, user: User, message_id: str, index: str) -> AttachmentContent:
        return await self._messages.attachment(await self._mailbox(user), message_id, index)

    async def delete(self, user: User, message_id: str) -> None:
        await self._messages.delete(await self._mailbox(user), message_id)

    async def purge(self, user: User) -> int:
        mailbox = await self._mailbox(user)
        return await self._db.write(partial(store.delete_all, mailbox_id=mailbox.id))


def _recipient(user: User, mailbox: Mailbox) -> Recipient:
    if mailbox.used >= mailbox.quota:
        raise MessageRejected(code="mailbox_full")
    return Recipient(mailbox=mailbox, plan=user.plan)


async def _credentials(tx: Tx, *, username: str, token_hash: str) -> tuple[User, Sandbox] | None:
    """The user and sandbox when the token is live, active and the username is its user's sandbox."""
    sandbox = await store.by_username(tx, username)
    found = await user_store.token_with_user(tx, token_hash)
    if sandbox is None or found is None:
        return None
    token, user = found
    if token.revoked_at is not None or user.status != "active" or token.user_id != sandbox.user_id:
        return None
    return user, sandbox


def snippets(smtp: SmtpSettings) -> dict[str, str]:
    """Copyable configuration for Python smtplib, Django and Nodemailer (the token is a placeholder)."""
    tls = smtp.starttls
    smtplib_code = (
        "import smtplib\n"
        "from email.message import EmailMessage\n\n"
        "msg = EmailMessage()\n"
        'msg["From"] = "app@example.com"\n'
        'msg["To"] = "someone@example.org"\n'
        'msg["Subject"] = "Hello from my app"\n'
        'msg.set_content("It works.")\n\n'
        f'with smtplib.SMTP("{smtp.host}", {smtp.port}) as smtp:\n'
        + ("    smtp.starttls()\n" if tls else "")
        + f'    smtp.login("{smtp.username}", "{TOKEN_PLACEHOLDER}")\n'
        "    smtp.send_message(msg)\n"
    )
    django_code = (
        'EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"\n'
        f'EMAIL_HOST = "{smtp.host}"\n'
        f"EMAIL_PORT = {smtp.port}\n"
        f'EMAIL_HOST_USER = "{smtp.username}"\n'
        f'EMAIL_HOST_PASSWORD = "{TOKEN_PLACEHOLDER}"\n'
        f"EMAIL_USE_TLS = {tls}\n"
    )
    nodemailer_code = (
        'const nodemailer = require("nodemailer");\n\n'
        "const transporter = nodemailer.createTransport({\n"
        f'  host: "{smtp.host}",\n'
        f"  port: {smtp.port},\n"
        "  secure: false,\n"
        + ("  requireTLS: true,\n" if tls else "  ignoreTLS: true,\n")
        + f'  auth: {{ user: "{smtp.username}", pass: "{TOKEN_PLACEHOLDER}" }},\n'
        "});\n\n"
        'await transporter.sendMail({ from: "app@example.com", to: "someone@example.org", '
        'subject: "Hello from my app", text: "It works." });\n'
    )
    return {"smtplib": smtplib_code, "django": django_code, "nodemailer": nodemailer_code}
