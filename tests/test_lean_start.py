"""A default server loads only what its configuration uses: no migration tooling, no PostgreSQL or
Redis client, no webhook HTTP client, no identity-provider stack, no DNS resolver, until needed.

Each module stays resident once imported, so this is what keeps an idle process small (the
resident-memory figure itself is measured by `make bench`, not here). The server runs in a fresh
Python process, because this test process has imported everything already.
"""

from __future__ import annotations

import json
import smtplib
import subprocess
import sys
import textwrap
from pathlib import Path

# What a default server (SQLite, no Redis, no providers) must not import, and why it would.
HEAVY = (
    "alembic",
    "sqlalchemy",
    "asyncpg",
    "psycopg",
    "redis",
    "aiohttp",
    "aiosmtplib",
    "authlib",
    "httpx2",
    "dns",
    "mcp",
    "cryptography",
    "jwt",
    "pydantic",
)

_SERVER = textwrap.dedent(
    """
    import asyncio, json, sys
    from inboxd.app import Inboxd
    from inboxd.config import Settings

    async def main() -> None:
        settings = Settings(data_dir=sys.argv[1], http_port=0, smtp_port=0, submission_port=0)
        async with Inboxd(settings) as server:
            print(json.dumps({"http": server.http_port, "smtp": server.smtp_port}), flush=True)
            await asyncio.to_thread(sys.stdin.readline)  # until the test has used the server
            loaded = sorted({name.split(".")[0] for name in sys.modules})
            print(json.dumps(loaded), flush=True)

    asyncio.run(main())
    """
)


def _run_server(data_dir: Path, use: object) -> list[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        ports = json.loads(proc.stdout.readline())
        use(ports)  # type: ignore[operator]
        proc.stdin.write("done\n")
        proc.stdin.flush()
        loaded: list[str] = json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    return loaded


def test_default_server_loads_no_unused_stack(tmp_path: Path) -> None:
    import httpx

    def use(ports: dict[str, int]) -> None:
        base = f"http://127.0.0.1:{ports['http']}"
        token = (tmp_path / "bootstrap-token").read_text().strip()
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=auth) as http:
            assert http.get("/healthz").status_code == 200
            created = http.post("/api/accounts", json={"address": "lean@inboxd.localhost", "password": "secret123"})
            assert created.status_code == 201, created.text
            with smtplib.SMTP("127.0.0.1", ports["smtp"]) as smtp:
                smtp.sendmail("a@example.com", ["lean@inboxd.localhost"], b"Subject: hi\r\n\r\nbody\r\n")
            listed = http.get("/api/accounts/lean@inboxd.localhost/messages")
            assert listed.status_code == 200 and len(listed.json()["messages"]) == 1, listed.text
            assert http.get("/").status_code in (200, 302, 303)

    first = _run_server(tmp_path, use)  # first start: the migrations ran, in a child process
    assert not set(first) & set(HEAVY), sorted(set(first) & set(HEAVY))
    again = _run_server(tmp_path, lambda ports: None)  # a restart finds the schema current
    assert not set(again) & set(HEAVY), sorted(set(again) & set(HEAVY))
