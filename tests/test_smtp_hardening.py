"""SMTP against hostile and heavy clients: session caps, the recipient limit, a client that never
reads its replies, idle sessions, and what big messages cost in memory and event-loop time.

The memory and latency tests run inboxd as a child process, so what they measure is the server's
own resident memory (`/proc/<pid>/status`) and its own event loop.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from tests.conftest import send_mail
from tests.serverproc import ServerProcess

# Bounds on time and memory: run after the parallel part of the suite, alone (Makefile).
pytestmark = pytest.mark.alone

# The SMTP engine is the same on either store; the in-process tests run on SQLite.
sqlite = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

MiB = 1024 * 1024


async def greet(port: int, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str]:
    """A connection from `source` (any 127/8 address works on loopback) and its first reply line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    line = (await asyncio.wait_for(reader.readline(), 30)).decode()
    return reader, writer, line


async def shut(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def new_mailbox(http_port: int, token: str, local: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}", timeout=30) as http:
        response = await http.post(
            "/api/accounts",
            json={"address": f"{local}@inboxd.localhost", "password": "secret123"},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


@sqlite
async def test_session_caps_answer_421_and_others_are_served(make_settings: Any, clock: Any) -> None:
    settings = make_settings(smtp_max_sessions=6, smtp_max_sessions_per_ip=3)
    async with Inboxd(settings, clock=clock) as server:
        assert server.bootstrap_token is not None
        box = await new_mailbox(server.http_port, server.bootstrap_token, "capped")
        port = server.smtp_port
        held = [await greet(port, "127.0.0.2") for _ in range(3)]
        assert all(line.startswith("220 ") for _, _, line in held)
        reader, writer, line = await greet(port, "127.0.0.2")
        assert line.startswith("421 4.7.0")
        assert await asyncio.wait_for(reader.read(), 10) == b""  # and the connection is closed
        await shut(writer)
        # One address at its cap does not keep another out.
        assert await asyncio.to_thread(send_mail, port, box["address"]) == {}
        held += [await greet(port, "127.0.0.3") for _ in range(3)]
        assert all(line.startswith("220 ") for _, _, line in held)
        _, writer, line = await greet(port, "127.0.0.4")
        assert line.startswith("421 4.7.0")  # the total cap
        await shut(writer)
        # A session that ends frees its place.
        await shut(held.pop()[1])
        deadline = time.monotonic() + 10
        while True:
            try:
                assert await asyncio.to_thread(send_mail, port, box["address"]) == {}
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        for _, held_writer, _ in held:
            await shut(held_writer)


@sqlite
async def test_recipient_limit_counts_rcpt_commands_not_mailboxes(make_settings: Any, clock: Any) -> None:
    async with Inboxd(make_settings(max_recipients=5), clock=clock) as server:
        assert server.bootstrap_token is not None
        await new_mailbox(server.http_port, server.bootstrap_token, "h")
        reader, writer, _ = await greet(server.smtp_port)

        async def cmd(text: str) -> str:
            writer.write(text.encode() + b"\r\n")
            lines = []
            while True:
                line = (await asyncio.wait_for(reader.readline(), 30)).decode()
                lines.append(line)
                if line[3:4] != "-":
                    return "".join(lines)

        await cmd("EHLO c")
        await cmd("MAIL FROM:<a@example.org>")
        codes = [(await cmd(f"RCPT TO:<h+{n}@inboxd.localhost>"))[:3] for n in range(7)]
        assert codes == ["250"] * 5 + ["452", "452"]
        # The transaction still delivers (one copy), and a new one counts from zero.
        assert (await cmd("DATA")).startswith("354")
        assert (await cmd("Subject: x\r\n\r\nbody\r\n.")).startswith("250")
        await cmd("MAIL FROM:<a@example.org>")
        assert (await cmd("RCPT TO:<h+again@inboxd.localhost>")).startswith("250")
        await shut(writer)


@sqlite
async def test_idle_sessions_are_cut_at_their_timeout(make_settings: Any, clock: Any) -> None:
    settings = make_settings(smtp_idle_timeout=3.0, smtp_max_sessions_per_ip=1000)
    async with Inboxd(settings, clock=clock) as server:
        assert server.bootstrap_token is not None
        box = await new_mailbox(server.http_port, server.bootstrap_token, "idle")
        started = time.monotonic()
        idle = []
        for _ in range(10):
            idle += await asyncio.gather(*(greet(server.smtp_port) for _n in range(50)))
        assert all(line.startswith("220 ") for _, _, line in idle)
        greeted = time.monotonic()  # the last session's idle time started by now
        # A normal client is served while 500 sessions sit idle.
        assert await asyncio.to_thread(send_mail, server.smtp_port, box["address"]) == {}

        async def cut(reader: asyncio.StreamReader) -> str:
            return (await reader.read()).decode()

        # Each is told why, then closed: not before the timeout, and within it plus 2 s (the
        # wait_for only keeps a broken server from hanging the test).
        endings = await asyncio.wait_for(asyncio.gather(*(cut(r) for r, _, _ in idle)), 30)
        assert all(e.startswith("421 4.4.2") for e in endings)
        assert time.monotonic() - started >= 3.0
        assert time.monotonic() - greeted < 3.0 + 2.0, time.monotonic() - greeted
        for _, writer, _ in idle:
            await shut(writer)
        assert await asyncio.to_thread(send_mail, server.smtp_port, box["address"]) == {}


def _status(pid: int, field: str) -> int:
    """A `/proc/<pid>/status` memory figure, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def _reset_peak(pid: int) -> None:
    # Writing 5 to clear_refs resets VmHWM (Linux 4.0+), so the peak measured is the test's own.
    Path(f"/proc/{pid}/clear_refs").write_text("5")


@pytest.fixture
async def child(tmp_path: Path) -> AsyncIterator[Any]:
    """Start inboxd as a child process with extra INBOXD_* variables."""
    started: list[ServerProcess] = []

    async def start(**env: str) -> ServerProcess:
        data = tmp_path / f"data{len(started)}"
        data.mkdir()
        server = await ServerProcess.start(data, **env)
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop()


async def timed_send(port: int, address: str) -> float:
    began = time.monotonic()
    assert await asyncio.to_thread(send_mail, port, address) == {}
    return time.monotonic() - began


async def test_client_that_never_reads_is_paused_then_dropped(child: Any) -> None:
    server = await child(INBOXD_SMTP_WRITE_TIMEOUT="3")
    assert server.bootstrap_token is not None
    box = await new_mailbox(server.http_port, server.bootstrap_token, "flooded")
    await timed_send(server.smtp_port, box["address"])
    pid = server.proc.pid
    before = _status(pid, "VmRSS")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.smtp_port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    chunk = b"EHLO x\r\n" * (MiB // 8)
    sent = 0
    # Pipeline commands and never read a reply, for a few seconds or until the server stops taking them.
    deadline = time.monotonic() + 6
    # The server may drop it already (the write timeout is shorter than the flood).
    with contextlib.suppress(TimeoutError, ConnectionError):
        while sent < 400 * MiB and time.monotonic() < deadline:
            writer.write(chunk)
            await asyncio.wait_for(writer.drain(), max(deadline - time.monotonic(), 0.01))
            sent += len(chunk)
    latency = await timed_send(server.smtp_port, box["address"])
    grown = _status(pid, "VmRSS") - before
    assert grown < 32 * MiB, f"RSS grew by {grown / MiB:.0f} MiB after {sent / MiB:.0f} MiB of EHLO"
    assert sent < 64 * MiB, f"the server took {sent / MiB:.0f} MiB of commands whose replies nobody read"
    assert latency < 5.0
    # Stuck past the write timeout: dropped. Reading now gets what was already sent, then the end.
    received = 0
    with contextlib.suppress(ConnectionError):
        async with asyncio.timeout(30):
            while data := await reader.read(MiB):
                received += len(data)
                assert received < 64 * MiB, "the server kept answering a client it should have dropped"
    await shut(writer)
    assert _status(pid, "VmRSS") - before < 64 * MiB
    assert await timed_send(server.smtp_port, box["address"]) < 5.0


def big_message(size: int, seed: int) -> bytes:
    """A dot-stuffed single-part text message of about `size` bytes, as sent after DATA.

    Random base64 text (zstd cannot shrink it much) with a line that starts with a dot every
    thousand lines, so the server has dots to unstuff.
    """
    rng = random.Random(seed)
    lines = base64.encodebytes(rng.randbytes(size * 3 // 4)).split(b"\n")[:-1]
    for n in range(0, len(lines), 1000):
        lines[n] = b".." + lines[n]  # ".<line>", stuffed
    head = b"From: big@example.org\r\nTo: x@inboxd.localhost\r\nSubject: big %d\r\n\r\n" % seed
    return head + b"\r\n".join(lines) + b"\r\n"


def send_stuffed(port: int, to: str, stuffed: bytes) -> str:
    """One transaction over a blocking socket (its sendall leaves the GIL to the event loop)."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock, sock.makefile("rb") as replies:

        def reply() -> str:
            while True:
                line = replies.readline().decode()
                if line[3:4] != "-":
                    return line

        def cmd(text: bytes) -> str:
            sock.sendall(text)
            return reply()

        assert reply().startswith("220")
        assert cmd(b"EHLO big\r\n").startswith("250")
        assert cmd(b"MAIL FROM:<big@example.org>\r\n").startswith("250")
        assert cmd(b"RCPT TO:<%s>\r\n" % to.encode()).startswith("250")
        assert cmd(b"DATA\r\n").startswith("354")
        sock.sendall(stuffed)
        return cmd(b".\r\n")


async def test_big_messages_cost_a_bounded_number_of_copies_in_memory(child: Any) -> None:
    server = await child(INBOXD_PRO_MAILBOX_QUOTA=str(4 << 30))
    assert server.bootstrap_token is not None
    box = await new_mailbox(server.http_port, server.bootstrap_token, "big")
    messages = [big_message(24 * MiB, seed) for seed in range(9)]
    await timed_send(server.smtp_port, box["address"])
    pid = server.proc.pid

    async def peak_above_rest(batch: list[bytes]) -> int:
        rest = _status(pid, "VmRSS")
        _reset_peak(pid)
        sent = [asyncio.to_thread(send_stuffed, server.smtp_port, box["address"], m) for m in batch]
        assert all(r.startswith("250") for r in await asyncio.gather(*sent))
        return _status(pid, "VmHWM") - rest

    # One message: the chunks received, their join, the compressed copy, the database's copy and the
    # search indexer's parse; no longer several copies of it on the event loop.
    one = await peak_above_rest(messages[:1])
    # Eight at once: each holds its chunks while the big ones are finished one at a time.
    eight = await peak_above_rest(messages[1:])
    print(f"\n24 MiB messages, peak resident above rest: one {one / MiB:.0f} MiB, eight at once {eight / MiB:.0f} MiB")
    # One: held once by its session (DATA copied into one buffer, each chunk let go once copied),
    # then its compressed copy and SQLite's copy of that, then the indexer's read.
    assert one < 24 * MiB * 4.25, f"one 24 MiB message took {one / MiB:.0f} MiB"
    assert eight < 8 * 24 * MiB * 1.75, f"eight 24 MiB messages took {eight / MiB:.0f} MiB"


_SENDER = """
import sys
from tests.test_smtp_hardening import big_message, send_stuffed

port, to, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
messages = [big_message(24 << 20, seed) for seed in range(count)]
print("ready", flush=True)
sys.stdin.readline()
for message in messages:
    print(send_stuffed(port, to, message).strip(), flush=True)
"""


def _runqueue_wait() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (`schedstat`, second field)."""
    path = Path(f"/proc/self/task/{threading.get_native_id()}/schedstat")
    return int(path.read_text().split()[1]) / 1e9


async def probe_http(http: httpx.AsyncClient, until: asyncio.Future[Any]) -> list[float]:
    """Latencies of `GET /healthz` sent every 10 ms, whatever the earlier ones are doing, until `until`.

    The machine is shared: time this thread (the event loop's) spent waiting for a CPU meanwhile
    is other processes' doing, and is taken out. Time the loop spends busy stays in.
    """
    latencies: list[float] = []

    async def probe() -> None:
        waited, began = _runqueue_wait(), time.perf_counter()
        assert (await http.get("/healthz")).status_code == 200
        latencies.append(time.perf_counter() - began - (_runqueue_wait() - waited))

    probes = []
    while not until.done():
        probes.append(asyncio.create_task(probe()))
        await asyncio.sleep(0.01)
    await asyncio.gather(*probes)
    return sorted(latencies)


async def longest_turn(until: asyncio.Future[Any]) -> float:
    """The most CPU time the event loop's thread spent between two turns of this task.

    CPU time, not wall time, so a shared machine taking the CPU away does not count; what does is
    work that holds the loop, such as a big message parsed or compressed on it.
    """
    clock = time.pthread_getcpuclockid(threading.get_ident())
    longest, last = 0.0, time.clock_gettime(clock)
    while not until.done():
        await asyncio.sleep(0.002)
        now = time.clock_gettime(clock)
        longest, last = max(longest, now - last), now
    return longest


@sqlite
async def test_event_loop_stays_free_while_big_messages_arrive(make_settings: Any, clock: Any) -> None:
    async with Inboxd(make_settings(pro_mailbox_quota=4 << 30), clock=clock) as server:
        assert server.bootstrap_token is not None
        box = await new_mailbox(server.http_port, server.bootstrap_token, "fast")
        # The sender is a process of its own, so its work never runs on this event loop.
        sender = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _SENDER,
            str(server.smtp_port),
            box["address"],
            "4",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=Path(__file__).parent.parent,
        )
        assert sender.stdin is not None and sender.stdout is not None
        assert await asyncio.wait_for(sender.stdout.readline(), 120) == b"ready\n"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
            sender.stdin.write(b"go\n")
            replies = asyncio.ensure_future(sender.stdout.read())
            latencies, turn = await asyncio.gather(probe_http(http, replies), longest_turn(replies))
        assert [line[:3] for line in (await replies).split(b"\n") if line] == [b"250"] * 4
        assert await sender.wait() == 0
    p99 = latencies[int(len(latencies) * 0.99)]
    print(f"\n4 x 24 MiB: HTTP p99 {p99 * 1e3:.1f} ms ({len(latencies)} requests), longest turn {turn * 1e3:.1f} ms")
    # The gate is the loop's own CPU: on a shared machine the wall-clock p99 above also carries the
    # time a thread holding the GIL is kept off the CPU by other processes (docs/performance.md).
    assert turn < 0.050, f"the event loop was held for {turn * 1e3:.0f} ms of CPU"


def _runqueue_wait_of(pid: int, tid: int) -> float:
    """Seconds thread `tid` of process `pid` has spent runnable but waiting for a CPU."""
    return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1]) / 1e9


async def test_http_p99_stays_under_50_ms_while_big_messages_arrive(child: Any) -> None:
    """Wall clock, measured by a client in another process than the server's: `GET /healthz` every
    10 ms, whatever the earlier ones are doing, while four 24 MiB messages arrive and are indexed.

    The machine is shared: time that the server's event loop thread and this test's spent waiting
    for a CPU that other processes held is taken out of each latency (both are printed). Time the
    server's loop waits for its own threads' GIL stays in: that is what this test is about. A
    worker thread holding the GIL can still be kept off the CPU by other processes, which no
    correction sees, so a second round is allowed when the first misses (docs/performance.md has
    the figures of both kinds).
    """
    server = await child(INBOXD_PRO_MAILBOX_QUOTA=str(4 << 30))
    assert server.bootstrap_token is not None
    box = await new_mailbox(server.http_port, server.bootstrap_token, "p99")
    rounds = []
    for _ in range(2):
        p99, wall_p99, count = await _p99_while_big_messages_arrive(server, box["address"])
        print(f"\n4 x 24 MiB: HTTP p99 {p99 * 1e3:.1f} ms, wall clock {wall_p99 * 1e3:.1f} ms ({count} requests)")
        rounds.append(f"{p99 * 1e3:.0f} ms (wall clock {wall_p99 * 1e3:.0f} ms)")
        if p99 < 0.050:
            return
    raise AssertionError(f"HTTP p99 in each round: {', '.join(rounds)}")


async def _p99_while_big_messages_arrive(server: ServerProcess, address: str) -> tuple[float, float, int]:
    """(p99 with other processes' CPU time taken out, raw wall-clock p99, requests) of one round."""
    pid = server.proc.pid
    sender = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _SENDER,
        str(server.smtp_port),
        address,
        "4",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=Path(__file__).parent.parent,
    )
    assert sender.stdin is not None and sender.stdout is not None
    assert await asyncio.wait_for(sender.stdout.readline(), 120) == b"ready\n"
    wall: list[float] = []
    adjusted: list[float] = []
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:

        async def probe() -> None:
            waited = _runqueue_wait() + _runqueue_wait_of(pid, pid)
            began = time.perf_counter()
            assert (await http.get("/healthz")).status_code == 200
            took = time.perf_counter() - began
            wall.append(took)
            adjusted.append(took - (_runqueue_wait() + _runqueue_wait_of(pid, pid) - waited))

        for _ in range(20):
            await probe()
        wall.clear()
        adjusted.clear()
        sender.stdin.write(b"go\n")
        replies = asyncio.ensure_future(sender.stdout.read())
        probes = []
        # Two seconds past the last reply: the search indexer reads and parses each message after it.
        until = float("inf")
        while time.perf_counter() < until:
            if replies.done() and until == float("inf"):
                until = time.perf_counter() + 2.0
            probes.append(asyncio.create_task(probe()))
            await asyncio.sleep(0.01)
        await asyncio.gather(*probes)
    assert [line[:3] for line in (await replies).split(b"\n") if line] == [b"250"] * 4
    assert await sender.wait() == 0
    wall.sort()
    adjusted.sort()
    return adjusted[int(len(adjusted) * 0.99)], wall[int(len(wall) * 0.99)], len(wall)


async def test_detail_of_a_20_mib_nul_body_holds_few_copies(child: Any) -> None:
    """The detail of 20 MiB of NUL bytes is a 126 MB JSON answer (six bytes per character); it is
    encoded piece by piece while sent, and the server holds the message a few times, not the answer."""
    server = await child(INBOXD_PRO_MAILBOX_QUOTA=str(1 << 30))
    assert server.bootstrap_token is not None
    box = await new_mailbox(server.http_port, server.bootstrap_token, "nul")
    line = b"\x00" * 998 + b"\r\n"
    body = line * (20 * MiB // len(line))
    head = b"From: nul@example.org\r\nTo: %s\r\nSubject: nul\r\n\r\n" % box["address"].encode()
    assert (await asyncio.to_thread(send_stuffed, server.smtp_port, box["address"], head + body)).startswith("250")
    pid = server.proc.pid
    await asyncio.sleep(1.0)  # the search indexer's pass over the new message is not what is measured
    rest = _status(pid, "VmRSS")
    _reset_peak(pid)
    size = 0
    headers = {"Authorization": f"Bearer {server.bootstrap_token}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=120) as http:
        listed = await http.get(f"/api/accounts/{box['id']}/messages", headers=headers)
        [item] = listed.json()["messages"]
        async with http.stream("GET", f"/api/accounts/{box['id']}/messages/{item['id']}", headers=headers) as answer:
            assert answer.status_code == 200
            async for piece in answer.aiter_raw():
                size += len(piece)
    peak = _status(pid, "VmHWM") - rest
    print(f"\n20 MiB NUL detail: {size / 1e6:.0f} MB answer, peak resident above rest {peak / MiB:.0f} MiB")
    assert size > 5 * len(body)
    # The source and the decoded body, with slack; encoding the answer whole would take 126 MB more.
    assert peak < 64 * MiB, f"the detail took {peak / MiB:.0f} MiB"


def test_the_address_check_refuses_exactly_whitespace_brackets_and_controls() -> None:
    """The pattern `_plausible` uses (smtp/transaction.py) refuses what `str.isspace`, `<`, `>`
    and the C0 controls name, and nothing else, over the whole Basic Multilingual Plane."""
    from inboxd.smtp.transaction import _plausible

    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        c = chr(code)
        expected = not (c.isspace() or c in "<>" or code < 32)
        assert _plausible(f"a{c}b@example.com") is expected, hex(code)
    assert _plausible("a" * 320) and not _plausible("a" * 321) and not _plausible("")
