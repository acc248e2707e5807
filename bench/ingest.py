"""SMTP ingest: messages per second at N concurrent connections, each message durable.

inboxd answers 250 only after the commit that holds the message (SQLite: WAL,
synchronous=FULL, group commit). After every run the stored count, read back through the
list API, must equal the number sent. MailDev keeps mail in memory (and unsynced temp
files); it is restarted for every run because it exits on connection resets, and a crash is
reported as such.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.rig import INBOXD_POSTGRES, INBOXD_SQLITE, LABELS, MAILDEV, Rig
from bench.servers import BenchError, Inboxd, MailDev, cpu_seconds
from bench.smtpload import LoadRun

WARMUP_MESSAGES = 200


@dataclass(frozen=True, slots=True)
class IngestFigure:
    target: str
    connections: int
    sent: int
    stored: int
    elapsed: float
    server_cpu: float
    client_cpu: float
    client: str
    load_command: str
    bench_command: str
    failure: str = ""

    @property
    def rate(self) -> float:
        return self.sent / self.elapsed if self.elapsed else 0.0

    @property
    def ok(self) -> bool:
        return not self.failure and self.stored == self.sent


def bench_command(rig: Rig, *, target: str, connections: int, messages: int) -> str:
    return (
        f"python -m bench ingest --targets {target} --connections {connections} --messages {messages}"
        + rig.client_flag()
    )


def figure_of(
    rig: Rig, run: LoadRun, *, target: str, connections: int, stored: int, server_cpu: float, failure: str
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
        bench_command=bench_command(rig, target=target, connections=connections, messages=run.messages),
        failure=failure,
    )


def measure_inboxd(rig: Rig, *, target: str, connections: tuple[int, ...], messages: int) -> list[IngestFigure]:
    backend = "postgres" if target == INBOXD_POSTGRES else "sqlite"
    server = Inboxd(backend=backend, workdir=rig.workdir, pg_url=rig.pg_url)
    try:
        server.start()
        warmup = server.create_mailbox("warmup@inboxd.localhost")
        rig.send(port=server.smtp_port, recipient=warmup.address, connections=8, messages=WARMUP_MESSAGES)
        figures = []
        for n in connections:
            mailbox = server.create_mailbox(f"bench-c{n}@inboxd.localhost")
            cpu_before = cpu_seconds(server.pid)
            run = rig.send(port=server.smtp_port, recipient=mailbox.address, connections=n, messages=messages)
            server_cpu = cpu_seconds(server.pid) - cpu_before
            failure = run.failure
            if not server.alive():
                failure = "inboxd exited during the run"
            stored = server.count(mailbox) if server.alive() else 0
            if stored != messages and not failure:
                failure = f"durability check failed: {messages} sent, {stored} stored"
            figures.append(
                figure_of(rig, run, target=target, connections=n, stored=stored, server_cpu=server_cpu, failure=failure)
            )
        return figures
    finally:
        server.stop()


def measure_maildev(rig: Rig, *, connections: tuple[int, ...], messages: int) -> list[IngestFigure]:
    figures = []
    for n in connections:
        peer = MailDev(script=rig.maildev_script, workdir=rig.workdir)
        try:
            peer.start()
            cpu_before = cpu_seconds(peer.pid)
            run = rig.send(port=peer.smtp_port, recipient="bench@maildev.test", connections=n, messages=messages)
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
            figure_of(rig, run, target=MAILDEV, connections=n, stored=stored, server_cpu=server_cpu, failure=failure)
        )
    return figures


def measure(rig: Rig, *, targets: tuple[str, ...], connections: tuple[int, ...], messages: int) -> list[IngestFigure]:
    figures: list[IngestFigure] = []
    for target in targets:
        if target in (INBOXD_SQLITE, INBOXD_POSTGRES):
            figures += measure_inboxd(rig, target=target, connections=connections, messages=messages)
        elif target == MAILDEV:
            figures += measure_maildev(rig, connections=connections, messages=messages)
    return figures


def skipped(target: str, reason: str) -> str:
    return f"{LABELS[target]}: skipped ({reason})"


def safe_measure(rig: Rig, *, target: str, connections: tuple[int, ...], messages: int) -> list[IngestFigure] | str:
    """The figures of one target, or why it could not be measured (the other targets still run)."""
    try:
        return measure(rig, targets=(target,), connections=connections, messages=messages)
    except BenchError as exc:
        return skipped(target, str(exc))
