"""The commands inboxd prints for its operator, at start and on the dashboard's sign-in page, written
so that each runs as printed in a fresh shell: this inboxd as it can be typed here, and before it the
settings the command reads that such a shell would not have (a second server's `INBOXD_BASE_URL`
and `INBOXD_DATA_DIR`).

Shared ground: it reads `Settings` and `sys.argv`, nothing else.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from inboxd.config import Settings

# The admin the first start creates; the sign-in hints name it while it exists.
BOOTSTRAP_ADMIN = "admin@localhost"
# What a hint names when no user is known to it: the reader puts their own email there.
YOUR_EMAIL = "YOUR_EMAIL"


def invocation() -> str:
    """This inboxd's command as it can be typed again here: `PYTHON -m inboxd` when started so,
    `inboxd` when the script started is the one on PATH, else the script's path (`.venv/bin/inboxd`
    after `make run`, relative to the directory it was started in). A process started some other
    way (an ASGI server, a test run) names `inboxd`."""
    started = sys.argv[0] if sys.argv else ""
    if Path(started).name == "__main__.py":
        return f"{_typed(sys.executable)} -m inboxd"
    if Path(started).name != "inboxd":
        return "inboxd"
    on_path = shutil.which("inboxd")
    if on_path and os.path.realpath(on_path) == os.path.realpath(started):
        return "inboxd"
    return _typed(started)


def _typed(path: str) -> str:
    # A path under the working directory stays relative (`.venv/bin/inboxd`); the venv's own
    # symlinks are kept, as resolving them would leave the venv.
    relative = os.path.relpath(os.path.abspath(path))
    if relative.startswith(".."):
        return shlex.quote(os.path.abspath(path))
    return shlex.quote(relative if os.sep in relative else f".{os.sep}{relative}")


def _assigned(command: str) -> set[str]:
    """The variables `command` already sets before its program (`INBOXD_DATA_DIR=d .venv/bin/inboxd`)."""
    names: set[str] = set()
    for word in shlex.split(command):
        name, equals, _ = word.partition("=")
        if not equals or not name.isidentifier():
            break
        names.add(name)
    return names


def environment(settings: Settings, *, command: str) -> list[str]:
    """`NAME=value` for each setting a command of `settings`' server reads that differs from the
    default and that `command` does not set itself. The database URL is never printed (it may hold
    a password): on PostgreSQL the reader's shell must have `INBOXD_DATABASE_URL` already."""
    defaults = Settings()
    given = _assigned(command)
    env: list[str] = []
    if settings.base_url != defaults.base_url and "INBOXD_BASE_URL" not in given:
        env.append(f"INBOXD_BASE_URL={shlex.quote(settings.base_url)}")
    data_dir = Path(settings.data_dir)
    if not settings.database_url and data_dir != defaults.data_dir and "INBOXD_DATA_DIR" not in given:
        # Absolute: the command then runs from any directory.
        env.append(f"INBOXD_DATA_DIR={shlex.quote(str(data_dir.resolve()))}")
    return env


def sign_in_command(settings: Settings, *, email: str, command: str | None = None) -> str:
    """The command that prints a one-time sign-in link to `settings`' server for `email`.
    `command`: how this inboxd is typed (`invocation()` by default)."""
    command = command or invocation()
    return " ".join(
        [*environment(settings, command=command), command, "users sign-in-link --email", shlex.quote(email)]
    )
