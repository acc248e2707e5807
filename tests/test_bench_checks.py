"""`python -m bench.checks` runs end to end (three messages, so the suite stays quick) and prints
both figures with the command that reproduces them; the figures themselves are not judged here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_checks_bench_times_the_whole_report_path() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.checks", "3"],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("reproduce: python -m bench.checks 3\n")
    assert "pure part of a 31 KB HTML message's report, 3 runs:" in out
    assert "whole report over HTTP of a 31 KB HTML message" in out
    assert re.search(r"  computed: median [0-9.]+ ms, p10 [0-9.]+, p90 [0-9.]+", out), out
    assert re.search(r"  kept \(the next request\): median [0-9.]+ ms", out), out
