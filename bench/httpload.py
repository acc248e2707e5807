"""HTTP load with `wrk`: requests per second and latency percentiles for one URL."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass

_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


@dataclass(frozen=True, slots=True)
class WrkResult:
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int  # non-2xx/3xx answers plus socket errors
    command: str
    failure: str = ""


def _ms(value: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value)
    if not match:
        return 0.0
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(output: str, *, command: str) -> WrkResult:
    """Read the figures out of `wrk --latency` output."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", output)
    total = re.search(r"(\d+) requests in", output)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.M)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    errors = int(non2xx.group(1)) if non2xx else 0
    if sockets:
        errors += sum(int(g) for g in sockets.groups())
    if rps is None or total is None:
        return WrkResult(0, 0.0, 0.0, 0.0, errors, command, failure=f"unreadable wrk output: {output[-200:]!r}")
    return WrkResult(
        requests=int(total.group(1)),
        rps=float(rps.group(1)),
        p50_ms=_ms(p50.group(1)) if p50 else 0.0,
        p99_ms=_ms(p99.group(1)) if p99 else 0.0,
        errors=errors,
        command=command,
    )


def run_wrk(tool: str, url: str, *, connections: int, duration: float, token: str = "") -> WrkResult:
    """One wrk thread (on two cores a second one would take CPU from the server)."""
    argv = [tool, "-t1", f"-c{connections}", f"-d{duration:g}s", "--timeout", "30s", "--latency"]
    shown = list(argv)
    if token:
        argv += ["-H", f"Authorization: Bearer {token}"]
        shown += ["-H", "Authorization: Bearer $TOKEN"]
    argv.append(url)
    shown.append(url)
    command = shlex.join(shown)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60, check=False)
    except subprocess.TimeoutExpired:
        return WrkResult(0, 0.0, 0.0, 0.0, 0, command, failure="wrk did not finish")
    if done.returncode != 0:
        return WrkResult(0, 0.0, 0.0, 0.0, 0, command, failure=f"wrk exited {done.returncode}: {done.stderr[-200:]}")
    return parse_wrk(done.stdout, command=command)
