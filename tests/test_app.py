"""Start-up: bootstrap user and token, the token file, restarts that keep data."""

from __future__ import annotations

import stat
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)


async def test_bootstrap_once(make_settings: Any, clock: Any) -> None:
    settings = make_settings()
    async with Inboxd(settings, clock=clock) as first:
        token = first.bootstrap_token
        assert token is not None and token.startswith("ibx_") and len(token) == 4 + 43
        path = settings.data_dir / "bootstrap-token"
        assert path.read_text().strip() == token
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{first.http_port}") as http:
            created = await http.post(
                "/api/accounts",
                json={"address": "keep@inboxd.localhost", "password": "secret123"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert created.status_code == 201
    async with Inboxd(settings, clock=clock) as second:
        assert second.bootstrap_token is None
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{second.http_port}") as http:
            again = await http.get("/api/accounts/keep@inboxd.localhost", headers={"Authorization": f"Bearer {token}"})
            assert again.status_code == 200
            mailbox_token = created.json()["token"]
            own = await http.get(
                "/api/accounts/keep@inboxd.localhost", headers={"Authorization": f"Bearer {mailbox_token}"}
            )
            assert own.status_code == 200  # the signing key survived the restart


async def test_failed_start_releases_what_it_started(make_settings: Any, clock: Any) -> None:
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        settings = make_settings(smtp_port=taken.getsockname()[1])
        server = Inboxd(settings, clock=clock)
        with pytest.raises(OSError):
            await server.start()
        # Storage was closed again: a new inboxd on the same storage starts and works.
        again = Inboxd(make_settings(), clock=clock)
        await again.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{again.http_port}") as http:
                assert (await http.get("/healthz")).status_code == 200
        finally:
            await again.stop()
    finally:
        taken.close()
