"""Message tags: from the `X-Tags` header, from the plus part of the address, and set by hand
(`PUT …/messages/{id}/tags`); `tag=` on the lists and waits; both back ends, real SMTP."""

from __future__ import annotations

import asyncio
import smtplib
from typing import Any

import httpx
import pytest

from inboxd.app import Inboxd
from inboxd.client import ApiError, AsyncClient, Client
from inboxd.testing import TestMailbox
from tests.conftest import Harness, simple_message


def _list_url(box: dict[str, Any]) -> str:
    return f"/api/accounts/{box['id']}/messages"


async def _list(harness: Harness, box: dict[str, Any], **params: str) -> list[dict[str, Any]]:
    answer = await harness.http.get(_list_url(box), params=params, headers=harness.auth())
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["messages"]
    return items


async def test_x_tags_header_is_kept_cleaned_and_shown(harness: Harness) -> None:
    box = await harness.new_mailbox()
    msg = simple_message(subject="Tagged")
    # Upper case lowered, spaces trimmed, repeats and invalid tags (a space inside, too long) dropped.
    msg["X-Tags"] = " Signup, welcome,bad tag, signup, " + "x" * 33 + ", v1.2_beta-3"
    await harness.send(box["address"], msg)
    await harness.send(box["address"], simple_message(subject="Plain"))
    items = await _list(harness, box)
    assert [(m["subject"], m["tags"]) for m in items] == [
        ("Plain", []),
        ("Tagged", ["signup", "welcome", "v1.2_beta-3"]),
    ]
    detail = await harness.http.get(f"{_list_url(box)}/{items[1]['id']}", headers=harness.auth())
    assert detail.json()["tags"] == ["signup", "welcome", "v1.2_beta-3"]
    assert [m["subject"] for m in await _list(harness, box, tag="WELCOME")] == ["Tagged"]
    assert await _list(harness, box, tag="nothing") == []


async def test_at_most_ten_tags_are_kept_at_ingest(harness: Harness) -> None:
    box = await harness.new_mailbox()
    msg = simple_message()
    msg["X-Tags"] = ",".join(f"t{i}" for i in range(15))
    await harness.send(box["address"], msg)
    assert (await _list(harness, box))[0]["tags"] == [f"t{i}" for i in range(10)]


async def test_the_plus_part_of_the_address_is_a_tag(harness: Harness) -> None:
    box = await harness.new_mailbox()
    local, _, domain = box["address"].partition("@")
    await harness.send(f"{local}+SignUp@{domain}")
    # Two plus addresses of one mailbox in one envelope: one copy, with both tags, and the header's.
    msg = simple_message(subject="Both")
    msg["X-Tags"] = "extra"
    await harness.send([f"{local}+reset@{domain}", f"{local}+welcome@{domain}"], msg)
    await harness.send(box["address"], simple_message(subject="Bare"))
    items = await _list(harness, box)
    assert [(m["subject"], m["tags"]) for m in items] == [
        ("Bare", []),
        ("Both", ["reset", "welcome", "extra"]),
        ("Hello", ["signup"]),
    ]
    assert [m["subject"] for m in await _list(harness, box, tag="signup")] == ["Hello"]
    assert [m["subject"] for m in await _list(harness, box, tag="welcome")] == ["Both"]


async def test_put_tags_replaces_them_and_refuses_invalid_ones(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"])
    (item,) = await _list(harness, box)
    # Read once before the change: answers kept in memory must not outlive it.
    assert (await harness.http.get(f"{_list_url(box)}/{item['id']}", headers=harness.auth())).json()["tags"] == []
    url = f"{_list_url(box)}/{item['id']}/tags"
    answer = await harness.http.put(url, json={"tags": ["Invoice", "paid", "invoice"]}, headers=harness.auth())
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"tags": ["invoice", "paid"]}
    assert (await _list(harness, box))[0]["tags"] == ["invoice", "paid"]
    assert len(await _list(harness, box, tag="paid")) == 1
    detail = await harness.http.get(f"{_list_url(box)}/{item['id']}", headers=harness.auth())
    assert detail.json()["tags"] == ["invoice", "paid"]
    for bad in (["has space"], ["x" * 33], [""], [f"t{i}" for i in range(11)], ["é"]):
        refused = await harness.http.put(url, json={"tags": bad}, headers=harness.auth())
        assert refused.status_code == 400, (bad, refused.text)
        assert refused.json()["error"] == "invalid_request"
    refused = await harness.http.put(url, json={"tags": "paid"}, headers=harness.auth())
    assert refused.status_code == 400
    # Replacing drops the old ones from the filter too; an empty list clears.
    await harness.http.put(url, json={"tags": ["later"]}, headers=harness.auth())
    assert await _list(harness, box, tag="paid") == []
    assert len(await _list(harness, box, tag="later")) == 1
    cleared = await harness.http.put(url, json={"tags": []}, headers=harness.auth())
    assert cleared.json() == {"tags": []}
    assert await _list(harness, box, tag="later") == []
    missing = await harness.http.put(
        f"{_list_url(box)}/00000000-0000-0000-0000-000000000000/tags", json={"tags": ["a"]}, headers=harness.auth()
    )
    assert missing.status_code == 404


async def test_an_invalid_tag_filter_is_400(harness: Harness) -> None:
    box = await harness.new_mailbox()
    answer = await harness.http.get(_list_url(box), params={"tag": "no spaces"}, headers=harness.auth())
    assert answer.status_code == 400
    assert "`tag`" in answer.text


async def test_tag_combines_with_other_filters_and_full_text(harness: Harness) -> None:
    box = await harness.new_mailbox()
    for subject, tag in (("alpha one", "a"), ("alpha two", "b"), ("beta three", "a")):
        msg = simple_message(subject=subject, body=f"body {subject}")
        msg["X-Tags"] = tag
        await harness.send(box["address"], msg)
    assert [m["subject"] for m in await _list(harness, box, tag="a")] == ["beta three", "alpha one"]
    assert [m["subject"] for m in await _list(harness, box, tag="a", subject="alpha")] == ["alpha one"]
    # Full text reads the index, filled off the SMTP path: a wait answers once it has caught up.
    found = await harness.http.get(
        f"{_list_url(box)}/wait", params={"q": "alpha", "tag": "a", "timeout": "10"}, headers=harness.auth()
    )
    assert found.json()["subject"] == "alpha one"
    assert [m["subject"] for m in await _list(harness, box, tag="a", q="alpha")] == ["alpha one"]


async def test_deleting_a_message_takes_it_out_of_the_tag_filter(harness: Harness) -> None:
    box = await harness.new_mailbox()
    msg = simple_message()
    msg["X-Tags"] = "gone"
    await harness.send(box["address"], msg)
    (item,) = await _list(harness, box, tag="gone")
    deleted = await harness.http.delete(f"{_list_url(box)}/{item['id']}", headers=harness.auth())
    assert deleted.status_code == 204
    assert await _list(harness, box, tag="gone") == []


async def test_a_wait_with_tag_wakes_only_for_a_message_with_that_tag(harness: Harness) -> None:
    box = await harness.new_mailbox()
    local, _, domain = box["address"].partition("@")
    waiting = asyncio.ensure_future(
        harness.http.get(f"{_list_url(box)}/wait", params={"tag": "signup", "timeout": "20"}, headers=harness.auth())
    )
    await asyncio.wait_for(harness.server.services.waits.registered(1), 10)
    untagged = simple_message(subject="Other")
    untagged["X-Tags"] = "newsletter"
    await harness.send(box["address"], untagged)
    await harness.send(f"{local}+signup@{domain}", simple_message(subject="Welcome"))
    answer = await asyncio.wait_for(waiting, 15)
    assert answer.status_code == 200, answer.text
    assert answer.json()["subject"] == "Welcome"
    assert answer.json()["tags"] == ["signup"]


async def test_client_and_plugin_filter_and_set_tags(harness: Harness) -> None:
    """The sync client under the plugin's `TestMailbox` (`wait_for(tag=...)`, `tagged`, `set_tags`)
    and the async client's `messages(tag=...)` and `set_tags`."""
    base = f"http://127.0.0.1:{harness.server.http_port}"
    client = Client(base, harness.admin_token)
    try:
        created = await asyncio.to_thread(client.create_mailbox)
        box = TestMailbox(client, id=created.id, address=created.address)
        await harness.send(box.address, simple_message(subject="Newsletter"))
        await harness.send(box.tagged("signup"), simple_message(subject="Welcome"))
        found = await asyncio.to_thread(box.wait_for, tag="signup", timeout=10)
        assert (found.subject, found.tags) == ("Welcome", ["signup"])
        # Nothing newer carries the tag: the wait fails the test, naming the tag.
        with pytest.raises(AssertionError, match="tag='signup'"):
            await asyncio.to_thread(box.wait_for, tag="signup", timeout=0.2)
        assert await asyncio.to_thread(box.set_tags, found.id, ["Done"]) == ["done"]
        async with AsyncClient(base, harness.admin_token) as async_client:
            listed = await async_client.messages(box.id, tag="done")
            assert [(m.subject, m.tags) for m in listed] == [("Welcome", ["done"])]
            newsletter = (await async_client.messages(box.id))[1]
            assert newsletter.tags == []
            assert await async_client.set_tags(box.id, newsletter.id, ["news"]) == ["news"]
            assert (await async_client.message(box.id, newsletter.id)).tags == ["news"]
            with pytest.raises(ApiError) as refused:
                await async_client.set_tags(box.id, newsletter.id, ["not valid"])
            assert refused.value.status == 400
    finally:
        client.close()


async def test_sandbox_mail_takes_x_tags_and_the_tag_filter(harness: Harness) -> None:
    """The SMTP sandbox captures mail for any recipient: its tags come from `X-Tags` (a plus part
    of a recipient names no mailbox there)."""
    token = await harness.new_user("pro")
    info = (await harness.http.get("/api/user/sandbox", headers=harness.auth(token))).json()

    def send(subject: str, tags: str | None) -> None:
        msg = simple_message(subject=subject)
        if tags is not None:
            msg["X-Tags"] = tags
        with smtplib.SMTP("127.0.0.1", info["smtp_port"], timeout=30) as smtp:
            smtp.login(info["username"], token)
            smtp.send_message(msg, to_addrs=["customer+vip@example.org"])

    await asyncio.to_thread(send, "Receipt", "Billing")
    await asyncio.to_thread(send, "Other", None)
    base = "/api/user/sandbox/messages"
    listed = (await harness.http.get(base, headers=harness.auth(token))).json()["messages"]
    assert [(m["subject"], m["tags"]) for m in listed] == [("Other", []), ("Receipt", ["billing"])]
    only = (await harness.http.get(base, params={"tag": "billing"}, headers=harness.auth(token))).json()
    assert [m["subject"] for m in only["messages"]] == ["Receipt"]
    detail = (await harness.http.get(f"{base}/{listed[1]['id']}", headers=harness.auth(token))).json()
    assert detail["tags"] == ["billing"]


async def test_tags_set_in_one_process_show_in_anothers_kept_answers(harness: Harness) -> None:
    """Each process keeps list items and details it encoded (services/messages.py `KeptJson`): a
    change of tags made by another process sharing the database must not be answered stale."""
    box = await harness.new_mailbox()
    await harness.send(box["address"])
    other = Inboxd(harness.server.settings, clock=harness.clock)
    await other.start()
    harness.extra.append(other)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{other.http_port}", timeout=30) as http:

        async def seen_there() -> tuple[list[str], list[str]]:
            (item,) = (await http.get(_list_url(box), headers=harness.auth())).json()["messages"]
            detail = (await http.get(f"{_list_url(box)}/{item['id']}", headers=harness.auth())).json()
            return item["tags"], detail["tags"]

        assert await seen_there() == ([], [])
        (item,) = await _list(harness, box)
        url = f"{_list_url(box)}/{item['id']}/tags"
        assert (await harness.http.put(url, json={"tags": ["a"]}, headers=harness.auth())).status_code == 200
        assert await seen_there() == (["a"], ["a"])
        assert (await harness.http.put(url, json={"tags": []}, headers=harness.auth())).status_code == 200
        assert await seen_there() == ([], [])
