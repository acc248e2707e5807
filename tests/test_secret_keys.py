"""The secret key lives outside the database: a dump alone mints no mailbox token and opens no
webhook secret; the key file is private; keys come from the environment too; rotation keeps old
tokens and secrets working; secrets stored in the clear before are sealed at start."""

from __future__ import annotations

import functools
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import jwt
import pytest
import sqlalchemy as sa

from inboxd.app import Inboxd
from inboxd.errors import Unauthorized
from inboxd.keyring import KEY_FILE, SEALED_PREFIX, Keyring, SecretKeyError
from inboxd.store.schema import webhooks
from inboxd.store.sql import Statement
from tests.conftest import Clock, Harness

BACKENDS = pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)

TABLES = {
    "postgresql": Statement(
        lambda: sa.text("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
    ),
    "sqlite": Statement(lambda: sa.text("SELECT name FROM sqlite_master WHERE type = 'table'")),
}
SECRET = Statement(lambda: sa.select(webhooks.c.secret).where(webhooks.c.id == sa.bindparam("id")))
SET_SECRET = Statement(
    lambda: sa.update(webhooks).values(secret=sa.bindparam("secret")).where(webhooks.c.id == sa.bindparam("id"))
)

Start = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def start(make_settings: Any, clock: Clock) -> AsyncIterator[Start]:
    """Start an inboxd on the test's storage (callable again, with other settings, to restart)."""
    running: list[tuple[Inboxd, httpx.AsyncClient]] = []
    admin: list[str] = []

    async def run(**overrides: Any) -> Harness:
        for server, http in running:
            await http.aclose()
            if server._db is not None:
                await server.stop()
        running.clear()
        server = Inboxd(make_settings(**overrides), clock=clock)
        await server.start()
        if server.bootstrap_token:
            admin.append(server.bootstrap_token)
        http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30)
        running.append((server, http))
        return Harness(server=server, http=http, clock=clock, admin_token=admin[0] if admin else "")

    try:
        yield run
    finally:
        for server, http in running:
            await http.aclose()
            if server._db is not None:
                await server.stop()


async def _webhook(h: Harness, token: str) -> dict[str, Any]:
    response = await h.http.post(
        "/api/user/webhooks",
        json={"url": "https://hooks.example.com/in", "events": ["email.received"]},
        headers=h.auth(token),
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def _me(h: Harness, token: str) -> int:
    """What GET /api/accounts/{mailbox} answers the mailbox token."""
    address = jwt.decode(token, options={"verify_signature": False})["sub"]
    return (await h.http.get(f"/api/accounts/{address}", headers=h.auth(token))).status_code


def _every_row(table: str) -> sa.Select[Any]:
    return sa.select(sa.literal_column("*")).select_from(sa.table(table))


async def _dump(h: Harness) -> list[Any]:
    """Every value of every table, as a dump would hold them."""
    db = h.server._db
    assert db is not None
    tables = [str(r[0]) for r in await db.read(lambda tx: tx.fetch(TABLES[db.dialect]))]
    values: list[Any] = []
    for table in tables:
        # Every column, those the schema module does not know of too.
        every_row = Statement(functools.partial(_every_row, table))
        rows = await db.read(lambda tx, s=every_row: tx.fetch(s))  # type: ignore[misc]
        values.extend(v for row in rows for v in tuple(row))
    return values


async def _stored_secret(h: Harness, webhook_id: str) -> str:
    db = h.server._db
    assert db is not None
    return str(await db.read(lambda tx: tx.fetchval(SECRET, id=webhook_id)))


@BACKENDS
@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")  # forged with short values
async def test_a_database_dump_alone_mints_and_opens_nothing(start: Start) -> None:
    h = await start()
    user = await h.new_user("pro")
    box = await h.new_mailbox(user)
    hook = await _webhook(h, user)
    key = (h.server.settings.data_dir / KEY_FILE).read_text().strip()
    dump = await _dump(h)
    texts = [bytes(v).decode("latin-1") if isinstance(v, bytes | memoryview) else str(v) for v in dump if v is not None]
    for text in texts:
        assert hook["secret"] not in text, "a webhook secret is stored in the clear"
        assert key not in text, "the secret key is stored in the database"
    assert (await _stored_secret(h, hook["id"])).startswith(SEALED_PREFIX)
    # No value of the dump signs a token the server accepts for this mailbox.
    claims = jwt.decode(box["token"], options={"verify_signature": False})
    tokens = h.server.services.mailbox_tokens
    candidates = {t for t in texts if 8 <= len(t) <= 512}
    assert candidates
    for candidate in candidates:
        forged = jwt.encode(claims, candidate, algorithm="HS256")
        with pytest.raises(Unauthorized):
            tokens.check(forged, now=h.clock())
    assert await _me(h, box["token"]) == 200  # the real one works


@BACKENDS
async def test_the_key_file_is_private_and_kept(start: Start) -> None:
    h = await start()
    path = h.server.settings.data_dir / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    box = await h.new_mailbox()
    again = await start()
    assert await _me(again, box["token"]) == 200  # the same key after a restart
    path.chmod(0o644)
    with pytest.raises(SecretKeyError, match="chmod 600"):
        await start()


@BACKENDS
async def test_a_key_from_the_environment_and_rotation(start: Start) -> None:
    h = await start(secret_key="first-key-0123456789")
    assert not (h.server.settings.data_dir / KEY_FILE).exists()
    user = await h.new_user("pro")
    box = await h.new_mailbox(user)
    hook = await _webhook(h, user)
    first_sealed = await _stored_secret(h, hook["id"])

    # A server with another key accepts none of it.
    other = await start(secret_key="another-key-0123456789")
    assert await _me(other, box["token"]) == 401
    with pytest.raises(SecretKeyError):
        other.server.keyring.open(first_sealed)

    # Rotation: new key, old key kept for verification; the secret is sealed again at start.
    rotated = await start(secret_key="second-key-0123456789", secret_key_old="first-key-0123456789")
    assert await _me(rotated, box["token"]) == 200
    resealed = await _stored_secret(rotated, hook["id"])
    assert resealed != first_sealed
    fresh = await rotated.new_mailbox(user)

    # The old key dropped: its tokens stop, the new ones and the resealed secret keep working.
    done = await start(secret_key="second-key-0123456789")
    assert await _me(done, box["token"]) == 401
    assert await _me(done, fresh["token"]) == 200
    assert done.server.keyring.open(await _stored_secret(done, hook["id"])) == hook["secret"]


@BACKENDS
async def test_secrets_stored_in_the_clear_are_sealed_at_start(start: Start) -> None:
    h = await start()
    hook = await _webhook(h, await h.new_user("pro"))
    db = h.server._db
    assert db is not None
    await db.write(lambda tx: tx.execute(SET_SECRET, secret=hook["secret"], id=hook["id"]))
    again = await start()
    stored = await _stored_secret(again, hook["id"])
    assert stored.startswith(SEALED_PREFIX) and hook["secret"] not in stored
    assert again.server.keyring.open(stored) == hook["secret"]


def test_subkeys_differ_by_purpose_and_key() -> None:
    ring = Keyring(["k1"], source="test")
    assert len(ring.token_keys) == 1 and ring.token_keys[0] not in (b"k1", Keyring(["k2"], source="t").token_keys[0])
    assert ring.open(ring.seal("whsec_x")) == "whsec_x"
    assert ring.open("plain") == "plain"  # a value from before sealing
