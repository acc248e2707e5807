"""The hot read routes: answered ahead of Starlette's router, list items and details encoded once
and kept (issue 25), and never stale after a mark or a deletion."""

from __future__ import annotations

import sqlite3

import msgspec
import pytest
from starlette.routing import Match

from inboxd.api import schemas
from inboxd.api.app import api_routes
from inboxd.api.hot_routes import _match
from inboxd.web import app as web
from tests.conftest import Harness, simple_message

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@sqlite_only
async def test_an_answer_is_encoded_once_and_kept(harness: Harness) -> None:
    """What a message's list item and detail say never changes once it is stored, but for its read
    mark: the second answer is the kept one, even when the row under it was changed behind
    inboxd's back (which nothing in inboxd does)."""
    box = await harness.new_mailbox()
    await harness.send(box["address"], simple_message(subject="Kept"))
    base = f"/api/accounts/{box['id']}/messages"
    listed = await harness.http.get(base, headers=harness.auth())
    [item] = listed.json()["messages"]
    # The page is the bytes msgspec gives the page's struct: a join of kept items changes nothing.
    assert listed.content == msgspec.json.encode(msgspec.json.decode(listed.content, type=schemas.MessagePage))
    opened = await harness.http.get(f"{base}/{item['id']}", headers=harness.auth())
    assert opened.status_code == 200
    with sqlite3.connect(harness.server.settings.data_dir / "inboxd.sqlite3") as conn:
        conn.execute("UPDATE messages SET subject = 'Changed' WHERE id = ?", (item["id"],))
        conn.execute("UPDATE message_details SET detail = '{' WHERE message_id = ?", (item["id"],))
    again = await harness.http.get(base, headers=harness.auth())
    assert again.content == listed.content
    reopened = await harness.http.get(f"{base}/{item['id']}", headers=harness.auth())
    assert reopened.status_code == 200 and reopened.content == opened.content


async def test_kept_answers_follow_marks_and_deletion(harness: Harness) -> None:
    box = await harness.new_mailbox()
    for i in range(2):
        await harness.send(box["address"], simple_message(subject=f"m{i}"))
    base = f"/api/accounts/{box['id']}/messages"

    async def marks() -> tuple[list[bool], list[bool]]:
        listed = (await harness.http.get(base, headers=harness.auth())).json()["messages"]
        details = [(await harness.http.get(f"{base}/{m['id']}", headers=harness.auth())).json() for m in listed]
        return [m["is_read"] for m in listed], [d["is_read"] for d in details]

    ids = [m["id"] for m in (await harness.http.get(base, headers=harness.auth())).json()["messages"]]
    assert await marks() == ([False, False], [False, False])
    assert (await harness.http.put(f"{base}/{ids[0]}/read", headers=harness.auth())).status_code == 204
    assert await marks() == ([True, False], [True, False])
    assert (await harness.http.put(f"{base}/read", json={"all": True}, headers=harness.auth())).json() == {"updated": 1}
    assert await marks() == ([True, True], [True, True])
    # "Mark unread" (the dashboard's) goes through the message service.
    services = harness.server.services
    principal = await services.users.authenticate(harness.admin_token, services.mailbox_tokens)
    await services.messages.mark_unread(await services.mailboxes.find(principal, box["id"]), ids[0])
    assert await marks() == ([False, True], [False, True])
    assert (await harness.http.delete(f"{base}/{ids[0]}", headers=harness.auth())).status_code == 204
    assert (await harness.http.get(f"{base}/{ids[0]}", headers=harness.auth())).status_code == 404
    assert [m["id"] for m in (await harness.http.get(base, headers=harness.auth())).json()["messages"]] == ids[1:]


def _starlette_match(path: str) -> tuple[object, dict[str, str]] | None:
    """The endpoint and parameters Starlette's router gives a GET of `path`."""
    scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": []}
    for route in [*api_routes(), *web.routes()]:
        match, child = route.matches(scope)
        if match == Match.FULL:
            return getattr(route, "endpoint", route), child.get("path_params", {})
    return None


@pytest.mark.parametrize(
    "path",
    [
        "/api/accounts/box@x.test/messages",
        "/api/accounts/ABC/messages/wait",
        "/api/accounts/abc/messages/read",
        "/api/accounts/abc/messages/5e2c1a4e-0000-4000-8000-000000000000",
        "/api/accounts/abc/messages/",
        "/api/accounts//messages",
        "/api/accounts/abc/messages/x/source",
        "/api/accounts/abc/messages/x/attachments/0",
        "/api/accounts/abc",
        "/api/accounts/abc/messagesx",
        "/api/accounts/a b/messages/é",
        "/healthz",
    ],
)
def test_hot_routes_are_the_routes_starlette_would_pick(path: str) -> None:
    found = _match(path)
    starlette = _starlette_match(path)
    if found is None:
        hot = {"list_messages", "wait_message", "get_message"}
        assert starlette is None or getattr(starlette[0], "__name__", "") not in hot
    else:
        assert starlette is not None and (found[0], found[1]) == starlette
