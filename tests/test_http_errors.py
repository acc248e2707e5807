"""The error answers outside the spec's table: malformed bodies, unknown paths, methods, size."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sqlite3
from collections.abc import Iterator

import psycopg
import pytest

from tests.conftest import PG_URL, Harness

# The tests of the storage-fault mapping run on both back ends, the others on SQLite.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
both_backends = pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)


@sqlite_only
async def test_unknown_path_and_method(harness: Harness) -> None:
    missing = await harness.http.get("/api/nope", headers=harness.auth())
    assert missing.status_code == 404 and missing.json() == {"error": "not_found", "message": "No such endpoint."}
    wrong = await harness.http.patch("/api/accounts", headers=harness.auth())
    assert wrong.status_code == 405 and wrong.json()["error"] == "method_not_allowed"
    assert "POST" in wrong.headers["allow"]
    # A trailing slash is an unknown path, not a redirect that would drop a POST's body.
    for method, path in [("GET", "/api/domains/"), ("GET", "/api/user/me/"), ("POST", "/api/accounts/")]:
        slashed = await harness.http.request(method, path, headers=harness.auth(), json={})
        assert slashed.status_code == 404 and slashed.json()["error"] == "not_found", path


@sqlite_only
@pytest.mark.parametrize(
    "content",
    [
        b"{",
        b"[]",
        b'{"address": 1}',
        b"\xff\xfe",
        b"",
        b"null",
        b'{"address": "a@b", "password": []}',
        # An unknown key's value is skipped recursively: this used to be a RecursionError, a 500.
        b'{"x":' * 3000 + b"1" + b"}" * 3000,
    ],
)
async def test_malformed_json(harness: Harness, content: bytes) -> None:
    response = await harness.http.post(
        "/api/accounts", content=content, headers={**harness.auth(), "Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_request"
    assert response.json()["message"]


@sqlite_only
async def test_body_over_one_mib(harness: Harness) -> None:
    big = b'{"address": "' + b"a" * (10 * 1024 * 1024) + b'"}'
    response = await harness.http.post("/api/accounts", content=big, headers=harness.auth())
    assert response.status_code == 413 and response.json()["error"] == "payload_too_large"

    async def chunks() -> object:
        for _ in range(20):
            yield b"x" * 100_000

    streamed = await harness.http.post("/api/accounts", content=chunks(), headers=harness.auth())  # type: ignore[arg-type]
    assert streamed.status_code == 413
    # The server is still fine.
    assert (await harness.http.get("/healthz")).status_code == 200


@sqlite_only
async def test_bad_page_and_mark_many_sizes(harness: Harness) -> None:
    box = await harness.new_mailbox()
    base = f"/api/accounts/{box['id']}/messages"
    # "²" passes str.isdigit() but not int(); "١" and "１" are digits of other scripts.
    for page in ["0", "-1", "abc", "1.5", "", "²", "١", "１", "1e3"]:
        response = await harness.http.get(base, params={"page": page}, headers=harness.auth())
        assert response.status_code == 400 and response.json()["error"] == "invalid_request", page
    too_many = await harness.http.put(f"{base}/read", json={"ids": ["x"] * 201}, headers=harness.auth())
    assert too_many.status_code == 400 and too_many.json()["error"] == "invalid_request"
    empty = await harness.http.put(f"{base}/read", json={"ids": []}, headers=harness.auth())
    assert empty.status_code == 400


@sqlite_only
async def test_healthz(harness: Harness) -> None:
    response = await harness.http.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


@contextlib.contextmanager
def table_gone(harness: Harness, table: str) -> Iterator[None]:
    """The store loses `table` while inboxd runs (put back afterwards, on PostgreSQL the schema is
    shared by the session's tests)."""
    settings = harness.server.settings
    if not settings.database_url:
        with sqlite3.connect(settings.data_dir / "inboxd.sqlite3") as conn:
            conn.execute(f"DROP TABLE {table}")
        yield
        return
    schema = settings.database_schema
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{schema}".{table} RENAME TO {table}_gone')
    try:
        yield
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{schema}".{table}_gone RENAME TO {table}')


@both_backends
async def test_storage_fault_is_500_and_451(harness: Harness) -> None:
    import smtplib

    box = await harness.new_mailbox()
    with table_gone(harness, "messages"):
        response = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())
        assert response.status_code == 500
        assert response.json() == {"error": "internal_error", "message": "An unexpected error occurred."}
        # RCPT reads the messages table too (the bytes of expired messages), so the 451 comes there.
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
            await harness.send(box["address"])
        assert [code for code, _ in refused.value.recipients.values()] == [451]
        assert (await harness.http.get("/healthz")).status_code == 200


def _keep_alive_exchange(port: int, paths: list[str], token: str) -> list[tuple[int, bytes]]:
    """GET each path in turn on one kept-alive connection; the status and body of each."""
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        reader = sock.makefile("rb")
        for path in paths:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: inboxd\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
            status = int(reader.readline().split()[1])
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            answers.append((status, reader.read(length)))
    return answers


@sqlite_only
async def test_unexpected_fault_is_500_and_keeps_the_connection(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"])
    [item] = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())).json()["messages"]
    path = f"/api/accounts/{box['id']}/messages/{item['id']}"
    # A kept parse that does not decode: a fault no handler expects. Written before the message
    # is first opened, as an answer once given is kept encoded in memory and served from there.
    with sqlite3.connect(harness.server.settings.data_dir / "inboxd.sqlite3") as conn:
        conn.execute("INSERT INTO message_details (message_id, detail) VALUES (?, '{')", (item["id"],))
    token = harness.auth()["Authorization"].removeprefix("Bearer ")
    answers = await asyncio.to_thread(_keep_alive_exchange, harness.server.http_port, [path, path, "/healthz"], token)
    expected = {"error": "internal_error", "message": "An unexpected error occurred."}
    assert [(status, json.loads(body)) for status, body in answers] == [
        (500, expected),
        (500, expected),
        (200, {"status": "ok"}),
    ]


# Every route that reads a JSON body, with a body whose string field holds a byte that is not
# UTF-8. `test_every_body_route_is_listed` keeps this list complete as routes are added.
_BAD_UTF8 = {
    ("POST", "/api/token"): b'{"address":"\xff@{domain}","password":"x"}',
    ("POST", "/api/accounts"): b'{"address":"\xff@{domain}","password":"secret123"}',
    ("PUT", "/api/accounts/{mailbox}/reset-password"): b'{"password":"\xff\xfe secret"}',
    ("PUT", "/api/accounts/{mailbox}/messages/read"): b'{"ids":["\xc3\x28"]}',
    ("PUT", "/api/accounts/{mailbox}/messages/{id}/tags"): b'{"tags":["\xff"]}',
    ("PUT", "/api/user/accounts/{id}/reset-password"): b'{"password":"abc\xed\xa0\x80def"}',
    ("POST", "/api/user/domains"): b'{"domain":"\xff.example.org"}',
    ("POST", "/api/user/tokens"): b'{"name":"\x80"}',
    ("POST", "/api/user/webhooks"): b'{"url":"https://\xff.example.org/","events":["message.received"]}',
    ("PUT", "/api/accounts/{mailbox}/faults"): b'{"rules":[{"stage":"rcpt","reply":"452 \xff"}]}',
    ("PUT", "/api/user/sandbox/faults"): b'{"rules":[{"stage":"rcpt","reply":"452 \xff"}]}',
    ("POST", "/api/accounts/{mailbox}/messages/{id}/release"): b'{"to":["\xff@example.org"]}',
    ("POST", "/api/user/sandbox/messages/{id}/release"): b'{"to":["\xff@example.org"]}',
}
# Routes with a body-taking method that read no body: what they are sent is ignored.
_NO_BODY = {
    ("PUT", "/api/accounts/{mailbox}/messages/{id}/read"),
    ("POST", "/api/user/domains/{id}/verify"),
    ("POST", "/api/user/webhooks/{id}/rotate"),
}


@sqlite_only
def test_every_body_route_is_listed(backend: str) -> None:
    from starlette.routing import Route

    from inboxd.api.app import api_routes

    routes = api_routes()
    taking = {
        (method, r.path)
        for r in routes
        if isinstance(r, Route)
        for method in r.methods or ()
        if method in {"POST", "PUT", "PATCH"}
    }
    assert taking == set(_BAD_UTF8) | _NO_BODY


@sqlite_only
@pytest.mark.parametrize(("method", "path"), sorted(_BAD_UTF8))
async def test_invalid_utf8_in_a_json_string_is_400(harness: Harness, method: str, path: str) -> None:
    token = await harness.new_user(plan="pro")
    box = await harness.new_mailbox(token)
    await harness.send(box["address"])
    concrete = path.replace("{mailbox}", box["address"]).replace("{id}", box["id"])
    body = _BAD_UTF8[(method, path)].replace(b"{domain}", harness.domain.encode())
    response = await harness.http.request(
        method, concrete, content=body, headers={**harness.auth(token), "Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert response.json() == {"error": "invalid_request", "message": "Malformed JSON: the body is not valid UTF-8."}
