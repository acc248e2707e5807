"""The layering docs/architecture.md draws: `cli → app → asgi → {smtp, api, web, auth, worker} → http
→ services → {store, model, mail}`, the REST API and the dashboard independent of each other, no
import cycles. The contracts live in pyproject.toml (`[tool.importlinter]`) and `make lint` runs
them with `lint-imports`; every import counts, a lazy one inside a function included."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import inboxd

SRC = Path(inboxd.__file__).parent
ROOT = SRC.parent.parent


def test_the_import_contracts_hold() -> None:
    # In a process of its own: import-linter sets logging up with `dictConfig`, which disables
    # every logger that exists (inboxd's among them) for the rest of the process, and so broke
    # whichever log test ran after it on the same pytest worker.
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True))"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(SRC.parent), os.environ.get("PYTHONPATH", "")) if p),
    }
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_address_guard_sits_below_services_and_worker() -> None:
    """Webhooks (worker) and the link check (services) share `netguard`; it imports neither."""
    tree = ast.parse((SRC / "netguard.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names} | {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    }
    assert sorted(name for name in imported if name.startswith("inboxd")) == []
