"""SMTP sandbox submission: messages per second an application's mail library can hand over.

Each connection authenticates once (AUTH PLAIN, the sandbox username and an API token), then
sends the 4 KB message one transaction at a time, as an application's SMTP client does. inboxd
answers 250 after the commit; after every run the sandbox is emptied through the API and the
count it deleted must equal the number sent. MailDev (started with incoming credentials, so it
does AUTH too) keeps mail in memory and unsynced temp files; it is restarted for every run.
smtp-source cannot authenticate, so the built-in Python client sends in both cases.
"""

from __future__ import annotations

from bench.ingest import IngestFigure, skipped
from bench.rig import INBOXD_POSTGRES, INBOXD_SQLITE, MAILDEV, Rig
from bench.servers import BenchError, Inboxd, MailDev, cpu_seconds
from bench.smtpload import LoadRun, run_python_client

WARMUP_MESSAGES = 200
DEFAULT_CONNECTIONS = (1, 32)
MAILDEV_CREDENTIALS = ("bench", "bench-password")
TITLE = (
    "SMTP sandbox submission: 4096-byte message to an outside recipient, AUTH PLAIN once per connection,",
    "one transaction at a time per connection (inboxd: captured in the sandbox, 250 after its commit;",
    "MailDev: AUTH enabled, mail in memory and unsynced temp files).",
)


def bench_command(*, target: str, connections: int, messages: int) -> str:
    return (
        f"python -m bench submission --targets {target} --submission-connections {connections} "
        f"--submission-messages {messages}"
    )


def _send(rig: Rig, *, port: int, connections: int, messages: int, auth: tuple[str, str]) -> LoadRun:
    return run_python_client(
        port=port,
        connections=connections,
        messages=messages,
        message=rig.message,
        recipient="customer@example.org",
        timeout=rig.load_timeout,
        auth=auth,
    )


def _figure(
    run: LoadRun, *, target: str, connections: int, stored: int, server_cpu: float, failure: str
) -> IngestFigure:
    return IngestFigure(
        target=target,
        connections=connections,
        sent=run.messages,
        stored=stored,
        elapsed=run.elapsed,
        server_cpu=server_cpu,
        client_cpu=run.client_cpu,
        client=run.client,
        load_command=run.command,
        bench_command=bench_command(target=target, connections=connections, messages=run.messages),
        failure=failure,
    )


def measure_inboxd(rig: Rig, *, target: str, connections: tuple[int, ...], messages: int) -> list[IngestFigure]:
    backend = "postgres" if target == INBOXD_POSTGRES else "sqlite"
    server = Inboxd(backend=backend, workdir=rig.workdir, pg_url=rig.pg_url)
    try:
        server.start()
        info = server.sandbox()
        auth = (str(info["username"]), server.token)
        port = int(info["smtp_port"])
        _send(rig, port=port, connections=8, messages=WARMUP_MESSAGES, auth=auth)
        server.purge_sandbox()
        figures = []
        for n in connections:
            cpu_before = cpu_seconds(server.pid)
            run = _send(rig, port=port, connections=n, messages=messages, auth=auth)
            server_cpu = cpu_seconds(server.pid) - cpu_before
            failure = run.failure
            if not server.alive():
                failure = "inboxd exited during the run"
            stored = server.purge_sandbox() if server.alive() else 0
            if stored != messages and not failure:
                failure = f"durability check failed: {messages} sent, {stored} stored"
            figures.append(
                _figure(run, target=target, connections=n, stored=stored, server_cpu=server_cpu, failure=failure)
            )
        return figures
    finally:
        server.stop()


def measure_maildev(rig: Rig, *, connections: tuple[int, ...], messages: int) -> list[IngestFigure]:
    figures = []
    for n in connections:
        peer = MailDev(script=rig.maildev_script, workdir=rig.workdir, incoming=MAILDEV_CREDENTIALS)
        try:
            peer.start()
            cpu_before = cpu_seconds(peer.pid)
            run = _send(rig, port=peer.smtp_port, connections=n, messages=messages, auth=MAILDEV_CREDENTIALS)
            server_cpu = cpu_seconds(peer.pid) - cpu_before
            failure = run.failure
            stored = 0
            if peer.alive():
                stored = len(peer.emails())
            else:
                failure = f"crashed: {peer.exit_note()}"
            if stored != messages and not failure:
                failure = f"{messages} sent, {stored} stored"
        finally:
            peer.stop()
        figures.append(
            _figure(run, target=MAILDEV, connections=n, stored=stored, server_cpu=server_cpu, failure=failure)
        )
    return figures


def safe_measure(rig: Rig, *, target: str, connections: tuple[int, ...], messages: int) -> list[IngestFigure] | str:
    """The figures of one target, or why it could not be measured (the other targets still run)."""
    try:
        if target in (INBOXD_SQLITE, INBOXD_POSTGRES):
            return measure_inboxd(rig, target=target, connections=connections, messages=messages)
        return measure_maildev(rig, connections=connections, messages=messages)
    except BenchError as exc:
        return skipped(target, str(exc))
