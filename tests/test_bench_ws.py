"""One small whole run of `python -m bench.ws_latency`, so the benchmark keeps working."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(120)
async def test_ws_latency_small_run() -> None:
    command = [sys.executable, "-m", "bench.ws_latency", "--clients", "12", "--samples", "5", "--rate", "40"]
    done = await asyncio.to_thread(subprocess.run, command, cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "idle (1 client)" in done.stdout
    assert "12 idle clients connected" in done.stdout
    assert "KiB per connection" in done.stdout
    assert "12/12 connections open" in done.stdout
    assert "reproduce: .venv/bin/python -m bench.ws_latency --clients 12" in done.stdout
