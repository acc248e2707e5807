"""`Client` is generated from `AsyncClient` (inboxd.client.generate): the file in the tree must be current."""

from __future__ import annotations

import inspect

from inboxd.client import AsyncClient, Client
from inboxd.client.generate import TARGET, generate


def test_sync_client_is_generated_from_the_async_one() -> None:
    assert TARGET.read_text(encoding="utf-8") == generate(), (
        "src/inboxd/client/_sync/client.py is stale: run `python -m inboxd.client.generate`"
    )


def test_both_clients_have_the_same_methods() -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")
        }

    sync, asynchronous = public(Client), public(AsyncClient)
    asynchronous["close"] = asynchronous.pop("aclose")
    assert sync.keys() == asynchronous.keys()
    for name, signature in sync.items():
        assert str(signature).replace("AsyncClient", "Client") == str(asynchronous[name]).replace(
            "AsyncClient", "Client"
        ), name
        assert not inspect.iscoroutinefunction(getattr(Client, name)), name
        assert name == "close" or inspect.iscoroutinefunction(getattr(AsyncClient, name)), name
