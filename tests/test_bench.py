"""The benchmark's own parts: its message, its readings of wrk and py-spy, its Python SMTP
client and page counter against a real inboxd, and one whole `python -m bench ingest` run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from bench import compare, handovers
from bench.hotspots import fold
from bench.httpload import parse_wrk
from bench.message import build_message
from bench.servers import count_pages
from bench.smtpload import run_python_client
from bench.tools import Tools

from tests.conftest import PG_URL, Harness

ROOT = Path(__file__).resolve().parent.parent

WRK_OUTPUT = """Running 8s test @ http://127.0.0.1:8025/api/accounts/x/messages
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     7.66ms    2.10ms  39.40ms   91.00%
    Req/Sec     2.10k   100.00     2.30k    70.00%
  Latency Distribution
     50%    7.20ms
     75%    8.00ms
     90%    9.10ms
     99%  850.00us
  16800 requests in 8.00s, 40.00MB read
  Socket errors: connect 0, read 1, write 0, timeout 2
  Non-2xx or 3xx responses: 3
Requests/sec:   2100.50
Transfer/sec:      5.00MB
"""


def run_bench(argv: list[str], *, timeout: float, env: dict[str, str] | None = None) -> str:
    """A bench command run from the checkout, which must succeed; its standard output."""
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("size", [1000, 4096, 4097, 10000])
def test_message_has_the_exact_size_and_no_bare_line_endings(size: int) -> None:
    message = build_message(size, sender="a@load.test", recipient="b@inboxd.localhost")
    assert len(message) == size
    assert message.count(b"\r") == message.count(b"\r\n") == message.count(b"\n")
    assert b"\r\n." not in message
    assert message.endswith(b"\r\n")


def test_wrk_figures_and_errors_are_read() -> None:
    result = parse_wrk(WRK_OUTPUT, command="wrk …")
    assert result.rps == 2100.5
    assert result.requests == 16800
    assert result.p50_ms == pytest.approx(7.2)
    assert result.p99_ms == pytest.approx(0.85)
    assert result.errors == 6
    assert not result.failure


def test_unreadable_wrk_output_is_a_failure() -> None:
    assert parse_wrk("unable to connect to 127.0.0.1:1", command="wrk").failure


def test_py_spy_stacks_fold_into_self_inclusive_and_threads() -> None:
    collapsed = "\n".join(
        [
            "thread (1): MainThread;run (a/site-packages/uvloop/__init__.py:1);reply (x/src/inboxd/smtp/server.py:4) 6",
            "thread (1): MainThread;run (a/site-packages/uvloop/__init__.py:10);parse (x/src/inboxd/mail/parse.py:9) 2",
            "thread (2): sqlite-read_0;_run_read (x/src/inboxd/store/db.py:157) 1",
            "thread (3): sqlite-read_1;_run_read (x/src/inboxd/store/db.py:159) 1",
        ]
    )
    total, self_time, inclusive, threads = fold(collapsed)
    assert total == 10
    assert [(s.function, s.share) for s in self_time] == [
        ("reply (inboxd/smtp/server.py)", 0.6),
        ("parse (inboxd/mail/parse.py)", 0.2),
        ("_run_read (inboxd/store/db.py)", 0.2),
    ]
    assert inclusive[0].function == "run (uvloop/__init__.py)" and inclusive[0].share == 0.8
    assert [(t.function, t.share) for t in threads] == [("MainThread", 0.8), ("sqlite-read", 0.2)]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_python_client_delivers_every_message_and_pages_count_them(harness: Harness) -> None:
    mailbox = await harness.new_mailbox(local="bench")
    message = build_message(4096, sender="a@load.test", recipient=mailbox["address"])
    run = await asyncio.to_thread(
        run_python_client,
        port=harness.server.smtp_port,
        connections=4,
        messages=70,
        message=message,
        recipient=mailbox["address"],
        timeout=60,
    )
    assert not run.failure
    assert run.messages == 70 and run.elapsed > 0

    def page(n: int) -> list[Any]:
        url = f"http://127.0.0.1:{harness.server.http_port}/api/accounts/{mailbox['id']}/messages?page={n}"
        request = urllib.request.Request(url, headers=harness.auth())
        with urllib.request.urlopen(request, timeout=30) as response:
            items: list[Any] = json.loads(response.read())["messages"]
            return items

    assert await asyncio.to_thread(count_pages, page) == 70
    listed = (await harness.http.get(f"/api/accounts/{mailbox['id']}/messages", headers=harness.auth())).json()
    assert listed["messages"][0]["subject"] == "Benchmark message of four kilobytes"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_python_client_authenticates_on_the_sandbox(harness: Harness) -> None:
    """The submission bench's client: AUTH PLAIN once per connection, every message captured."""
    info = (await harness.http.get("/api/user/sandbox", headers=harness.auth())).json()
    message = build_message(4096, sender="a@load.test", recipient="customer@example.org")
    run = await asyncio.to_thread(
        run_python_client,
        port=info["smtp_port"],
        connections=4,
        messages=40,
        message=message,
        recipient="customer@example.org",
        timeout=60,
        auth=(info["username"], harness.admin_token),
    )
    assert not run.failure and "AUTH PLAIN" in run.command
    purged = await harness.http.delete("/api/user/sandbox/messages", headers=harness.auth())
    assert purged.json() == {"deleted": 40}
    wrong = await asyncio.to_thread(
        run_python_client,
        port=info["smtp_port"],
        connections=1,
        messages=1,
        message=message,
        recipient="customer@example.org",
        timeout=60,
        auth=(info["username"], "ibx_wrong"),
    )
    assert "535" in wrong.failure


def test_counting_pages_finds_every_length() -> None:
    for n in (0, 1, 29, 30, 31, 60, 61, 899, 900, 10000):

        def page(p: int, n: int = n) -> list[int]:
            return list(range(min(30, max(0, n - 30 * (p - 1)))))

        assert count_pages(page) == n


def test_bench_ingest_runs_inboxd_as_a_process_and_checks_durability(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bench", "ingest", "--targets", "inboxd-sqlite", "--client", "python"]
    out = run_bench([*argv, "--connections", "1,4", "--messages", "40"], timeout=110)
    assert re.search(r"\[2\] inboxd \(SQLite\)\s+4\s+40\s+40\s", out), out
    assert "python -m bench ingest --targets inboxd-sqlite --connections 4 --messages 40 --client python" in out
    assert "NOTE" not in out


def test_missing_load_tools_say_how_to_install_them() -> None:
    hints = Tools(smtp_source=None, wrk=None, py_spy=None).missing_hints()
    assert len(hints) == 2
    assert all("apt-get update && apt-get install -y postfix wrk" in h for h in hints)
    assert Tools(smtp_source="/usr/sbin/smtp-source", wrk="/usr/bin/wrk", py_spy=None).missing_hints() == []


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_bench_compare_builds_ref_apart_and_prints_the_ratio_table(tmp_path: Path, backend: str) -> None:
    """`python -m bench compare HEAD` with tiny counts: REF is built into a virtual environment of
    its own (kept, with --keep-venv, under --venv-cache), both builds are measured, and the table
    has a row per measure with REF, working tree and ratio; `--backend postgres` stores ingest and
    the reads on PostgreSQL."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    commit_id = commit.stdout.strip()
    cache = tmp_path / "venvs"
    argv = [sys.executable, "-m", "bench", "compare", "HEAD", "--messages", "200", "--fill", "100"]
    argv += ["--duration", "1", "--repeats", "1", "--keep-venv", "--venv-cache", str(cache)]
    argv += [] if backend == "sqlite" else ["--backend", backend, "--pg-url", PG_URL]
    out = run_bench(argv, timeout=280)
    assert "Problems" not in out
    assert (cache / commit_id / compare.COMPLETE).read_text().strip() == commit_id
    assert f"inboxd from {cache / commit_id}/lib/" in out
    assert f"inboxd from {ROOT / 'src' / 'inboxd'}," in out
    assert re.search(r"load average \(1, 5, 15 min\) before: [\d.]+ [\d.]+ [\d.]+", out)
    assert re.search(r"load average \(1, 5, 15 min\) after: [\d.]+ [\d.]+ [\d.]+", out)
    counts = "--repeats 1 --messages 200 --fill 100 --duration 1"
    if backend == "postgres":
        counts += " --backend postgres"
        assert "ingest and reads stored on: PostgreSQL" in out
    else:
        assert "ingest and reads stored on: SQLite" in out
    assert f"reproduce: python -m bench compare {commit_id[:12]} {counts}   (REF HEAD)" in out

    table = [[cell.strip() for cell in line.strip("|").split("|")] for line in out.splitlines() if line.startswith("|")]
    assert table[0] == ["measure (median of 1, min–max)", f"REF {commit_id[:7]}", "working tree", "tree / REF"]
    assert table[1] == ["---", "---:", "---:", "---:"]
    assert [row[0] for row in table[2:]] == [
        "ingest, msg per server CPU-second",
        "ingest, msg/s",
        "list page (30 of 100), req/s",
        "list page, req per server CPU-second",
        "one message, req/s",
        "one message, req per server CPU-second",
        "resident memory, idle, MB",
    ]
    for name, ref, tree, ratio in table[2:]:
        assert re.fullmatch(r"[\d,]+(\.\d\d)?", ref) and re.fullmatch(r"[\d,]+(\.\d\d)?", tree), name
        assert float(ref.replace(",", "")) > 0 and float(tree.replace(",", "")) > 0, name
        assert re.fullmatch(r"\d+(\.\d\d)?×", ratio), name


def test_bench_compare_reuses_a_kept_environment_and_refuses_an_unknown_ref(tmp_path: Path) -> None:
    kept = tmp_path / "0123abcd"
    kept.mkdir()
    (kept / compare.COMPLETE).write_text("0123abcd\n")
    venv, how = compare.ref_environment("0123abcd", workdir=tmp_path / "work", cache=tmp_path, keep=False)
    assert venv == kept and how == f"reused {kept}"
    assert not (tmp_path / "work").exists()

    argv = [sys.executable, "-m", "bench", "compare", "no-such-commit-anywhere"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "'no-such-commit-anywhere' names no commit" in done.stderr


@pytest.mark.timeout(300)
def test_bench_instructions_counts_a_servers_instructions_per_message() -> None:
    """`bench/instructions.sh` runs the working tree's server under callgrind, sends the bench's
    mail and prints the instructions per message (a few tens of messages here; the documented
    figures use 1,000)."""
    env = {**os.environ, "N": "40", "SETTLE": "2"}
    out = run_bench(
        ["bash", str(ROOT / "bench/instructions.sh"), sys.executable, str(ROOT / "src")], timeout=280, env=env
    )
    found = re.search(r"instructions per message: (\d+)   \((\d+) for 40 messages; ", out)
    assert found, out
    per, total = int(found[1]), int(found[2])
    assert per == total // 40
    # A message costs hundreds of thousands of instructions; a count of nothing would be a broken run.
    assert 200_000 < per < 20_000_000, per


@pytest.mark.timeout(300)
def test_bench_read_instructions_counts_a_servers_instructions_per_read() -> None:
    """`bench/read_instructions.sh` fills a mailbox on the working tree's server under callgrind
    and prints the instructions per list page and per message opened (tens of requests here; the
    documented figures use 300 of each after a fill of 1,000)."""
    env = {**os.environ, "R": "20", "FILL": "40"}
    out = run_bench(
        ["bash", str(ROOT / "bench/read_instructions.sh"), sys.executable, str(ROOT / "src")], timeout=280, env=env
    )
    found = re.search(r"list page \(30 of 40\) (\d+), one message (\d+)   \(20 requests each; ", out)
    assert found, out
    page, one = int(found[1]), int(found[2])
    # A request costs hundreds of thousands of instructions, a page of 30 more than one message.
    assert 100_000 < one < page < 20_000_000, (page, one)


@pytest.mark.timeout(300)
def test_bench_threads_splits_a_servers_cpu_by_thread_and_counts_its_writes() -> None:
    """`python -m bench.threads` runs the working tree's server as `make run` does, sends the bench's
    mail and prints each thread's CPU and the write calls per message (a few hundred messages and
    one round here; the documented figures use 6,000 and three)."""
    argv = [sys.executable, "-m", "bench.threads", "--rounds", "1", "--messages", "300", "--src", str(ROOT / "src")]
    out = run_bench(argv, timeout=280)
    figures = dict(re.findall(r"^  (.+?) +(-?[\d,.]+)   \(", out, re.M))
    # (CPU comes in ticks of 10 ms, and a few hundred messages spend few of them on each thread)
    for key in ("msg/s", "msg per CPU-second", "main switches", "thread 2 switches", "syscw per message"):
        assert float(figures[key].replace(",", "")) > 0, out
    # At least the SMTP replies (4 a message) and the WAL frames (2 write calls a page) of each message.
    assert float(figures["syscw per message"]) > 4, out


def test_handover_stacks_are_named_after_the_call_that_let_go_of_the_gil() -> None:
    script = (
        "python 7 [000] 1.0: sched:sched_switch: prev_comm=python prev_pid=7 ==> next_comm=x\n"
        "\tffffffff821f8b58 __schedule+0x618 ([kernel.kallsyms])\n"
        "\t          1f2a3 __futex_abstimed_wait_common+0x7 (/usr/lib/libc.so.6)\n"
        "\t          2b1c0 take_gil+0x120 (inlined)\n"
        "\t          2b1c0 PyEval_RestoreThread+0x20 (/usr/lib/libpython3.11.so)\n"
        "\t          3c4d5 stmt_step+0x35 (/usr/lib/_sqlite3.so)\n"
        "\n"
        "python 7 [001] 1.1: sched:sched_switch: prev_comm=python prev_pid=7 ==> next_comm=y\n"
        "\tffffffff821f8b58 __schedule+0x618 ([kernel.kallsyms])\n"
        "\t          108cae fdatasync+0x6e (/usr/lib/libc.so.6)\n"
        "\n"
        "python 5 [001] 1.2: sched:sched_switch: prev_comm=python prev_pid=5 ==> next_comm=z\n"
        "\tffffffff821f8b58 __schedule+0x618 ([kernel.kallsyms])\n"
        "\tffffffff821f8b60 exit_to_user_mode_loop+0x10 ([kernel.kallsyms])\n"
        "\t          55aa _PyEval_EvalFrameDefault+0x2e52 (/usr/lib/libpython3.11.so)\n"
    )
    threads = handovers.tally(script)
    assert threads == {"7": {"GIL, after stmt_step": 1, "the disk (fdatasync)": 1}, "5": {"preempted": 1}}


@pytest.mark.timeout(300)
def test_bench_handovers_records_where_a_servers_threads_wait() -> None:
    """`python -m bench.handovers` runs the working tree's server under perf and prints, per thread,
    what its switches per message waited for (a few hundred messages here)."""
    argv = [sys.executable, "-m", "bench.handovers", "--messages", "300", "--src", str(ROOT / "src")]
    out = run_bench(argv, timeout=280)
    assert re.search(r"^  main thread \(event loop\): \d+\.\d\d$", out, re.M), out
    # The SQLite writer waits for the disk at each commit, and for the GIL after its statements.
    assert re.search(r"^ +\d+\.\d\d  the disk \(fdatasync\)$", out, re.M), out
    assert re.search(r"^ +\d+\.\d\d  GIL, after stmt_step$", out, re.M), out
