"""How to install one of inboxd's optional extras (`render`, `pytest`), as a command that runs as
printed where it is printed.

inboxd is not on the package index, so `pip install 'inboxd[render]'` cannot succeed. The command
is made from where the running code was installed from: the checkout's own environment (the one
`make run` and `make test` build) gets `make -C CHECKOUT install EXTRAS=…`; any other environment
gets its own Python's `pip install 'CHECKOUT[extra]'`; code not installed from a checkout (a wheel)
is told to install the extra from one.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def checkout() -> Path | None:
    """The source checkout this inboxd runs from (an editable install), or None."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "src" / "inboxd").is_dir() else None


def install_command(extra: str) -> str:
    """The command that installs `extra` for the Python running now."""
    root = checkout()
    if root is None:
        return f"pip install '/path/to/an/inboxd/checkout[{extra}]' (inboxd is not on the package index)"
    if Path(sys.prefix).resolve() == (root / ".venv").resolve():
        return f"make -C {shlex.quote(str(root))} install EXTRAS={extra}"
    return f"{shlex.quote(sys.executable)} -m pip install {shlex.quote(f'{root}[{extra}]')}"
