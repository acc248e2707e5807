"""deploy/nginx-fleet.conf, run by Debian's nginx in front of a running inboxd: the API over HTTPS,
the WebSocket upgraded through it, SMTP and submission through its TCP stream front, and the
client addresses it reports (X-Forwarded-For, PROXY protocol) to an inboxd that trusts it.

nginx is unpacked into tests/.nginx by `make test` (from Debian's packages nginx and
libnginx-mod-stream) rather than installed, because installing it starts a server on port 80.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import smtplib
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from websockets.asyncio.client import connect

from inboxd.app import Inboxd
from tests.conftest import Clock, free_port

ROOT = Path(__file__).parent.parent
NGINX_ROOT = Path(__file__).parent / ".nginx"
NGINX = NGINX_ROOT / "usr/sbin/nginx"
STREAM_MODULE = NGINX_ROOT / "usr/lib/nginx/modules/ngx_stream_module.so"

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@dataclass(frozen=True)
class Front:
    """nginx's ports in front of the test's inboxd."""

    https: int
    smtp: int
    submission: int


def rendered(server: Inboxd, front: Front, *, cert: Path, key: Path) -> str:
    """The example with this test's ports and certificate; each change must find its text."""
    text = (ROOT / "deploy/nginx-fleet.conf").read_text()
    swaps = [
        (r"server 127\.0\.0\.1:802[567];", f"server 127.0.0.1:{server.http_port};", 3),
        (r"server 127\.0\.0\.1:252[567];", f"server 127.0.0.1:{server.smtp_port};", 3),
        (r"server 127\.0\.0\.1:258[789];", f"server 127.0.0.1:{server.submission_port};", 3),
        (r"listen 443 ssl;", f"listen 127.0.0.1:{front.https} ssl;", 1),
        (r"listen 25;", f"listen 127.0.0.1:{front.smtp};", 1),
        (r"listen 587;", f"listen 127.0.0.1:{front.submission};", 1),
        (r"ssl_certificate +/etc/ssl/inboxd/fullchain\.pem;", f"ssl_certificate {cert};", 1),
        (r"ssl_certificate_key +/etc/ssl/inboxd/privkey\.pem;", f"ssl_certificate_key {key};", 1),
    ]
    for pattern, replacement, count in swaps:
        text, made = re.subn(pattern, replacement, text)
        assert made == count, f"deploy/nginx-fleet.conf changed: {pattern!r} matched {made} times"
    # Where this nginx keeps its pid, logs, temporary files and module: a prefix of the test's own
    # (Debian's build has /var/lib/nginx and /var/log/nginx compiled in).
    temp = "".join(
        f"    {kind}_temp_path temp/{kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    text, made = re.subn(r"^http \{\n", "http {\n" + temp + "    access_log logs/access.log;\n", text, flags=re.M)
    assert made == 1
    return f"load_module {STREAM_MODULE};\npid nginx.pid;\nerror_log logs/error.log info;\n" + text


@contextlib.contextmanager
def nginx(prefix: Path, config: str) -> Iterator[subprocess.Popen[bytes]]:
    assert NGINX.exists(), "nginx is unpacked by `make test` (tests/.nginx)"
    (prefix / "logs").mkdir(parents=True)
    (prefix / "temp").mkdir()
    (prefix / "nginx.conf").write_text(config)
    proc = subprocess.Popen(
        [str(NGINX), "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc
    finally:
        proc.terminate()  # only the nginx this test started, by its PID
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def until_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    async with asyncio.timeout(10):
        while True:
            assert proc.poll() is None, (proc.stdout.read() if proc.stdout else b"").decode()
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.05)


def send_through(port: int, to: str) -> Any:
    from tests.conftest import simple_message

    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        return client.send_message(simple_message(subject="Through nginx"), to_addrs=[to])


@dataclass
class Fronted:
    """An inboxd that trusts nginx (127.0.0.1), and nginx in front of it."""

    server: Inboxd
    front: Front
    ca: trustme.CA
    admin: dict[str, str]

    def client_ssl(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return context

    def https(self, source: str = "127.0.0.1") -> httpx.AsyncClient:
        """An HTTPS client of nginx whose connections come from `source` (any 127.x is this host)."""
        transport = httpx.AsyncHTTPTransport(local_address=source, verify=self.client_ssl())
        return httpx.AsyncClient(base_url=f"https://127.0.0.1:{self.front.https}", transport=transport, timeout=30)


@pytest.fixture
async def fronted(make_settings: Any, clock: Clock, tmp_path: Path) -> AsyncIterator[Fronted]:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = tmp_path / "fullchain.pem", tmp_path / "privkey.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    settings = make_settings(trusted_proxies=["127.0.0.1"], tls_cert=str(cert), tls_key=str(key))
    server = Inboxd(settings, clock=clock)
    await server.start()
    try:
        front = Front(https=free_port(), smtp=free_port(), submission=free_port())
        with nginx(tmp_path / "nginx", rendered(server, front, cert=cert, key=key)) as proc:
            for port in (front.https, front.smtp, front.submission):
                await until_listening(port, proc)
            assert server.bootstrap_token is not None
            yield Fronted(
                server=server, front=front, ca=ca, admin={"Authorization": f"Bearer {server.bootstrap_token}"}
            )
    finally:
        await server.stop()


@pytest.mark.timeout(60)
async def test_the_example_proxy_carries_the_api_the_websocket_and_smtp(fronted: Fronted) -> None:
    domain = fronted.server.settings.default_domain
    client_ssl = fronted.client_ssl()
    async with fronted.https() as http:
        created = await http.post(
            "/api/accounts", json={"address": f"proxied@{domain}", "password": "secret123"}, headers=fronted.admin
        )
        assert created.status_code == 201, created.text
        box = created.json()
        uri = f"wss://127.0.0.1:{fronted.front.https}/api/ws"
        async with connect(uri, ssl=client_ssl, proxy=None, open_timeout=10) as ws:
            await ws.send(json.dumps({"type": "auth", "token": box["token"]}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10)) == {"type": "auth_ok"}
            assert await asyncio.to_thread(send_through, fronted.front.smtp, box["address"]) == {}
            frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert frame["type"] == "new_email" and frame["subject"] == "Through nginx"
        listed = await http.get(
            f"/api/accounts/{box['id']}/messages", headers={"Authorization": f"Bearer {box['token']}"}
        )
        assert [m["subject"] for m in listed.json()["messages"]] == ["Through nginx"]


def auth_through(fronted: Fronted, source: str, username: str, secret: str) -> int:
    """One AUTH on nginx's submission front from `source`, under STARTTLS: its reply code."""
    with smtplib.SMTP("127.0.0.1", fronted.front.submission, timeout=30, source_address=(source, 0)) as client:
        client.starttls(context=fronted.client_ssl())
        client.ehlo()
        client.user, client.password = username, secret
        try:
            # One mechanism: `login` would try LOGIN after a refused PLAIN, two failures a call.
            client.auth("PLAIN", client.auth_plain)
        except smtplib.SMTPAuthenticationError as refused:
            return refused.smtp_code
        except smtplib.SMTPServerDisconnected:
            return 421
        return 235


@pytest.mark.timeout(120)
async def test_two_clients_behind_nginx_have_separate_failure_counts(fronted: Fronted) -> None:
    domain = fronted.server.settings.default_domain
    account = {"address": f"owner@{domain}", "password": "secret123"}
    wrong = {**account, "password": "wrongpass"}
    async with fronted.https() as admin, fronted.https("127.0.0.2") as stranger, fronted.https("127.0.0.3") as owner:
        assert (await admin.post("/api/accounts", json=account, headers=fronted.admin)).status_code == 201
        assert [(await stranger.post("/api/token", json=wrong)).status_code for _ in range(11)] == [401] * 10 + [429]
        # Behind nginx every request comes from 127.0.0.1: without X-Forwarded-For from a trusted
        # proxy the owner would share the stranger's spent budget.
        assert (await owner.post("/api/token", json=account)).status_code == 200
        assert (await owner.post("/api/token", json=wrong)).status_code == 401
        sandbox = (await admin.get("/api/user/sandbox", headers=fronted.admin)).json()["username"]
    token = fronted.admin["Authorization"].removeprefix("Bearer ")
    codes = [await asyncio.to_thread(auth_through, fronted, "127.0.0.2", sandbox, "ibx_wrong") for _ in range(11)]
    assert codes == [535] * 10 + [421]
    assert await asyncio.to_thread(auth_through, fronted, "127.0.0.3", sandbox, token) == 235
