"""The compiled-alternative benchmark (bench/compiled): its steps drive the real code to the end of
a transaction, its C receiver speaks enough SMTP to be compared, and its build's rewrites of the
copied source still find what they rewrite."""

from __future__ import annotations

import ast
import json
import os
import shutil
import smtplib
import subprocess
import sys
from pathlib import Path

import pytest
from bench.compiled import build

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


@pytest.mark.parametrize("step", ["session", "handoff", "summary"])
def test_a_step_runs_the_source_modules(step: str) -> None:
    # The session step raises unless every message ends with the 250 of a delivery.
    argv = [sys.executable, "-m", "bench.compiled.steps", step, "--messages", "30", "--warmup", "3"]
    done = subprocess.run(argv, env=_env(), cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    result = json.loads(done.stdout)
    assert result["step"] == step
    assert result["us_per_msg"] > 0
    assert result["module"].endswith(".py")


def test_the_build_rewrites_still_apply(tmp_path: Path) -> None:
    transaction = tmp_path / "transaction.py"
    shutil.copy(build.SRC / "inboxd" / "smtp" / "transaction.py", transaction)
    build._unguard_declarations(transaction)
    tree = ast.parse(transaction.read_text())
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Transaction"]
    assert not [node for node in cls.body if isinstance(node, ast.If)]
    assert "server" in {
        n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    decoding = tmp_path / "decoding.py"
    shutil.copy(build.SRC / "inboxd" / "mail" / "decoding.py", decoding)
    build._spell_surrogates(decoding)
    assert "\\ud800" not in decoding.read_text()


# No skip without a C compiler: gcc is on every machine this suite runs on, and a missing one must fail.
def test_the_c_receiver_takes_a_message(tmp_path: Path) -> None:
    binary = build.c_receiver(tmp_path)
    log = tmp_path / "receiver.log"
    with log.open("w") as stderr:
        process = subprocess.Popen([str(binary), "0"], stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as client:
            refused = client.sendmail("a@load.test", ["b@inboxd.test"], b"Subject: hi\r\n\r\n.dotted\r\nbody\r\n")
            assert refused == {}
            code, _ = client.docmd("MAIL", "FROM:x")
            assert code == 501  # no angle brackets: refused as inboxd refuses it
    finally:
        process.terminate()
        process.wait(timeout=10)
    (line,) = log.read_text().splitlines()
    assert "transaction accepted" in line
    # 30 bytes as sent: the dot smtplib stuffed is taken out, the terminator left out.
    assert "size=30 " in line


@pytest.mark.timeout(240)
def test_the_word_count_measure_runs_under_callgrind() -> None:
    from bench.compiled import words

    count, printed = words._instructions("words once, C word set", 3)
    assert count > 1_000_000  # the interpreter's start alone is more
    every, once = (int(n) for n in printed.split())
    assert every > 600 and 0 < once < 60  # the bench message: a few dozen words, repeated
