"""The layering DESIGN.md draws: `cli → app → {smtp, api, web, auth, worker} → http → services →
{store, model, mail}`. Every import counts, a lazy one inside a function included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import inboxd

SRC = Path(inboxd.__file__).parent


def _imports(package: str) -> set[tuple[str, str]]:
    """(module file, imported module) for every `inboxd.*` import in `package`."""
    found: set[tuple[str, str]] = set()
    for path in (SRC / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found.update((str(path.relative_to(SRC)), name) for name in names if name.startswith("inboxd."))
    return found


def _into(imports: set[tuple[str, str]], *packages: str) -> list[tuple[str, str]]:
    prefixes = tuple(f"inboxd.{p}" for p in packages)
    return sorted(
        (where, name)
        for where, name in imports
        if name in prefixes or name.startswith(tuple(p + "." for p in prefixes))
    )


@pytest.mark.parametrize(("package", "forbidden"), [("api", "web"), ("web", "api")])
def test_the_two_faces_never_import_each_other(package: str, forbidden: str) -> None:
    assert _into(_imports(package), forbidden) == []


def test_the_pipeline_sits_below_both_faces() -> None:
    assert _into(_imports("http"), "api", "web", "auth", "smtp", "worker", "app", "asgi", "cli") == []


def test_services_sit_below_the_pipeline() -> None:
    assert _into(_imports("services"), "http", "api", "web", "auth", "smtp", "worker", "app", "asgi", "cli") == []


def test_the_address_guard_sits_below_services_and_worker() -> None:
    """Webhooks (worker) and the link check (services) share `netguard`; it imports neither."""
    tree = ast.parse((SRC / "netguard.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names} | {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    }
    assert sorted(name for name in imported if name.startswith("inboxd")) == []
