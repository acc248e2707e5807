"""The layering docs/architecture.md draws: `cli → app → asgi → {smtp, api, web, auth, worker} → http
→ services → {store, model, mail}`, the REST API and the dashboard independent of each other, no
import cycles. The contracts live in pyproject.toml (`[tool.importlinter]`) and `make lint` runs
them with `lint-imports`; every import counts, a lazy one inside a function included."""

from __future__ import annotations

import ast
from pathlib import Path

from importlinter.cli import lint_imports

import inboxd

SRC = Path(inboxd.__file__).parent
ROOT = SRC.parent.parent


def test_the_import_contracts_hold() -> None:
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def test_the_address_guard_sits_below_services_and_worker() -> None:
    """Webhooks (worker) and the link check (services) share `netguard`; it imports neither."""
    tree = ast.parse((SRC / "netguard.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names} | {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    }
    assert sorted(name for name in imported if name.startswith("inboxd")) == []
