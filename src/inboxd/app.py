"""The composition root: builds the store, bus, limits, services and servers, and starts and
stops them in order. Only this module knows which implementations are in use.

Start order: migrations → database → services → bootstrap → workers → SMTP → HTTP, so that
`/healthz` answering means SMTP accepts too. Stop runs the other way: HTTP and SMTP stop taking
work (deliveries in flight finish), workers stop, buffered counters flush, the database closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn
from prometheus_client import disable_created_metrics

from inboxd.api.operations import metrics_app
from inboxd.asgi import build_asgi
from inboxd.config import Settings
from inboxd.dns import DnsLookup
from inboxd.errors import NotFound
from inboxd.events import EventBus, LocalBus
from inboxd.hints import BOOTSTRAP_ADMIN, YOUR_EMAIL, sign_in_command
from inboxd.http.protocol import HttpProtocol
from inboxd.keyring import Keyring
from inboxd.listeners import ListenError, bind, serve_on
from inboxd.metrics import Metrics
from inboxd.services.analysis import Analysis
from inboxd.services.checks.reports import CheckService
from inboxd.services.credentials import MailboxTokens
from inboxd.services.domains import DomainService
from inboxd.services.export import ExportService
from inboxd.services.fault_counters import FaultCounters, MemoryFaultCounters
from inboxd.services.faults import FaultService
from inboxd.services.ingest import IngestService
from inboxd.services.limits import Limiter
from inboxd.services.limits_memory import MemoryCounters
from inboxd.services.mailboxes import MailboxService
from inboxd.services.messages import MessageService
from inboxd.services.ops_ledger import OpsLedger
from inboxd.services.profile import ProfileService
from inboxd.services.registry import Services
from inboxd.services.relay import SmtpRelay
from inboxd.services.releases import ReleaseService
from inboxd.services.render import Renderer
from inboxd.services.sandbox import SandboxService
from inboxd.services.sessions import SessionService
from inboxd.services.sign_in import SignInService
from inboxd.services.space import SpaceGuard, reserve_for
from inboxd.services.users import UserService
from inboxd.services.waits import WaitService
from inboxd.services.webhooks import WebhookService
from inboxd.smtp.server import SmtpServer
from inboxd.smtp.submission import Submission
from inboxd.store import migrate
from inboxd.store import webhooks as webhook_store
from inboxd.store.connect import open_database
from inboxd.store.db import Database
from inboxd.worker.fetch import GuardedFetch
from inboxd.worker.indexer import SearchIndexer
from inboxd.worker.sweeper import Sweeper
from inboxd.worker.webhooks import WebhookWorker

if TYPE_CHECKING:
    from inboxd.services.limits_redis import RedisCounters

log = logging.getLogger("inboxd")
BOOTSTRAP_FILE = "bootstrap-token"


class Inboxd:
    """One running inboxd: `await start()`, then `await stop()` (or `async with`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        migrating: migrate.PendingUpgrade | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self._migrating = migrating
        self.bootstrap_token: str | None = None
        self.bootstrap_link: str | None = None
        # The `INBOXD_METRICS_LISTEN` listener's port, once it listens.
        self.metrics_port: int | None = None
        self._db: Database | None = None
        self._bus: EventBus | None = None
        self._services: Services | None = None
        self._smtp: SmtpServer | None = None
        self._submission: SmtpServer | None = None
        self._submissions: SmtpServer | None = None
        self._http: uvicorn.Server | None = None
        self._http_task: asyncio.Task[None] | None = None
        self._http_sock: socket.socket | None = None
        self._workers: list[Sweeper] = []
        self._webhook_worker: WebhookWorker | None = None
        self._indexer: SearchIndexer | None = None
        self._stack = contextlib.AsyncExitStack()
        # `*_created` series hold a start time per label set, which no dashboard here reads:
        # prometheus_client's switch is process-wide, so the composition root sets it.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.metrics = Metrics()
        self._keyring: Keyring | None = None

    @property
    def keyring(self) -> Keyring:
        assert self._keyring is not None, "inboxd is not started"
        return self._keyring

    @property
    def services(self) -> Services:
        assert self._services is not None, "inboxd is not started"
        return self._services

    @property
    def smtp_port(self) -> int:
        assert self._smtp is not None
        return self._smtp.port

    @property
    def submission_port(self) -> int:
        assert self._submission is not None
        return self._submission.port

    @property
    def submissions_port(self) -> int | None:
        return None if self._submissions is None else self._submissions.port

    @property
    def http_port(self) -> int:
        assert self._http_sock is not None
        port: int = self._http_sock.getsockname()[1]
        return port

    async def __aenter__(self) -> Inboxd:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start every part in order; a failure part-way stops what had started."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        # Each part registers its stop on the exit stack as soon as it started: `stop` unwinds
        # the stack in reverse, and a step that fails does not keep the later ones from running.
        settings, stack = self.settings, self._stack
        self._keyring = Keyring.from_settings(settings)  # first: a missing or exposed key stops the start
        self._db = db = await open_database(settings, migrating=self._migrating)
        self._migrating = None
        self._observe_database(db)
        stack.push_async_callback(self._close_database)
        self._bus = bus = self._event_bus()
        await bus.start()
        stack.push_async_callback(bus.stop)
        self._services = services = await self._build_services(db, bus)
        # Webhook secrets in the clear (from before they were sealed) or sealed with the old key of
        # a rotation are sealed with the current key now.
        await services.webhooks.reseal_secrets()
        await services.admission.start()
        stack.push_async_callback(self._flush_last_used)
        stack.push_async_callback(services.admission.stop)
        stack.push_async_callback(services.checks.close)
        stack.push_async_callback(services.faults.close)
        stack.push_async_callback(services.renders.close)
        stack.push_async_callback(self._render_fetch.close)
        # Under `--workers N` the first worker alone bootstraps and sweeps: the sweep's expiry
        # charges `used` back, which two processes at once could do twice on PostgreSQL. Webhook
        # delivery and search indexing claim their rows and run in every worker.
        duty = settings.worker_index == 0
        if duty:
            await self._bootstrap()
        self._workers = [Sweeper(db, services, settings=settings, clock=self.clock)] if duty else []
        for worker in self._workers:
            worker.start()
            stack.push_async_callback(worker.stop)
        self._webhook_worker = webhooks = WebhookWorker(
            db, settings=settings, clock=self.clock, metrics=self.metrics, keyring=self.keyring
        )
        services.ingest.on_jobs_queued(webhooks.wake)
        webhooks.start()
        stack.push_async_callback(webhooks.stop)
        self._indexer = indexer = SearchIndexer(db, bus, clock=self.clock, linger=settings.index_linger)
        services.ingest.on_stored(indexer.took)
        # A list on `q`, `to` or `has_attachments` that meets mail the index lacks indexes it first.
        db.catch_up = indexer.catch_up
        indexer.start()
        stack.push_async_callback(indexer.stop)
        tls = self._smtp_tls()
        self._smtp = smtp = SmtpServer(
            services.ingest,
            settings=settings,
            tls=tls,
            metrics=self.metrics,
            space=services.space,
            faults=services.faults,
        )
        await smtp.start(bind(settings.smtp_host, settings.smtp_port, listener="smtp", reuse_port=settings.reuse_port))
        stack.push_async_callback(smtp.stop)
        await self._start_submission(services, tls)
        await self._start_http(services)
        await self._start_metrics(services)
        log.info(
            "inboxd listening: HTTP %s:%d, SMTP %s:%d, submission %s:%d",
            settings.http_host,
            self.http_port,
            settings.smtp_host,
            self.smtp_port,
            settings.submission_host,
            self.submission_port,
        )

    async def _start_submission(self, services: Services, tls: ssl.SSLContext | None) -> None:
        """The SMTP sandbox's listeners: submission (STARTTLS when certificates are set), and
        implicit TLS when its port is configured."""
        settings = self.settings
        hooks = Submission(
            sandboxes=services.sandboxes,
            ingest=services.ingest,
            admission=services.admission,
            settings=settings,
            faults=services.faults,
        )
        self._submission = submission = SmtpServer(
            services.ingest,
            settings=settings,
            tls=tls,
            hooks=hooks,
            metrics=self.metrics,
            space=services.space,
            faults=services.faults,
        )
        await submission.start(
            bind(
                settings.submission_host,
                settings.submission_port,
                listener="submission",
                reuse_port=settings.reuse_port,
            )
        )
        self._stack.push_async_callback(submission.stop)
        if settings.submissions_port is not None:
            if tls is None:
                raise ListenError("INBOXD_SUBMISSIONS_PORT needs INBOXD_TLS_CERT and INBOXD_TLS_KEY")
            self._submissions = implicit = SmtpServer(
                services.ingest,
                settings=settings,
                tls=tls,
                hooks=hooks,
                implicit_tls=True,
                metrics=self.metrics,
                space=services.space,
                faults=services.faults,
            )
            await implicit.start(
                bind(
                    settings.submission_host,
                    settings.submissions_port,
                    listener="submissions",
                    reuse_port=settings.reuse_port,
                )
            )
            self._stack.push_async_callback(implicit.stop)
        services.sandboxes.listening(port=self.submission_port, tls_port=self.submissions_port)
        services.mailboxes.listening(smtp_port=self.smtp_port)

    async def _build_services(self, db: Database, bus: EventBus) -> Services:
        settings, clock = self.settings, self.clock
        mailbox_tokens = MailboxTokens(self.keyring.token_keys, ttl=settings.mailbox_token_ttl)
        mailboxes = MailboxService(db, settings=settings, tokens=mailbox_tokens, clock=clock, bus=bus)
        # Mail analysis on threads of its own (services/analysis.py), shared by messages and checks.
        analysis = Analysis(threads=settings.analysis_threads, budget=settings.analysis_budget)
        self._stack.callback(analysis.close)
        messages = MessageService(db, clock=clock, scan_rows=settings.filter_scan_rows, analysis=analysis)
        # Remote content of renders, when INBOXD_RENDER_REMOTE allows it: the webhooks' address guard.
        self._render_fetch = GuardedFetch(allow_private=settings.webhook_allow_private, timeout=settings.render_timeout)
        counters = self._redis_counters() if settings.redis_url else MemoryCounters()
        admission = Limiter(counters, ledger=OpsLedger(db), settings=settings, clock=clock)
        return Services(
            settings=settings,
            clock=clock,
            users=UserService(db, clock=clock, bus=bus, max_tokens=settings.max_tokens_per_user),
            mailboxes=mailboxes,
            messages=messages,
            ingest=IngestService(
                db, settings=settings, bus=bus, clock=clock, public_domains=mailboxes.is_public_domain
            ),
            mailbox_tokens=mailbox_tokens,
            bus=bus,
            admission=admission,
            domains=DomainService(
                db,
                settings=settings,
                dns=DnsLookup(nameservers=settings.dns_nameservers, timeout=settings.dns_timeout),
                clock=clock,
                bus=bus,
                admission=admission,
            ),
            profiles=ProfileService(db, settings=settings),
            webhooks=WebhookService(db, settings=settings, clock=clock, keyring=self.keyring),
            sessions=SessionService(db, settings=settings, clock=clock, bus=bus),
            sign_in=SignInService(db, settings=settings, clock=clock),
            sandboxes=SandboxService(db, settings=settings, messages=messages, tokens=mailbox_tokens, clock=clock),
            waits=WaitService(messages, bus, admission=admission, settings=settings),
            exports=ExportService(db, clock=clock),
            checks=CheckService(db, settings=settings, messages=messages, clock=clock, analysis=analysis),
            releases=ReleaseService(
                db, settings=settings, clock=clock, messages=messages, admission=admission, relay=SmtpRelay(settings)
            ),
            renders=Renderer(settings, messages=messages, fetch=self._render_fetch),
            space=self._space_guard(db),
            faults=FaultService(
                db, bus=bus, clock=clock, ttl=settings.recipient_cache_ttl, counters=self._fault_counters()
            ),
        )

    def _space_guard(self, db: Database) -> SpaceGuard:
        """Watch the data directory and, for SQLite, the database file's directory, where the
        file's free pages count as free too; keep room for what accepted mail may still write
        (`reserve_for`)."""
        settings = self.settings
        paths = [settings.data_dir]
        database_dir = None
        if not settings.is_postgres:
            database_dir = Path(settings.resolved_database_url.removeprefix("sqlite:///")).parent
            paths.append(database_dir)
        return SpaceGuard(
            paths,
            min_free=settings.min_free_bytes,
            reserve=reserve_for(settings.max_message_size, sqlite=database_dir is not None),
            database_dir=database_dir,
            reusable=db.reusable_bytes if database_dir is not None else None,
        )

    def _observe_database(self, db: Database) -> None:
        """Batch sizes as they commit; pool use and the webhook queue when /metrics is read."""
        metrics = self.metrics
        db.on_batch = metrics.db_batch.observe

        async def refresh() -> None:
            size, in_use, waiting = db.pool_usage()
            metrics.db_pool_size.set(size)
            metrics.db_pool_in_use.set(in_use)
            metrics.db_write_queue.set(waiting)
            metrics.webhook_queue.set(await db.read(webhook_store.queue_depth))

        metrics.on_scrape(refresh)
        self._stack.callback(metrics.process_exited)

    # The Redis client is imported only when Redis is configured (imports cost resident memory).
    def _event_bus(self) -> EventBus:
        if self.settings.redis_url:
            from inboxd.events_redis import RedisBus

            return RedisBus(self.settings.redis_url, prefix=self.settings.redis_prefix)
        return LocalBus()

    def _fault_counters(self) -> FaultCounters:
        """SMTP faults count in Redis when there is one, so every worker counts the same."""
        if not self.settings.redis_url:
            return MemoryFaultCounters()
        from inboxd.services.faults_redis import RedisFaultCounters

        return RedisFaultCounters.from_url(self.settings.redis_url, prefix=self.settings.redis_prefix)

    def _redis_counters(self) -> RedisCounters:
        from inboxd.services.limits_redis import RedisCounters

        return RedisCounters.from_url(self.settings.redis_url, prefix=self.settings.redis_prefix)

    def _smtp_tls(self) -> ssl.SSLContext | None:
        if not self.settings.resolved_tls_cert:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.settings.resolved_tls_cert, self.settings.resolved_tls_key or None)
        return context

    async def _start_http(self, services: Services) -> None:
        settings = self.settings
        self._http_sock = bind(settings.http_host, settings.http_port, listener="http", reuse_port=settings.reuse_port)
        config = uvicorn.Config(
            build_asgi(services, metrics=self.metrics),
            lifespan="off",
            # uvicorn's own logging set-up would give its loggers handlers and formats of their own,
            # past `logs.configure`'s redaction and escaping: its lines go through ours instead.
            log_config=None,
            log_level=settings.log_level,
            access_log=False,
            # httptools with each response's writes sent as one (`http/protocol.py`).
            http=HttpProtocol,
            ws="websockets-sansio",
            ws_max_size=65536,
            ws_per_message_deflate=False,
            ws_ping_interval=settings.ws_ping_interval,
            ws_ping_timeout=settings.ws_ping_interval,
            server_header=False,
            # uvicorn would otherwise take X-Forwarded-For from 127.0.0.1 as the client address, and
            # the per-IP sign-in limit could be dodged with a made-up header. It also leaves one
            # coroutine frame fewer suspended per idle WebSocket.
            proxy_headers=False,
            timeout_graceful_shutdown=5,
        )
        self._http = uvicorn.Server(config)
        self._stack.push_async_callback(self._stop_http)
        self._http_task = await serve_on(self._http, self._http_sock)

    async def _start_metrics(self, services: Services) -> None:
        """`INBOXD_METRICS_LISTEN`: `/metrics` on an address of its own (the main port answers 404)."""
        address = self.settings.metrics_address
        if address is None:
            return
        # Under `--workers N` every worker listens here too, and any one answers for all (multiprocess).
        sock = bind(*address, listener="metrics", reuse_port=self.settings.reuse_port)
        server = uvicorn.Server(
            uvicorn.Config(
                metrics_app(services, metrics=self.metrics),
                lifespan="off",
                log_config=None,
                log_level=self.settings.log_level,
                access_log=False,
                http="httptools",
                ws="none",
                server_header=False,
                proxy_headers=False,
            )
        )
        task = await serve_on(server, sock)
        self.metrics_port = int(sock.getsockname()[1])

        async def stop() -> None:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await task

        self._stack.push_async_callback(stop)

    async def _bootstrap(self) -> None:
        """First start on an empty database: an admin Pro user and one token, shown once."""
        users = self.services.users
        if await users.has_users():
            return
        admin = await users.create_user(BOOTSTRAP_ADMIN, plan="pro", role="admin")
        created = await users.create_token(admin, "bootstrap")
        self.bootstrap_token = created.value
        self.bootstrap_link = await self.services.sign_in.issue_link(admin)
        path = Path(self.settings.data_dir) / BOOTSTRAP_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(created.value + "\n")
        os.chmod(path, 0o600)

    async def sign_in_email(self) -> str:
        """Whom the start-up hint's sign-in command names: the bootstrap admin while it exists."""
        try:
            return (await self.services.users.user_by_email(BOOTSTRAP_ADMIN)).email
        except NotFound:
            return YOUR_EMAIL

    async def stop(self) -> None:
        """Stop every part that started, in reverse order. Each step runs even when an earlier
        one failed; the first failure is raised at the end (with the others chained)."""
        stack, self._stack = self._stack, contextlib.AsyncExitStack()
        await stack.aclose()

    async def _stop_http(self) -> None:
        if self._services is not None:
            self._services.waits.close()  # open waits answer now instead of holding the shutdown
        if self._http is not None and self._http_task is not None:
            self._http.should_exit = True
            with contextlib.suppress(Exception):
                await self._http_task

    async def _flush_last_used(self) -> None:
        if self._services is not None:
            with contextlib.suppress(Exception):
                await self._services.users.flush_last_used()

    async def _close_database(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()


# The cyclic collector's thresholds once a server has started (CPython's are 700, 10, 10).
GC_THRESHOLDS = (5000, 10, 10)


def _settle_heap() -> None:
    """What start-up made (modules, the app, the statements) lives as long as the process: frozen,
    the collector never walks it again; and a first threshold of 5,000 runs the young collection a
    seventh as often, most of a message's objects freed by their counts before it comes. Callgrind
    counts 1.9 % fewer instructions a message for both (docs/performance.md, "The collector")."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def serve(
    settings: Settings, *, migrating: migrate.PendingUpgrade | None = None, command: str = "inboxd"
) -> None:
    """Run until SIGINT or SIGTERM. `command` is how the printed hints name inboxd, so they run
    as printed (`.venv/bin/inboxd` after `make run`)."""
    import signal

    server = Inboxd(settings, migrating=migrating)
    await server.start()
    _settle_heap()
    http = f"http://{settings.http_host}:{server.http_port}"
    print(
        f"inboxd: HTTP on {http}  SMTP on {settings.smtp_host}:{server.smtp_port}"
        f"  submission on {settings.submission_host}:{server.submission_port}"
        + (f"  metrics on {settings.metrics_address[0]}:{server.metrics_port}" if settings.metrics_address else ""),
        flush=True,
    )
    if server.bootstrap_token:
        print(
            f"inboxd: bootstrap API token (shown once, also in {Path(settings.data_dir) / BOOTSTRAP_FILE}):",
            flush=True,
        )
        print(server.bootstrap_token, flush=True)
    new_link = f"`{sign_in_command(settings, command=command, email=await server.sign_in_email())}`"
    if server.bootstrap_link:
        minutes = max(1, round(settings.sign_in_link_ttl / 60))
        print(
            f"inboxd: one-time dashboard sign-in link for admin@localhost (valid {minutes} minutes; "
            f"{new_link} prints a new one):",
            flush=True,
        )
        print(server.bootstrap_link, flush=True)
    else:
        print(f"inboxd: dashboard at {settings.base_url}; a one-time sign-in link: {new_link}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()
