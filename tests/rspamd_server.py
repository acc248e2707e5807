"""A real rspamd (Debian's package, `make test` installs it) for the spam-score tests.

Run in the foreground as a child of the test process, with a configuration written to a temporary
directory: Debian's rules (`/etc/rspamd`), one normal worker on a free port of 127.0.0.1, no
controller, proxy or fuzzy worker, no Redis, logs to the console, its databases in the temporary
directory, and DNS sent to the suite's DNS server (names answer NXDOMAIN at once, rather than
every lookup timing out without a network). The system's rspamd service is never touched.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.conftest import free_port

RSPAMD = "/usr/bin/rspamd"

_CONFIG = """\
.include "$CONFDIR/common.conf"
options {{
    .include "$CONFDIR/options.inc"
    dns {{ nameserver = ["{dns}"]; timeout = 0.5s; retransmits = 1; }}
}}
logging {{ type = "console"; level = "error"; }}
worker "normal" {{
    bind_socket = "127.0.0.1:{port}";
    .include "$CONFDIR/worker-normal.inc"
    count = 1;
}}
"""


class Rspamd:
    def __init__(self, directory: Path, *, dns: str) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (directory / "db").mkdir(parents=True, exist_ok=True)
        (directory / "rspamd.conf").write_text(_CONFIG.format(dns=dns, port=self.port))
        self.log = directory / "rspamd.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, *, within: float = 90.0) -> None:
        d = self.directory
        command = [RSPAMD, "--no-fork", "-c", str(d / "rspamd.conf")]
        command += [f"--var={k}={v}" for k, v in (("LOCAL_CONFDIR", d), ("DBDIR", d / "db"), ("RUNDIR", d))]
        command += [f"--var=LOGDIR={d}"]
        if os.geteuid() == 0:
            command.append("--insecure")  # rspamd refuses to run its workers as root otherwise
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(command, cwd=d, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + within
        # rspamd says nothing when its worker listens: its /ping is asked until it answers.
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"rspamd exited: {self.log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/ping", timeout=1) as answer:
                    if answer.read().strip() == b"pong":
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"rspamd did not answer within {within} s")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None
