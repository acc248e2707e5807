"""What reaches the log of a real `inboxd serve`: no secret of any kind, and no line that a
request can forge (control characters are escaped in every field)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import smtplib
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.serverproc import ServerProcess

PASSWORD = "mailbox-password-7f3c91"
WRONG_SMTP_PASSWORD = "wrong-smtp-password-5d2e8a"
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "inboxd", *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def _raw_http(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


async def _use_every_secret(server: ServerProcess, env: dict[str, str], secrets: dict[str, str]) -> None:
    """Sign in with a link, use the session and its CSRF token, API and mailbox tokens (also where
    a careless client puts them: a path, a query string), a webhook secret and SMTP AUTH."""
    api_token = server.bootstrap_token
    assert api_token is not None
    secrets["api token"] = api_token
    bearer = {"Authorization": f"Bearer {api_token}"}
    link = await asyncio.to_thread(_cli, env, "users", "sign-in-link", "--email", "admin@localhost")
    path = "/auth/link/" + link.rsplit("/auth/link/", 1)[1]
    secrets["sign-in link"] = path.rsplit("/", 1)[1]
    base = f"http://127.0.0.1:{server.http_port}"
    origin = {"Origin": "http://localhost:8025"}
    async with httpx.AsyncClient(base_url=base, timeout=30) as web:
        assert (await web.get(path)).status_code == 200
        assert (await web.post(path, headers=origin)).status_code == 303
        assert (await web.post(path, headers=origin)).status_code == 410  # used: logged as refused
        secrets["session cookie"] = web.cookies["inboxd_session"]
        account = await web.get("/account")
        csrf = secrets["csrf token"] = _csrf(account.text)
        made = await web.post("/account/tokens", data={"name": "made", "csrf_token": csrf}, headers=origin)
        assert made.status_code == 200
        secrets["dashboard api token"] = re.search(r"ibx_[\w-]+", made.text).group()  # type: ignore[union-attr]
        await web.get(f"/account?csrf_token={csrf}&notice=x")
        await web.post("/account/tokens", data={"name": "x", "csrf_token": csrf + "x"}, headers=origin)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        created = await http.post(
            "/api/accounts", json={"address": "logs@inboxd.localhost", "password": PASSWORD}, headers=bearer
        )
        assert created.status_code == 201, created.text
        box = created.json()
        mailbox_token = secrets["mailbox token"] = box["token"]
        login = await http.post("/api/token", json={"address": box["address"], "password": PASSWORD})
        assert login.status_code == 200
        listed = await http.get(
            f"/api/accounts/{box['address']}/messages", headers={"Authorization": f"Bearer {mailbox_token}"}
        )
        assert listed.status_code == 200
        await http.get(f"/api/accounts/{mailbox_token}/messages?token={mailbox_token}")
        await http.get(f"/api/user/accounts/{api_token}", headers=bearer)
        await http.get(f"/api/user/me?access_token={api_token}")
        hook = await http.post(
            "/api/user/webhooks",
            json={"url": "http://127.0.0.1:9/hook?key=v", "events": ["email.received"]},
            headers=bearer,
        )
        assert hook.status_code == 201, hook.text
        secrets["webhook secret"] = hook.json()["secret"]
        rotated = await http.post(f"/api/user/webhooks/{hook.json()['id']}/rotate", headers=bearer)
        assert rotated.status_code == 200, rotated.text
        secrets["rotated webhook secret"] = rotated.json()["secret"]
        sandbox = await http.get("/api/user/sandbox", headers=bearer)
        assert sandbox.status_code == 200, sandbox.text
        username = sandbox.json()["username"]
    ws_url = f"ws://127.0.0.1:{server.http_port}/api/ws"
    async with connect(f"{ws_url}?token={mailbox_token}", proxy=None, open_timeout=10) as ws:
        await ws.send(json.dumps({"type": "auth", "token": mailbox_token}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 10)) == {"type": "auth_ok"}

    def smtp_auth() -> None:
        with smtplib.SMTP("127.0.0.1", server.submission_port, timeout=30) as client:
            client.login(username, api_token)
        with (
            smtplib.SMTP("127.0.0.1", server.submission_port, timeout=30) as client,
            pytest.raises(smtplib.SMTPAuthenticationError),
        ):
            client.login(username, WRONG_SMTP_PASSWORD)

    await asyncio.to_thread(smtp_auth)
    secrets["smtp password"] = WRONG_SMTP_PASSWORD
    secrets["mailbox password"] = PASSWORD


@pytest.mark.parametrize("fmt", ["text", "json"])
async def test_no_secret_in_any_log(tmp_path: Path, fmt: str) -> None:
    env = {
        "INBOXD_DATA_DIR": str(tmp_path / "data"),
        "INBOXD_LOG_LEVEL": "debug",
        "INBOXD_LOG_FORMAT": fmt,
        "INBOXD_WEBHOOK_ALLOW_HTTP": "true",
        "INBOXD_METRICS_TOKEN": "metrics-secret-value-0b1c",
        "INBOXD_PRO_RPS": "1000",
        "INBOXD_FREE_RPS": "1000",
        "INBOXD_PRO_CREATE_INTERVAL": "0",
        "INBOXD_FREE_CREATE_INTERVAL": "0",
    }
    server = await ServerProcess.start(tmp_path / "data", **env)
    secrets: dict[str, str] = {"metrics token": env["INBOXD_METRICS_TOKEN"]}
    try:
        await _use_every_secret(server, env, secrets)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
            await http.get("/metrics", headers={"Authorization": f"Bearer {secrets['metrics token']}"})
    finally:
        await server.stop()
    log = "".join(server.output)
    leaked = {name for name, value in secrets.items() if value in log}
    assert not leaked, f"in the log: {sorted(leaked)}"
    assert "/auth/link/[redacted]" in log  # the link's requests were logged, without the secret


async def test_a_request_cannot_forge_a_log_line(tmp_path: Path) -> None:
    """CR/LF (percent-encoded in the path, where the server decodes it) and other control
    characters come out escaped: the forged text stays inside its own request's line."""
    server = await ServerProcess.start(tmp_path / "data", INBOXD_LOG_LEVEL="info")
    forged = "2026-01-01 00:00:00,000 INFO inboxd.http: GET /forged 200"
    try:
        encoded = "/x%0D%0A" + forged.replace(" ", "%20") + "%1B[2J%E2%80%A8%0Dtail"
        answer = await asyncio.to_thread(
            _raw_http, server.http_port, f"GET {encoded} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        assert answer.startswith(b"HTTP/1.1 404")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}") as http:
            await http.get("/healthz")  # a line after it: the log is flushed through
    finally:
        await server.stop()
    lines = "".join(server.output).splitlines()
    assert not [line for line in lines if line.startswith(forged) or line.startswith("tail")], lines
    ours = [line for line in lines if "inboxd.http: GET /x" in line]
    assert len(ours) == 1, lines
    assert "/x\\x0d\\x0a2026-01-01" in ours[0] and "\\x1b[2J\\u2028\\x0dtail 404" in ours[0]
    assert not [line for line in lines if "\x1b" in line or "\r" in line]
    # Every line is a record's own: it starts with a time, or is an indented traceback line.
    strays = [line for line in lines if not LOG_LINE.match(line) and not line.startswith(" ")]
    assert all(line.startswith("inboxd: ") or line.startswith("http") or "ibx_" in line for line in strays), strays
