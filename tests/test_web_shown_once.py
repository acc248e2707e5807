"""A generated mailbox password on its way through the POST-redirect-GET of the dashboard: the
session keeps it sealed with a key only the browser's cookie gives, so the sessions table (and so
a database dump) never reveals it; the page shows it once, and not after it expired."""

from __future__ import annotations

import base64
import re
from typing import Any

import sqlalchemy as sa

from inboxd.services.sessions import SECRET_TTL
from inboxd.store.sql import Statement
from tests.conftest import Harness
from tests.test_web_sessions import csrf_of, origin, signed_in


async def _sessions_table(h: Harness) -> list[str]:
    """Every value of every row of the sessions table, read with plain SQL, as a dump holds them."""
    db = h.server._db
    assert db is not None
    every_column = Statement(lambda: sa.text("SELECT * FROM sessions"))
    rows: list[Any] = await db.read(lambda tx: tx.fetch(every_column))
    return [str(v) for row in rows for v in tuple(row)]


def _encodings(secret: str) -> list[str]:
    raw = secret.encode()
    encoded = [base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()]
    return [secret, *encoded, *(e.rstrip("=") for e in encoded), raw.hex()]


async def test_a_generated_password_is_sealed_in_the_session_and_shown_once(harness: Harness) -> None:
    h = harness
    await h.new_user(email="sealy@example.test")
    async with signed_in(h, "sealy@example.test") as client:
        form = await client.get("/mailboxes")
        fields = {"local": "sealy", "domain": h.domain, "csrf_token": csrf_of(form.text)}
        made = await client.post("/mailboxes", data=fields, headers=origin(h))
        assert made.status_code == 303, made.text
        location = made.headers["location"]
        assert location.endswith("?notice=created")
        # What the database holds between the POST and the GET that shows the password.
        stored = await _sessions_table(h)

        shown = await client.get(location)
        found = re.search(r'id="new-password"[^>]*value="([^"]+)"', shown.text)
        assert found and len(found.group(1)) >= 12
        password = found.group(1)
        opened = await h.http.post("/api/token", json={"address": f"sealy@{h.domain}", "password": password})
        assert opened.status_code == 200, opened.text
        for form_of_it in _encodings(password):
            assert not any(form_of_it in value for value in stored), "the sessions table reveals the password"
        assert any("sealed" in value for value in stored)  # it was kept, as a sealed value

        again = await client.get(location)
        assert "new-password" not in again.text and password not in again.text
        # Taken means removed: nothing sealed is left behind in the session.
        assert not any("sealed" in value for value in await _sessions_table(h))


async def test_a_kept_password_expires_unshown(harness: Harness) -> None:
    h = harness
    await h.new_user(email="late@example.test")
    async with signed_in(h, "late@example.test") as client:
        form = await client.get("/mailboxes")
        fields = {"local": "late", "domain": h.domain, "csrf_token": csrf_of(form.text)}
        made = await client.post("/mailboxes", data=fields, headers=origin(h))
        assert made.status_code == 303, made.text
        h.clock.advance(SECRET_TTL + 1)
        late = await client.get(made.headers["location"])
        assert late.status_code == 200 and f"late@{h.domain}</h1>" in late.text
        assert "new-password" not in late.text
        assert not any("sealed" in value for value in await _sessions_table(h))


async def test_only_the_sessions_own_cookie_opens_a_kept_secret(harness: Harness) -> None:
    sessions = harness.server.services.sessions
    user = await harness.server.services.users.create_user("keys@example.test", plan="pro")
    opened = await sessions.open(user)
    await sessions.keep_secret(opened.session, opened.value, "kept", "s3cret-value")

    # The table's id is the cookie's hash, a value a dump holds: it does not open the secret.
    held = await sessions.resolve(opened.value)
    assert held is not None
    assert await sessions.take_secret(held, held.id, "kept") is None
    held = await sessions.resolve(opened.value)
    assert held is not None and await sessions.take_secret(held, opened.value, "kept") is None  # removed on taking

    await sessions.keep_secret(held, opened.value, "kept", "s3cret-value")
    held = await sessions.resolve(opened.value)
    assert held is not None
    assert await sessions.take_secret(held, opened.value, "kept") == "s3cret-value"
