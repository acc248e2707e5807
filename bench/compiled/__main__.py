"""`python -m bench.compiled`: what compiling the Python-bound steps of ingest would win, measured.

Builds, in a scratch directory, a copy of src/ whose SMTP protocol and summary parse modules mypyc
compiled (`build.mypyc_tree`) and the minimal C SMTP receiver (`smtp_receiver.c`), then measures
in alternating rounds (the order flips each round):

1. in-process, CPU per message (`steps.py`): the SMTP session driven through a sink transport,
   with the transaction log line on (level info, as served) and off, and `parse_summary` on the
   bench's 4 KB mail and on the tests/data corpus: the source modules against the mypyc ones,
   and the summary taken from a compiled parser (fast-mail-parser, Rust; `pip install --target`
   into the scratch directory, `--no-native` to skip it);
2. over sockets, the server's CPU per message under `smtp-source -d` (32 sessions, 4 KB mails,
   a connection per message, as `bench ingest` drives inboxd): inboxd's protocol with nothing
   behind it (`receiver.py`), from source and compiled by mypyc, against the C receiver.

Prints the machine, the load average and one Markdown table (median and min–max of the rounds,
the ratio as the median of the per-round ratios, and each figure's share of a whole message's
ingest, `--ingest-us`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from bench.compiled import build
from bench.message import build_message, write_for_smtp_source
from bench.servers import Inboxd, cpu_model, cpu_seconds
from bench.tools import find_tools

ROOT = Path(__file__).resolve().parent.parent.parent
SENDER = "sender@load.test"
RECIPIENT = "bench@inboxd.test"
# The compiled MIME parser the summary is measured with: a wheel from PyPI, pinned.
NATIVE_PARSER = "fast-mail-parser==0.10.0"
# Server CPU per ingested message, SMTP to commit and index: 2,600 msg per CPU-second in the
# `bench compare` runs of 2026-11-26 (docs/performance.md).
INGEST_US = 390.0


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    pythonpath: str  # first on PYTHONPATH: which inboxd is imported


def _env(variant: Variant) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([variant.pythonpath, str(ROOT)])}


def run_step(variant: Variant, argv: list[str]) -> dict[str, object]:
    command = [sys.executable, "-m", "bench.compiled.steps", *argv]
    done = subprocess.run(command, env=_env(variant), cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    module = str(result["module"])
    compiled = module.endswith(".so")
    if compiled != (variant.name == "mypyc") and variant.name != "native":
        raise RuntimeError(f"{variant.name} ran {module}")
    return result


def install_native(scratch: Path) -> Path:
    """The compiled parser's wheel, installed into the scratch directory only."""
    target = scratch / "native"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary", ":all:"]
    subprocess.run([*pip, "--target", str(target), NATIVE_PARSER], check=True)
    return target


def _wait_port(process: subprocess.Popen[str]) -> int:
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.strip():
        raise RuntimeError(f"{process.args!r} printed no port")
    return int(line)


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def user_system(pid: int) -> tuple[float, float]:
    """A process's user and system CPU-seconds so far (its threads included; Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def serve_load(
    argv: list[str], env: dict[str, str], *, smtp_source: str, mail: Path, messages: int, log: Path
) -> tuple[float, float]:
    """Server CPU µs per message, user and system, while `smtp-source` sends `messages` mails;
    checks each was taken."""
    with log.open("w") as stderr:
        process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        port = _wait_port(process)
        time.sleep(0.3)  # past the start's imports and allocations
        before = user_system(process.pid)
        load = [smtp_source, "-d", "-s", "32", "-m", str(messages), "-F", str(mail), "-f", SENDER, "-t", RECIPIENT]
        subprocess.run([*load, f"127.0.0.1:{port}"], check=True, timeout=300, stdout=subprocess.DEVNULL)
        time.sleep(0.2)  # the last replies and closes
        after = user_system(process.pid)
    finally:
        _stop(process)
    accepted = sum(1 for line in log.read_text().splitlines() if "transaction accepted" in line)
    if accepted != messages:
        raise RuntimeError(f"{argv[0]}: {accepted} of {messages} messages accepted")
    return (after[0] - before[0]) / messages * 1e6, (after[1] - before[1]) / messages * 1e6


def _settle(pid: int, *, limit: float = 60.0) -> None:
    """Wait until the server is idle (below 5 % of a core over a quarter second): the indexing a
    load leaves behind counts, as in `bench goals` and `bench compare`."""
    deadline = time.monotonic() + limit
    last = cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = cpu_seconds(pid)
        if now - last < 0.05 * 0.25:
            return
        last = now


def whole_ingest(scratch: Path, *, smtp_source: str, mail: Path, messages: int) -> float:
    """inboxd as `make run` serves it (SQLite), server CPU µs per message, SMTP to commit and index."""
    server = Inboxd(backend="sqlite", workdir=scratch, pg_url="")
    load = [smtp_source, "-d", "-s", "32", "-F", str(mail), "-f", SENDER]
    try:
        server.start()
        warmup = server.create_mailbox("warmup@inboxd.localhost")
        subprocess.run([*load, "-m", "200", "-t", warmup.address, f"127.0.0.1:{server.smtp_port}"], check=True)
        _settle(server.pid)
        mailbox = server.create_mailbox("bench@inboxd.localhost")
        before = cpu_seconds(server.pid)
        command = [*load, "-m", str(messages), "-t", mailbox.address, f"127.0.0.1:{server.smtp_port}"]
        subprocess.run(command, check=True, timeout=600, stdout=subprocess.DEVNULL)
        _settle(server.pid)
        spent = cpu_seconds(server.pid) - before
        stored = server.count(mailbox)
    finally:
        server.stop()
    if stored != messages:
        raise RuntimeError(f"inboxd stored {stored} of {messages} messages")
    return spent / messages * 1e6


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}–{max(values):,.1f})"


def _ratio(base: list[float], other: list[float]) -> str:
    ratios = [b / o for b, o in zip(base, other, strict=True)]
    return f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compiled", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="alternating rounds")
    parser.add_argument("--messages", type=int, default=5000, help="messages per in-process step run")
    parser.add_argument("--load-messages", type=int, default=20000, help="messages per smtp-source run")
    parser.add_argument("--ingest-messages", type=int, default=6000, help="messages per whole-ingest run")
    parser.add_argument(
        "--ingest-us", type=float, default=INGEST_US, help="server CPU µs of one ingested message, with --no-load"
    )
    parser.add_argument("--scratch", type=Path, help="build here and keep it (default: a temporary directory)")
    parser.add_argument("--no-load", action="store_true", help="only the in-process steps")
    parser.add_argument("--no-native", action="store_true", help="without the compiled parser from PyPI")
    args = parser.parse_args(argv)
    smtp_source = find_tools().smtp_source
    if smtp_source is None and not args.no_load:
        print("smtp-source not found: apt-get install postfix, or pass --no-load", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="inboxd-compiled-") as temporary:
        scratch = args.scratch or Path(temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        tree = build.mypyc_tree(scratch)
        mypyc_seconds = time.perf_counter() - started
        receiver = build.c_receiver(scratch)
        native = None if args.no_native else install_native(scratch)
        mail = write_for_smtp_source(build_message(4096, sender=SENDER, recipient=RECIPIENT), scratch / "mail-4k.eml")
        source = Variant("python", str(ROOT / "src"))
        compiled = Variant("mypyc", str(tree))
        natives = [] if native is None else [Variant("native", os.pathsep.join([str(native), str(ROOT / "src")]))]
        load_before = os.getloadavg()[0]
        figures: dict[str, list[float]] = defaultdict(list)
        same = ""
        step_size = ["--messages", str(args.messages)]
        steps = {
            "session": ["session", *step_size],
            "session, log line off": ["session", *step_size, "--log-level", "warning"],
            "summary": ["summary", *step_size],
        }
        for round_ in range(args.repeats):
            order = (source, compiled) if round_ % 2 == 0 else (compiled, source)
            for label, step in steps.items():
                for variant in order:
                    result = run_step(variant, step)
                    figures[f"{label} / {variant.name}"].append(float(str(result["us_per_msg"])))
                    if label == "summary":
                        figures[f"summary, corpus / {variant.name}"].append(float(str(result["corpus_us_per_msg"])))
            figures["handoff / python"].append(float(str(run_step(source, ["handoff", *step_size])["us_per_msg"])))
            for variant in natives:
                result = run_step(variant, ["summary-native", *step_size])
                figures["summary / native"].append(float(str(result["us_per_msg"])))
                figures["summary, corpus / native"].append(float(str(result["corpus_us_per_msg"])))
                figures["summary, parser call alone / native"].append(float(str(result["parse_us_per_msg"])))
                same = f"{result['corpus_same']} of {result['corpus_messages']}"
            if args.no_load:
                continue
            assert smtp_source is not None
            servers = [
                ("python", [sys.executable, "-m", "bench.compiled.receiver"], _env(source)),
                ("mypyc", [sys.executable, "-m", "bench.compiled.receiver"], _env(compiled)),
                ("C", [str(receiver), "0"], dict(os.environ)),
            ]
            figures["whole ingest / python"].append(
                whole_ingest(scratch, smtp_source=smtp_source, mail=mail, messages=args.ingest_messages)
            )
            shift = round_ % len(servers)
            for name, command, env in servers[shift:] + servers[:shift]:
                log = scratch / f"receiver-{name}.log"
                user, system = serve_load(
                    command, env, smtp_source=smtp_source, mail=mail, messages=args.load_messages, log=log
                )
                figures[f"over sockets / {name}"].append(user + system)
                figures[f"over sockets, system (kernel) part / {name}"].append(system)
            print(f"round {round_ + 1} of {args.repeats} done", file=sys.stderr)
        load_after = os.getloadavg()[0]
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"load average {load_before:.2f} before, {load_after:.2f} after; mypyc build {mypyc_seconds:.0f} s")
    print(f"command: python -m bench.compiled {shlex.join(argv)}".rstrip())
    if same:
        print(f"summaries from the compiled parser equal to parse_summary's: {same} in the corpus")
    print()
    print("| step (CPU µs per message, median of rounds, min–max) | Python | compiled | Python / compiled |")
    print("|---|---:|---:|---:|")
    rows = [
        ("SMTP session, in-process (mypyc)", "session"),
        ("… transaction log line off (mypyc)", "session, log line off"),
        ("parse_summary, bench 4 KB mail (mypyc)", "summary"),
        ("parse_summary, tests/data corpus (mypyc)", "summary, corpus"),
        ("SMTP over sockets, smtp-source -d -s 32 (mypyc)", "over sockets"),
    ]
    for label, key in rows:
        base, other = figures.get(f"{key} / python"), figures.get(f"{key} / mypyc")
        if base and other:
            print(f"| {label} | {_fmt(base)} | {_fmt(other)} | {_ratio(base, other)} |")
    pairs = [
        ("parse_summary, bench 4 KB mail (fast-mail-parser)", "summary / python", "summary / native"),
        ("parse_summary, tests/data corpus (fast-mail-parser)", "summary, corpus / python", "summary, corpus / native"),
        ("SMTP over sockets, smtp-source -d -s 32 (C receiver)", "over sockets / python", "over sockets / C"),
    ]
    for label, left, right in pairs:
        base, other = figures.get(left), figures.get(right)
        if base and other:
            print(f"| {label} | {_fmt(base)} | {_fmt(other)} | {_ratio(base, other)} |")
    whole = figures.get("whole ingest / python")
    ingest_us = statistics.median(whole) if whole else args.ingest_us
    if whole:
        print(f"| whole ingest, inboxd serve (SQLite), smtp-source -d -s 32 | {_fmt(whole)} | | |")
    base, front = figures.get("over sockets / python"), figures.get("over sockets / C")
    handoff = figures.get("handoff / python")
    if base and front and handoff:
        estimate = statistics.median(front) + statistics.median(handoff)
        saved = statistics.median(base) - estimate
        after = ingest_us - saved
        print()
        print(
            f"a C front end handing each message to Python: {estimate:,.1f} µs (C receiver + hand-off), "
            f"{saved:,.1f} µs less than Python's protocol: ingest {ingest_us:.0f} → {after:.0f} µs, "
            f"{1e6 / ingest_us:,.0f} → {1e6 / after:,.0f} msg per CPU-second"
        )
    print()
    print(f"share of one ingested message ({ingest_us:.0f} µs), medians:")
    for key, values in sorted(figures.items()):
        print(f"  {key}: {statistics.median(values):,.1f} µs = {statistics.median(values) / ingest_us:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
