"""deploy/nginx-fleet.conf, run by Debian's nginx in front of a running inboxd: the API over HTTPS,
the WebSocket upgraded through it, and SMTP through its TCP stream front.

nginx is unpacked into tests/.nginx by `make test` (from Debian's packages nginx and
libnginx-mod-stream) rather than installed, because installing it starts a server on port 80.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from websockets.asyncio.client import connect

from tests.conftest import Harness, free_port

ROOT = Path(__file__).parent.parent
NGINX_ROOT = Path(__file__).parent / ".nginx"
NGINX = NGINX_ROOT / "usr/sbin/nginx"
STREAM_MODULE = NGINX_ROOT / "usr/lib/nginx/modules/ngx_stream_module.so"

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def rendered(*, http_port: int, smtp_port: int, https: int, smtp_front: int, cert: Path, key: Path) -> str:
    """The example with this test's ports and certificate; each change must find its text."""
    text = (ROOT / "deploy/nginx-fleet.conf").read_text()
    swaps = [
        (r"server 127\.0\.0\.1:802[567];", f"server 127.0.0.1:{http_port};", 3),
        (r"server 127\.0\.0\.1:252[567];", f"server 127.0.0.1:{smtp_port};", 3),
        (r"listen 443 ssl;", f"listen 127.0.0.1:{https} ssl;", 1),
        (r"listen 25;", f"listen 127.0.0.1:{smtp_front};", 1),
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
    import smtplib

    from tests.conftest import simple_message

    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        return client.send_message(simple_message(subject="Through nginx"), to_addrs=[to])


@pytest.mark.timeout(60)
async def test_the_example_proxy_carries_the_api_the_websocket_and_smtp(harness: Harness, tmp_path: Path) -> None:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = tmp_path / "fullchain.pem", tmp_path / "privkey.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    https, smtp_front = free_port(), free_port()
    server = harness.server
    config = rendered(
        http_port=server.http_port, smtp_port=server.smtp_port, https=https, smtp_front=smtp_front, cert=cert, key=key
    )
    client_ssl = ssl.create_default_context()
    ca.configure_trust(client_ssl)
    with nginx(tmp_path / "nginx", config) as proc:
        await until_listening(https, proc)
        await until_listening(smtp_front, proc)
        async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{https}", verify=client_ssl, timeout=30) as http:
            created = await http.post(
                "/api/accounts",
                json={"address": f"proxied@{harness.domain}", "password": "secret123"},
                headers=harness.auth(),
            )
            assert created.status_code == 201, created.text
            box = created.json()
            async with connect(f"wss://127.0.0.1:{https}/api/ws", ssl=client_ssl, proxy=None, open_timeout=10) as ws:
                await ws.send(json.dumps({"type": "auth", "token": box["token"]}))
                assert json.loads(await asyncio.wait_for(ws.recv(), 10)) == {"type": "auth_ok"}
                assert await asyncio.to_thread(send_through, smtp_front, box["address"]) == {}
                frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
                assert frame["type"] == "new_email" and frame["subject"] == "Through nginx"
            listed = await http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth(box["token"]))
            assert [m["subject"] for m in listed.json()["messages"]] == ["Through nginx"]
