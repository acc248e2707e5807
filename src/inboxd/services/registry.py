"""The services one running inboxd offers, handed by `app.py` to the API and SMTP layers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from inboxd.config import Settings
from inboxd.events import EventBus
from inboxd.services.checks.reports import CheckService
from inboxd.services.credentials import MailboxTokens
from inboxd.services.domains import DomainService
from inboxd.services.export import ExportService
from inboxd.services.faults import FaultService
from inboxd.services.ingest import IngestService
from inboxd.services.limits import Admission
from inboxd.services.mailboxes import MailboxService
from inboxd.services.messages import MessageService
from inboxd.services.profile import ProfileService
from inboxd.services.releases import ReleaseService
from inboxd.services.render import Renderer
from inboxd.services.sandbox import SandboxService
from inboxd.services.sessions import SessionService
from inboxd.services.sign_in import SignInService
from inboxd.services.space import SpaceGuard, disabled
from inboxd.services.users import UserService
from inboxd.services.waits import WaitService
from inboxd.services.webhooks import WebhookService


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    clock: Callable[[], float]
    users: UserService
    mailboxes: MailboxService
    messages: MessageService
    ingest: IngestService
    mailbox_tokens: MailboxTokens
    bus: EventBus
    admission: Admission
    domains: DomainService
    profiles: ProfileService
    webhooks: WebhookService
    sessions: SessionService
    sign_in: SignInService
    sandboxes: SandboxService
    waits: WaitService
    exports: ExportService
    # A message's check report (issue 24), computed on request and kept.
    checks: CheckService
    releases: ReleaseService
    faults: FaultService
    # Rendered images of HTML bodies (issue 28): Chromium started at the first render.
    renders: Renderer
    # The free-space guard (INBOXD_MIN_FREE_BYTES): API writes answer 507 while space is low.
    space: SpaceGuard = field(default_factory=disabled)
