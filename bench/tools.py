"""The external load tools the benchmark drives, and how to get them when they are missing.

`smtp-source` (Postfix, C) is the preferred SMTP load: on two cores a Python client competes
with the server for CPU. `wrk` (C) is the HTTP load. `py-spy` samples the server for `profile`.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

INSTALL_LOAD_TOOLS = "apt-get update && apt-get install -y postfix wrk"
INSTALL_PY_SPY = "pip install py-spy  (into the same virtual environment)"
# Debian puts smtp-source in /usr/sbin, which is not on every user's PATH.
_EXTRA_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")


@dataclass(frozen=True, slots=True)
class Tools:
    smtp_source: str | None
    wrk: str | None
    py_spy: str | None

    def missing_hints(self) -> list[str]:
        """One line per missing tool: what it is for and how to install it."""
        hints = []
        if self.smtp_source is None:
            hints.append(f"smtp-source not found (SMTP load; the Python client is used instead): {INSTALL_LOAD_TOOLS}")
        if self.wrk is None:
            hints.append(f"wrk not found (HTTP load; the API figures need it): {INSTALL_LOAD_TOOLS}")
        return hints


def _which(name: str) -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), *_EXTRA_DIRS])
    return shutil.which(name, path=path)


def find_tools() -> Tools:
    venv_bin = Path(sys.executable).parent
    py_spy = _which("py-spy") or (str(venv_bin / "py-spy") if (venv_bin / "py-spy").exists() else None)
    return Tools(smtp_source=_which("smtp-source"), wrk=_which("wrk"), py_spy=py_spy)
