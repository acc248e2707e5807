"""The dashboard's first hour over plain HTTP (issue 23): the sandbox is its own place, the message
page shows the codes and links the API's detail carries (as inert text), a new mailbox is a
redirect to it (its generated password shown once there), and the layout links a favicon."""

from __future__ import annotations

import asyncio
import html
import re
import smtplib
from email.message import EmailMessage

from inboxd.model import User
from tests.conftest import Harness
from tests.test_web_sessions import csrf_of, origin, signed_in


async def pro_user(h: Harness, email: str) -> tuple[User, str]:
    users = h.server.services.users
    user = await users.create_user(email, plan="pro")
    return user, (await users.create_token(user, "app")).value


def submit(port: int, username: str, token: str, message: EmailMessage, to: list[str]) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.login(username, token)
        client.sendmail("app@example.com", to, message.as_bytes())


async def caught(h: Harness, user: User, token: str, subject: str, to: list[str]) -> str:
    """Submit a message to `user`'s sandbox; the id of the message caught."""
    info = await h.server.services.sandboxes.info(user)
    msg = EmailMessage()
    msg["From"] = "app@example.com"
    msg["To"] = to[0]
    msg["Subject"] = subject
    msg.set_content("Your code is 771305.")
    await asyncio.to_thread(submit, info.smtp.port, info.smtp.username, token, msg, to)
    listed = await h.http.get("/api/user/sandbox/messages", headers=h.auth(token))
    return str(listed.json()["messages"][0]["id"])


def links_of(page: str) -> list[str]:
    return [html.unescape(href) for href in re.findall(r'<a [^>]*href="([^"]*)"', page)]


def text_of(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).replace(" ,", ",").split())


def nav_current(page: str) -> str:
    found = re.search(r'<a href="([^"]+)" aria-current="page">', page)
    return found.group(1) if found else ""


async def test_sandbox_messages_live_under_sandbox(harness: Harness) -> None:
    h = harness
    user, token = await pro_user(h, "sam@example.test")
    recipients = ["a@outside.example", "b@outside.example", "hidden@outside.example"]
    message_id = await caught(h, user, token, "Welcome aboard", recipients)
    sandbox = (await h.server.services.sandboxes.info(user)).sandbox.mailbox
    async with signed_in(h, "sam@example.test") as client:
        listed = await client.get("/sandbox")
        assert listed.status_code == 200
        # The list shows each message's envelope recipients, and opens it under /sandbox.
        assert ", ".join(recipients) in text_of(listed.text)
        assert f"/sandbox/messages/{message_id}" in links_of(listed.text)

        opened = await client.get(f"/sandbox/messages/{message_id}")
        assert opened.status_code == 200, opened.text
        assert nav_current(opened.text) == "/sandbox"
        crumbs = re.search(r'<p class="crumbs">(.*?)</p>', opened.text, re.S)
        assert crumbs and re.fullmatch(r'<a href="/sandbox">Sandbox</a> /', crumbs.group(1).strip())
        assert "Reset password" not in opened.text and "Delete mailbox" not in opened.text
        main = opened.text.split("<main", 1)[1]
        assert not any(link.startswith("/mailboxes") for link in links_of(main))
        for tab in ("html", "text", "links", "headers", "source"):
            assert (await client.get(f"/sandbox/messages/{message_id}?tab={tab}")).status_code == 200, tab
        assert b"Subject: Welcome aboard" in (await client.get(f"/sandbox/messages/{message_id}/source")).content

        # The sandbox as a mailbox leads back to Sandbox, and has no password or delete forms.
        old = await client.get(f"/mailboxes/{sandbox.id}/messages/{message_id}?tab=text")
        assert old.status_code == 303 and old.headers["location"] == f"/sandbox/messages/{message_id}?tab=text"
        inbox = await client.get(f"/mailboxes/{sandbox.id}")
        assert inbox.status_code == 303 and inbox.headers["location"] == "/sandbox"
        for form in ("password", "delete"):
            assert (await client.get(f"/mailboxes/{sandbox.id}/{form}")).status_code == 404, form

        # Its actions come back to Sandbox.
        csrf = csrf_of(opened.text)
        unread = await client.post(
            f"/sandbox/messages/{message_id}/mark/unread", data={"csrf_token": csrf}, headers=origin(h)
        )
        assert unread.status_code == 303 and unread.headers["location"] == "/sandbox"
        deleted = await client.post(
            f"/sandbox/messages/{message_id}/delete", data={"csrf_token": csrf}, headers=origin(h)
        )
        assert deleted.status_code == 303 and deleted.headers["location"] == "/sandbox?notice=deleted"
        assert "The message was deleted." in (await client.get("/sandbox?notice=deleted")).text
        assert (await client.get(f"/sandbox/messages/{message_id}")).status_code == 404


async def test_sandbox_rows_carry_the_envelope(harness: Harness) -> None:
    """The rows the live list swaps in show the envelope too, and their links stay under /sandbox."""
    h = harness
    user, token = await pro_user(h, "sue@example.test")
    message_id = await caught(h, user, token, "Rows", ["x@outside.example", "y@outside.example"])
    async with signed_in(h, "sue@example.test") as client:
        rows = await client.get("/sandbox/rows")
        assert rows.status_code == 200
        assert "x@outside.example, y@outside.example" in text_of(rows.text)
        assert links_of(rows.text) == [f"/sandbox/messages/{message_id}"]


HOSTILE_HTML = (
    '<html><body><p>Your verification code is <b style="font-size:24px">482913</b></p>'
    '<p><a href="https://shop.example/verify?t=abc&amp;u=1">Verify &lt;script&gt;alert(1)&lt;/script&gt;</a></p>'
    '<p><a href="javascript:alert(2)">Click me</a></p>'
    '<p><a href="https://evil.example/&quot;onmouseover=&quot;alert(3)">quote</a></p>'
    "</body></html>"
)


async def test_the_message_page_shows_codes_and_links_as_text(harness: Harness) -> None:
    h = harness
    token = await h.new_user(email="cody@example.test")
    box = await h.new_mailbox(token, "cody")
    msg = EmailMessage()
    msg["From"] = "Shop <orders@shop.example>"
    msg["To"] = box["address"]
    msg["Subject"] = "Confirm your email"
    msg.set_content("Your verification code is 482913.\nOr open https://shop.example/verify?t=abc&u=1\n")
    msg.add_alternative(HOSTILE_HTML, subtype="html")
    await h.send(box["address"], msg)
    api = f"/api/accounts/{box['id']}/messages"
    message_id = (await h.http.get(api, headers=h.auth(token))).json()["messages"][0]["id"]
    detail = (await h.http.get(f"{api}/{message_id}", headers=h.auth(token))).json()
    assert detail["codes"] == ["482913"]
    async with signed_in(h, "cody@example.test") as client:
        base = f"/mailboxes/{box['id']}/messages/{message_id}"
        page = (await client.get(base)).text
        # The code, with a copy button that copies it (app.js copies the value of the input it names).
        copy = re.search(r'<button [^>]*data-copy="#([\w-]+)"[^>]*aria-label="Copy code 482913"', page)
        assert copy, page
        assert re.search(rf'<input id="{copy.group(1)}" type="hidden" value="482913">', page)
        assert '<code class="code">482913</code>' in page
        assert re.search(r'<a href="[^"]+\?tab=links"[^>]*>Links <span class="tab-count">2</span>', page)

        links = (await client.get(f"{base}?tab=links")).text
        panel = links.split('<section class="tab-panel"', 1)[1].split("</section>", 1)[0]
        anchors = re.findall(r"<a [^>]*>", panel)
        # As the API's detail has them, in order: the URLs as text, escaped; only http(s) ones.
        assert [html.unescape(re.search(r'href="([^"]*)"', a).group(1)) for a in anchors] == [  # type: ignore[union-attr]
            link["url"] for link in detail["links"]
        ]
        assert all('target="_blank"' in a and 'rel="noopener noreferrer"' in a for a in anchors)
        assert "javascript:" not in panel and "<script>" not in panel
        assert "Verify &lt;script&gt;alert(1)&lt;/script&gt;" in panel
        assert 'onmouseover="' not in panel
        # Nothing on the page fetches from the message's hosts.
        assert not re.search(r'<(img|link|iframe|script)[^>]+(src|href)="https?://', links)


async def test_creating_a_mailbox_redirects_to_it(harness: Harness) -> None:
    h = harness
    await h.new_user(email="newt@example.test")
    async with signed_in(h, "newt@example.test") as client:
        form = await client.get("/mailboxes")
        fields = {"local": "newt", "domain": h.domain, "csrf_token": csrf_of(form.text)}
        made = await client.post("/mailboxes", data=fields, headers=origin(h))
        assert made.status_code == 303, made.text
        location = made.headers["location"]
        mailbox_id = location.split("/")[2].split("?")[0]
        assert location == f"/mailboxes/{mailbox_id}?notice=created"
        shown = await client.get(location)
        assert f"newt@{h.domain}</h1>" in shown.text
        password = re.search(r'id="new-password"[^>]*value="([^"]+)"', shown.text)
        assert password and len(password.group(1)) >= 12
        # The generated password opens the mailbox, and the page shows it only this once.
        opened = await h.http.post("/api/token", json={"address": f"newt@{h.domain}", "password": password.group(1)})
        assert opened.status_code == 200, opened.text
        again = await client.get(location)
        assert "new-password" not in again.text and password.group(1) not in again.text
        # The list's form is empty again.
        assert 'value="newt"' not in (await client.get("/mailboxes")).text

        chosen = await client.post(
            "/mailboxes",
            data={"local": "pat", "domain": h.domain, "password": "chosen123", "csrf_token": csrf_of(form.text)},
            headers=origin(h),
        )
        assert chosen.status_code == 303
        assert "new-password" not in (await client.get(chosen.headers["location"])).text


async def test_the_layout_links_a_favicon_served_as_svg(harness: Harness) -> None:
    async with signed_in(harness) as client:
        pages = [await client.get("/account"), await harness.http.get("/auth/sign-in")]
        for page in pages:
            assert page.status_code == 200
            icon = re.search(r'<link rel="icon" href="([^"]+)" type="image/svg\+xml">', page.text)
            assert icon, page.url
            answer = await client.get(html.unescape(icon.group(1)))
            assert answer.status_code == 200
            assert answer.headers["content-type"] == "image/svg+xml"
            assert answer.content.startswith(b"<svg")
