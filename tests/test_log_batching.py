"""`serve`'s log lines are written out in batches (logs.BatchedLines): one system call for many
lines, within FLUSH_SECONDS, at once for a warning or worse, and at exit."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TextIO, cast

from inboxd import logs


class CountingTarget(io.StringIO):
    """A stream that counts the writes it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def wait_for(check: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not written in time"
        time.sleep(0.01)


def test_lines_wait_for_the_batch_and_go_out_in_one_write() -> None:
    target = CountingTarget()
    stream = logs.BatchedLines(target, seconds=0.3)
    started = time.monotonic()
    for n in range(100):
        stream.write(f"line {n}\n")
        stream.flush()  # as logging does after each record: nothing goes out yet
    assert target.getvalue() == ""
    wait_for(lambda: target.getvalue() != "")
    assert time.monotonic() - started >= 0.25
    assert target.getvalue() == "".join(f"line {n}\n" for n in range(100))
    assert target.writes == 1


def test_a_full_batch_goes_out_at_once() -> None:
    target = CountingTarget()
    stream = logs.BatchedLines(target, seconds=60, chars=1000)
    stream.write("x" * 600 + "\n")
    assert target.getvalue() == ""
    stream.write("y" * 600 + "\n")
    assert target.getvalue() == "x" * 600 + "\n" + "y" * 600 + "\n"


def test_a_warning_drains_the_lines_before_it() -> None:
    target = CountingTarget()
    handler = logs._LineHandler(cast(TextIO, logs.BatchedLines(target, seconds=60)))
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("inboxd.test-batching")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info("first")
        assert target.getvalue() == ""
        logger.warning("then trouble")
        assert target.getvalue() == "INFO first\nWARNING then trouble\n"
    finally:
        logger.removeHandler(handler)


def test_lines_still_waiting_are_written_at_exit() -> None:
    code = (
        "import logging; from inboxd import logs\n"
        "logs.configure(level='info', fmt='text', batched=True)\n"
        "logging.getLogger('inboxd.x').info('last words')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "INFO inboxd.x: last words" in done.stderr


def test_a_broken_stream_loses_the_batch_but_not_the_logger() -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError("the reader went away")

    stream = logs.BatchedLines(Broken(), seconds=60)
    stream.write("lost\n")
    stream.drain()  # no exception
    stream.write("also lost\n")
    stream.drain()


def test_drain_writes_the_waiting_lines_before_what_follows() -> None:
    """`serve` drains the batch before click prints its error line, so the log keeps its order
    (and a process ended by `os._exit`, which runs no exit handler, still had them out)."""
    code = (
        "import logging, os, sys; from inboxd import logs\n"
        "logs.configure(level='info', fmt='text', batched=True)\n"
        "logging.getLogger('inboxd.x').info('before')\n"
        "logs.drain()\n"
        "print('Error: after', file=sys.stderr, flush=True)\n"
        "os._exit(1)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.index("INFO inboxd.x: before") < done.stderr.index("Error: after")
