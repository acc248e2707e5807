"""HTTP reads with a full mailbox: list-page and single-message requests per second.

The mailbox is filled over SMTP first (and the count checked), then `wrk` loads one URL at a
time. inboxd's list is a page of 30; MailDev's `GET /email` has no page size and returns every
message, so MailDev is also measured on `?skip=N-30`, a 30-message slice of the same payload
size as inboxd's page. The single message is opened once before the load: the first open
parses the message and keeps the result, every later open reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.httpload import WrkResult, run_wrk
from bench.rig import INBOXD_POSTGRES, MAILDEV, Rig
from bench.servers import OWN_BUILD, BenchError, Build, Inboxd, MailDev, cpu_seconds, http_json, rss_mb

FILL_CONNECTIONS = 32
# MailDev exits on connection resets from 8 concurrent connections up (peers/README.md).
MAILDEV_FILL_CONNECTIONS = 4


@dataclass(frozen=True, slots=True)
class ApiFigure:
    target: str
    request: str
    path: str
    result: WrkResult | None
    server_rss_mb: float
    bench_command: str
    failure: str = ""
    # CPU-seconds the server spent while wrk ran (0 where not measured).
    server_cpu: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failure and self.result is not None and not self.result.failure and not self.result.errors

    @property
    def per_cpu_second(self) -> float:
        """Requests answered per CPU-second of the server: req/s where the server's event loop is
        busy throughout (SQLite), more where it waits (PostgreSQL)."""
        if self.result is None or self.server_cpu <= 0:
            return float("nan")
        return self.result.requests / self.server_cpu


def _command(rig: Rig, *, target: str, fill: int, connections: int, duration: float) -> str:
    return (
        f"python -m bench api --targets {target} --fill {fill} --http-connections {connections} "
        f"--duration {duration:g}" + rig.client_flag()
    )


def _failed(target: str, fill: int, reason: str, command: str) -> list[ApiFigure]:
    return [ApiFigure(target, f"fill {fill} messages", "", None, 0.0, command, failure=reason)]


def measure_inboxd(
    rig: Rig,
    *,
    target: str,
    fill: int,
    connections: int,
    duration: float,
    build: Build = OWN_BUILD,
) -> list[ApiFigure]:
    assert rig.tools.wrk is not None
    command = _command(rig, target=target, fill=fill, connections=connections, duration=duration)
    server = Inboxd(
        backend="postgres" if target == INBOXD_POSTGRES else "sqlite",
        workdir=rig.workdir,
        pg_url=rig.pg_url,
        build=build,
    )
    try:
        server.start()
        mailbox = server.create_mailbox("bench@inboxd.localhost")
        run = rig.send(port=server.smtp_port, recipient=mailbox.address, connections=FILL_CONNECTIONS, messages=fill)
        stored = server.count(mailbox)
        if run.failure or stored != fill:
            return _failed(target, fill, f"{run.failure or 'fill'}: {fill} sent, {stored} stored", command)
        message_id = server.page(mailbox, 1)[0]["id"]
        list_url = server.messages_url(mailbox)
        one_url = f"{list_url}/{message_id}"
        http_json("GET", one_url, token=server.token)  # first open: full parse, kept
        figures = []
        for label, url in ((f"list page (30 of {fill})", list_url), ("single message", one_url)):
            before = cpu_seconds(server.pid)
            result = run_wrk(rig.tools.wrk, url, connections=connections, duration=duration, token=server.token)
            cpu = cpu_seconds(server.pid) - before
            path = url.removeprefix(server.base).replace(mailbox.id, "{id}").replace(message_id, "{msg}")
            figures.append(ApiFigure(target, label, "GET " + path, result, rss_mb(server.pid), command, server_cpu=cpu))
        return figures
    finally:
        server.stop()


def measure_maildev(rig: Rig, *, fill: int, connections: int, duration: float) -> list[ApiFigure]:
    assert rig.tools.wrk is not None
    command = _command(rig, target=MAILDEV, fill=fill, connections=connections, duration=duration)
    peer = MailDev(script=rig.maildev_script, workdir=rig.workdir)
    try:
        peer.start()
        run = rig.send(
            port=peer.smtp_port, recipient="bench@maildev.test", connections=MAILDEV_FILL_CONNECTIONS, messages=fill
        )
        if not peer.alive():
            return _failed(MAILDEV, fill, f"crashed while filling: {peer.exit_note()}", command)
        emails = peer.emails()
        if run.failure or len(emails) != fill:
            return _failed(MAILDEV, fill, f"{run.failure or 'fill'}: {fill} sent, {len(emails)} stored", command)
        message_id = emails[0]["id"]
        # The whole list goes last: MailDev keeps serializing answers wrk no longer waits for.
        requests = (
            (f"list slice (30 of {fill})", f"/email?skip={fill - 30}"),
            ("single message", f"/email/{message_id}"),
            (f"whole list ({fill})", "/email"),
        )
        figures = []
        for label, path in requests:
            result = run_wrk(rig.tools.wrk, peer.base + path, connections=connections, duration=duration)
            failure = "" if peer.alive() else f"crashed: {peer.exit_note()}"
            shown = "GET " + path.replace(message_id, "{msg}")
            figures.append(ApiFigure(MAILDEV, label, shown, result, rss_mb(peer.pid), command, failure))
            if failure:
                break
        return figures
    finally:
        peer.stop()


def measure(rig: Rig, *, target: str, fill: int, connections: int, duration: float) -> list[ApiFigure]:
    """The figures of one target; a server that would not start is reported, not raised."""
    try:
        if target == MAILDEV:
            return measure_maildev(rig, fill=fill, connections=connections, duration=duration)
        return measure_inboxd(rig, target=target, fill=fill, connections=connections, duration=duration)
    except BenchError as exc:
        return _failed(
            target, fill, str(exc), _command(rig, target=target, fill=fill, connections=connections, duration=duration)
        )
