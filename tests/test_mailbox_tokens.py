"""Mailbox tokens on REST: every path of their own mailbox's info and messages works; every
other path is 403 access_denied; another mailbox is 404 not_found."""

from __future__ import annotations

import time

import pytest

from inboxd.errors import Unauthorized
from inboxd.services.credentials import MailboxClaims, MailboxTokens
from tests.conftest import Harness


async def test_own_mailbox_paths(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"])
    auth = harness.auth(box["token"])
    base = f"/api/accounts/{box['id']}"
    info = await harness.http.get(base, headers=auth)
    assert info.status_code == 200 and info.json()["id"] == box["id"]
    assert (await harness.http.get(f"/api/accounts/{box['address']}", headers=auth)).status_code == 200
    listing = await harness.http.get(f"{base}/messages", headers=auth)
    assert listing.status_code == 200
    message_id = listing.json()["messages"][0]["id"]
    assert (await harness.http.get(f"{base}/messages/{message_id}", headers=auth)).status_code == 200
    assert (await harness.http.get(f"{base}/messages/{message_id}/source", headers=auth)).status_code == 200
    attachment = await harness.http.get(f"{base}/messages/{message_id}/attachments/0", headers=auth)
    assert attachment.status_code == 400 and attachment.json()["error"] == "invalid_index"
    assert (await harness.http.put(f"{base}/messages/{message_id}/read", headers=auth)).status_code == 204
    many = await harness.http.put(f"{base}/messages/read", json={"all": True}, headers=auth)
    assert many.status_code == 200
    assert (await harness.http.delete(f"{base}/messages/{message_id}", headers=auth)).status_code == 204


async def test_other_paths_are_denied(harness: Harness) -> None:
    box = await harness.new_mailbox()
    auth = harness.auth(box["token"])
    for method, path, body in [
        ("DELETE", f"/api/accounts/{box['id']}", None),
        ("PUT", f"/api/accounts/{box['id']}/reset-password", {"password": "another1"}),
        ("POST", "/api/accounts", {"address": f"new@{harness.domain}", "password": "secret123"}),
    ]:
        response = await harness.http.request(method, path, json=body, headers=auth)
        assert response.status_code == 403, (method, path)
        assert response.json()["error"] == "access_denied"


async def test_other_mailboxes_are_not_found(harness: Harness) -> None:
    box = await harness.new_mailbox()
    other = await harness.new_mailbox()
    await harness.send(other["address"])
    owner = harness.auth()
    listing = await harness.http.get(f"/api/accounts/{other['id']}/messages", headers=owner)
    message_id = listing.json()["messages"][0]["id"]
    auth = harness.auth(box["token"])
    for path in [
        f"/api/accounts/{other['id']}",
        f"/api/accounts/{other['address']}",
        f"/api/accounts/{other['id']}/messages",
        f"/api/accounts/{other['id']}/messages/{message_id}",
        f"/api/accounts/{other['id']}/messages/{message_id}/source",
    ]:
        response = await harness.http.get(path, headers=auth)
        assert response.status_code == 404, path
        assert response.json()["error"] == "not_found"
    marked = await harness.http.put(f"/api/accounts/{other['id']}/messages/{message_id}/read", headers=auth)
    assert marked.status_code == 404


def test_tokens_are_timed_on_the_service_clock_only() -> None:
    # A token issued by a process whose clock runs ahead of this one's wall clock (or on an
    # injected clock) is valid until its `exp` on the checking service's clock.
    tokens = MailboxTokens([b"k" * 32], ttl=86400)
    ahead = time.time() + 120
    token = tokens.issue("m1", 3, now=ahead)
    assert tokens.check(token, now=ahead - 60) == MailboxClaims(mailbox_id="m1", password_gen=3)
    with pytest.raises(Unauthorized):
        tokens.check(token, now=ahead + 86400)


def _forge(header: dict[str, object], claims: dict[str, object], key: bytes, *, alg: str = "sha256") -> str:
    import base64
    import hashlib
    import hmac
    import json

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = hmac.new(key, signing_input.encode(), getattr(hashlib, alg)).digest()
    return f"{signing_input}.{b64(signature)}"


@pytest.mark.parametrize(
    "token",
    [
        "",
        "a.b",
        "a.b.c.d",
        # Algorithm confusion: `none`, another HMAC, a critical extension nobody understands.
        _forge({"alg": "none"}, {"sub": "m1", "gen": 0, "exp": 2e9}, b"k" * 32),
        _forge({"alg": "HS512", "typ": "JWT"}, {"sub": "m1", "gen": 0, "exp": 2e9}, b"k" * 32, alg="sha512"),
        _forge({"alg": "HS256", "crit": ["x"]}, {"sub": "m1", "gen": 0, "exp": 2e9}, b"k" * 32),
        # Signed with another key; claims of the wrong shape under the right key.
        _forge({"alg": "HS256"}, {"sub": "m1", "gen": 0, "exp": 2e9}, b"x" * 32),
        _forge({"alg": "HS256"}, {"gen": 0, "exp": 2e9}, b"k" * 32),
        _forge({"alg": "HS256"}, {"sub": "m1", "gen": 0}, b"k" * 32),
        _forge({"alg": "HS256"}, {"sub": "m1", "gen": 0, "exp": "2000000000"}, b"k" * 32),
        _forge({"alg": "HS256"}, {"sub": "m1", "gen": 0, "exp": 10**400}, b"k" * 32),
        _forge({"alg": "HS256"}, {"sub": "m1", "gen": True, "exp": 2e9}, b"k" * 32),
        _forge({"alg": "HS256"}, {"sub": 5, "gen": 0, "exp": 2e9}, b"k" * 32),
    ],
)
def test_malformed_or_forged_tokens_are_invalid(token: str) -> None:
    tokens = MailboxTokens([b"k" * 32], ttl=86400)
    with pytest.raises(Unauthorized) as refused:
        tokens.check(token, now=1e9)
    assert refused.value.code == "invalid_token"


def test_tokens_are_standard_jwts_and_tampering_shows() -> None:
    import jwt

    tokens = MailboxTokens([b"k" * 32, b"old" * 11], ttl=86400)
    token = tokens.issue("m1", 2, now=1e9)
    # Any JWT library verifies it with the key (PyJWT here), and our check takes PyJWT's tokens.
    assert jwt.decode(token, b"k" * 32, algorithms=["HS256"], options={"verify_exp": False})["sub"] == "m1"
    theirs = jwt.encode({"sub": "m2", "gen": 1, "exp": int(1e9) + 60}, b"old" * 11, algorithm="HS256")
    assert tokens.check(theirs, now=1e9) == MailboxClaims(mailbox_id="m2", password_gen=1)
    head, body, signature = token.split(".")
    tampered = f"{head}.{body[:-2]}{'A' if body[-2] != 'A' else 'B'}{body[-1]}.{signature}"
    for bad in (
        tampered,
        f"{head}.{body}.{signature[:-1]}",
        f"{head}.{body}.{signature}=",
        f"{head}.{body}.+{signature[1:]}",
    ):
        with pytest.raises(Unauthorized):
            tokens.check(bad, now=1e9)
