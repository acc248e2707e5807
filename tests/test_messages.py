"""Messages through SMTP and REST: list, detail, source, attachments, marks, delete, expiry."""

from __future__ import annotations

from email.message import EmailMessage
from email.policy import SMTP
from functools import partial

from inboxd.services.messages import DETAIL_VERSION
from inboxd.store import messages as message_store
from tests.conftest import Harness, simple_message


def rich_message() -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = "=?utf-8?q?J=C3=BCrgen?= <jurgen@example.org>"
    msg["To"] = "x@inboxd.localhost"
    msg["Subject"] = "Rechnung für Oktober"
    msg.set_content("Hallo,\n\nanbei die Rechnung.\n")
    msg.add_alternative("<p>Hallo, <b>anbei</b> die Rechnung.</p>", subtype="html")
    msg.add_attachment(b"%PDF-1.4 fake", maintype="application", subtype="pdf", filename="€ rates.pdf")
    msg.add_attachment(b"a,b\n1,2\n", maintype="text", subtype="csv", filename="data.csv")
    return msg


def multipart_mixed(subject: bytes, *parts: bytes) -> bytes:
    """A raw multipart/mixed message of `parts`, each its own header lines, a blank line and a body."""
    head = (
        b"From: a@example.org\r\nTo: x@inboxd.localhost\r\nSubject: " + subject + b"\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n'
    )
    return head + b"".join(b"--b\r\n" + part + b"\r\n" for part in parts) + b"--b--\r\n"


async def test_receive_list_and_detail(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"], rich_message(), sender="bounce@example.org")
    listing = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())
    assert listing.status_code == 200
    body = listing.json()
    assert body["page"] == 1
    [item] = body["messages"]
    assert set(item) == {"id", "sender", "from", "subject", "preview_text", "size", "is_read", "created_at", "tags"}
    assert item["tags"] == []
    assert item["sender"] == "bounce@example.org"
    assert item["from"] == "Jürgen <jurgen@example.org>"
    assert item["subject"] == "Rechnung für Oktober"
    assert item["preview_text"] == "Hallo, anbei die Rechnung."
    assert item["is_read"] is False
    detail = await harness.http.get(f"/api/accounts/{box['id']}/messages/{item['id']}", headers=harness.auth())
    assert detail.status_code == 200
    d = detail.json()
    assert set(d) == {
        "id",
        "sender",
        "from",
        "subject",
        "address",
        "size",
        "created_at",
        "text_body",
        "html_body",
        "attachments",
        "to",
        "cc",
        "is_read",
        "headers",
        "codes",
        "links",
        "tags",
    }
    assert d["tags"] == []
    assert d["address"] == box["address"]
    assert d["text_body"].startswith("Hallo,")
    assert "<b>anbei</b>" in d["html_body"]
    assert d["attachments"] == [
        {"index": 0, "filename": "€ rates.pdf", "content_type": "application/pdf", "size": 13},
        {"index": 1, "filename": "data.csv", "content_type": "text/csv", "size": 8},
    ]
    info = await harness.http.get(f"/api/accounts/{box['id']}", headers=harness.auth())
    assert info.json()["used"] == item["size"]
    # Opening it again serves the kept parse.
    again = await harness.http.get(f"/api/accounts/{box['id']}/messages/{item['id']}", headers=harness.auth())
    assert again.json() == d


async def test_detail_codes_links_recipients_headers(harness: Harness) -> None:
    box = await harness.new_mailbox()
    html = '<p>Your verification code is <b>482913</b>.</p><a href="https://acme.example/verify?t=1&amp;u=2">Verify</a>'
    raw = (
        "From: Acme <no-reply@acme.example>\r\n"
        f"To: =?utf-8?q?J=C3=BCrgen?= <{box['address']}>, other@example.org\r\n"
        'Cc: "Doe, Jane" <jane@example.org>\r\n'
        "Subject: =?utf-8?q?Best=C3=A4tigen?= your account\r\n"
        "X-Trace: a\r\n  folded value\r\n"
        'MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary="b"\r\n\r\n'
        "--b\r\nContent-Type: text/plain\r\n\r\n"
        "Your verification code is 482 913.\r\nOr open https://acme.example/verify?t=1&u=2.\r\n"
        f"--b\r\nContent-Type: text/html\r\n\r\n{html}\r\n--b--\r\n"
    ).encode()
    await harness.send(box["address"], raw)
    [item] = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())).json()["messages"]
    url = f"/api/accounts/{box['id']}/messages/{item['id']}"
    d = (await harness.http.get(url, headers=harness.auth())).json()
    assert d["codes"] == ["482913"]
    assert d["links"] == [{"url": "https://acme.example/verify?t=1&u=2", "text": "Verify"}]
    assert d["to"] == f"Jürgen <{box['address']}>, other@example.org"
    assert d["cc"] == "Doe, Jane <jane@example.org>"
    assert d["is_read"] is False
    names = [name for name, _ in d["headers"]]
    assert names[0] == "Received"  # added by inboxd on receipt
    assert names[1:6] == ["From", "To", "Cc", "Subject", "X-Trace"]
    assert ["Subject", "Bestätigen your account"] in d["headers"]
    assert ["X-Trace", "a folded value"] in d["headers"]
    await harness.http.put(url + "/read", headers=harness.auth())
    assert (await harness.http.get(url, headers=harness.auth())).json()["is_read"] is True


async def test_detail_kept_by_an_older_version_is_parsed_again(harness: Harness) -> None:
    """Messages opened before codes and links existed get them on their next open."""
    box = await harness.new_mailbox()
    await harness.send(box["address"], simple_message(subject="Sign in", body="Your code: 774411"))
    [item] = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())).json()["messages"]
    db = harness.server._db
    assert db is not None
    old = '{"text_body":"Your code: 774411\\n","html_body":"","attachments":[]}'
    await db.write(partial(message_store.save_detail, message_id=item["id"], detail=old))
    url = f"/api/accounts/{box['id']}/messages/{item['id']}"
    d = (await harness.http.get(url, headers=harness.auth())).json()
    assert d["codes"] == ["774411"]
    assert ["From", "Alice <alice@example.org>"] in d["headers"]
    kept = await db.read(partial(message_store.detail_json, message_id=item["id"]))
    assert kept is not None and f'"v":{DETAIL_VERSION}' in kept


async def test_source_and_attachments(harness: Harness) -> None:
    box = await harness.new_mailbox()
    message = rich_message()
    await harness.send(box["address"], message)
    [item] = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())).json()["messages"]
    base = f"/api/accounts/{box['id']}/messages/{item['id']}"
    source = await harness.http.get(f"{base}/source", headers=harness.auth())
    assert source.status_code == 200
    assert source.headers["content-type"] == "message/rfc822"
    assert source.headers["content-disposition"] == 'attachment; filename="message.eml"'
    assert source.content.startswith(b"Received: from ")
    assert source.content.endswith(message.as_bytes(policy=SMTP))
    assert len(source.content) == item["size"]
    pdf = await harness.http.get(f"{base}/attachments/0", headers=harness.auth())
    assert pdf.status_code == 200 and pdf.content == b"%PDF-1.4 fake"
    assert pdf.headers["content-type"] == "application/pdf"
    assert "filename*=UTF-8''%E2%82%AC%20rates.pdf" in pdf.headers["content-disposition"]
    csv = await harness.http.get(f"{base}/attachments/1", headers=harness.auth())
    assert csv.content == b"a,b\n1,2\n" and 'filename="data.csv"' in csv.headers["content-disposition"]
    for bad in ["2", "-1", "x", "1.0", "²", "١", "１"]:
        response = await harness.http.get(f"{base}/attachments/{bad}", headers=harness.auth())
        assert response.status_code == 400 and response.json()["error"] == "invalid_index", bad


async def test_attachments_keep_their_declared_content_type(harness: Harness) -> None:
    box = await harness.new_mailbox()
    raw = multipart_mixed(
        b"types",
        b"Content-Type: text/plain\r\n\r\nbody",
        b'Content-Type: text/plain; charset=iso-8859-1\r\nContent-Disposition: attachment; filename="l.txt"\r\n'
        b"\r\ncaf\xe9",
        b"Content-Type: text/calendar;\r\n method=REQUEST; charset=utf-8\r\n"
        b'Content-Disposition: attachment; filename="invite.ics"\r\n\r\nBEGIN:VCALENDAR',
        b'Content-Type: text/plain\r\nContent-Disposition: attachment; filename="n.txt"\r\n\r\nplain',
        b'Content-Type: nonsense\r\nContent-Disposition: attachment; filename="x.bin"\r\n\r\nzz',
    )
    await harness.send(box["address"], raw)
    [item] = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())).json()["messages"]
    base = f"/api/accounts/{box['id']}/messages/{item['id']}/attachments"
    served = [(await harness.http.get(f"{base}/{i}", headers=harness.auth())) for i in range(4)]
    assert [r.status_code for r in served] == [200] * 4
    # As declared, parameters kept, folding undone; nothing added (no charset=utf-8 on Latin-1).
    assert served[0].headers["content-type"] == "text/plain; charset=iso-8859-1"
    assert served[0].content == b"caf\xe9"
    assert served[1].headers["content-type"] == "text/calendar; method=REQUEST; charset=utf-8"
    assert served[2].headers["content-type"] == "text/plain"
    # A value the parser could not read as a type is served as what it was read as.
    assert served[3].headers["content-type"] == "text/plain"


async def test_charsets_that_decode_to_lone_surrogates(harness: Harness) -> None:
    # utf-7 and unicode_escape can decode to lone surrogates, which neither database, JSON nor URL
    # quoting accepts: such a message used to get a 451 at DATA, or a detail that failed for good.
    box = await harness.new_mailbox()
    raw = multipart_mixed(
        b"=?utf-7?Q?+2D0-?= x",
        b"Content-Type: text/plain; charset=utf-7\r\n\r\n" + b"x" * 150 + b"+2D0-",
        b"Content-Type: text/html; charset=unicode_escape\r\n\r\n<p>\\ud834</p>",
        b"Content-Type: application/octet-stream\r\n"
        b"Content-Disposition: attachment; filename*=utf-7''%2B2D0-.bin\r\n\r\nzz",
    )
    await harness.send(box["address"], raw)
    [item] = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())).json()["messages"]
    assert item["subject"] == "\ufffd x"
    base = f"/api/accounts/{box['id']}/messages/{item['id']}"
    detail = await harness.http.get(base, headers=harness.auth())
    assert detail.status_code == 200
    assert detail.json()["text_body"].rstrip() == "x" * 150 + "\ufffd"
    assert detail.json()["html_body"].rstrip() == "<p>\ufffd</p>"
    assert detail.json()["attachments"][0]["filename"] == "\ufffd.bin"
    attachment = await harness.http.get(f"{base}/attachments/0", headers=harness.auth())
    assert attachment.status_code == 200 and attachment.content == b"zz"


async def test_pages_of_thirty_newest_first(harness: Harness) -> None:
    box = await harness.new_mailbox()
    for i in range(31):
        await harness.send(box["address"], simple_message(subject=f"n{i}"))
    first = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())).json()
    assert len(first["messages"]) == 30 and first["page"] == 1
    assert first["messages"][0]["subject"] == "n30"
    second = (await harness.http.get(f"/api/accounts/{box['id']}/messages?page=2", headers=harness.auth())).json()
    assert [m["subject"] for m in second["messages"]] == ["n0"] and second["page"] == 2
    third = (await harness.http.get(f"/api/accounts/{box['id']}/messages?page=3", headers=harness.auth())).json()
    assert third["messages"] == []


async def test_marks_and_delete(harness: Harness) -> None:
    box = await harness.new_mailbox()
    for i in range(3):
        await harness.send(box["address"], simple_message(subject=f"m{i}"))
    base = f"/api/accounts/{box['id']}/messages"
    items = (await harness.http.get(base, headers=harness.auth())).json()["messages"]
    ids = [m["id"] for m in items]
    # GET does not mark read.
    await harness.http.get(f"{base}/{ids[0]}", headers=harness.auth())
    one = await harness.http.put(f"{base}/{ids[0]}/read", headers=harness.auth())
    assert one.status_code == 204
    assert (await harness.http.put(f"{base}/{ids[0]}/read", headers=harness.auth())).status_code == 204
    many = await harness.http.put(f"{base}/read", json={"ids": [ids[0], ids[1], "not-mine"]}, headers=harness.auth())
    assert many.status_code == 200 and many.json() == {"updated": 1}
    rest = await harness.http.put(f"{base}/read", json={"all": True}, headers=harness.auth())
    assert rest.json() == {"updated": 1}
    listed = (await harness.http.get(base, headers=harness.auth())).json()["messages"]
    assert all(m["is_read"] for m in listed)
    used_before = (await harness.http.get(f"/api/accounts/{box['id']}", headers=harness.auth())).json()["used"]
    deleted = await harness.http.delete(f"{base}/{ids[0]}", headers=harness.auth())
    assert deleted.status_code == 204
    assert (await harness.http.get(f"{base}/{ids[0]}", headers=harness.auth())).status_code == 404
    assert (await harness.http.delete(f"{base}/{ids[0]}", headers=harness.auth())).status_code == 404
    used_after = (await harness.http.get(f"/api/accounts/{box['id']}", headers=harness.auth())).json()["used"]
    assert used_after == used_before - items[0]["size"]
    assert len((await harness.http.get(base, headers=harness.auth())).json()["messages"]) == 2
    missing = await harness.http.put(f"{base}/00000000-0000-0000-0000-000000000000/read", headers=harness.auth())
    assert missing.status_code == 404


async def test_message_ids_in_any_case(harness: Harness) -> None:
    # UUIDs are case-insensitive; the mailbox in the path already was.
    box = await harness.new_mailbox()
    await harness.send(box["address"], simple_message())
    base = f"/api/accounts/{box['id'].upper()}/messages"
    [item] = (await harness.http.get(base, headers=harness.auth())).json()["messages"]
    upper = item["id"].upper()
    detail = await harness.http.get(f"{base}/{upper}", headers=harness.auth())
    assert detail.status_code == 200 and detail.json()["id"] == item["id"]
    assert (await harness.http.get(f"{base}/{upper}/source", headers=harness.auth())).status_code == 200
    marked = await harness.http.put(f"{base}/read", json={"ids": [upper]}, headers=harness.auth())
    assert marked.json() == {"updated": 1}
    assert (await harness.http.delete(f"{base}/{upper}", headers=harness.auth())).status_code == 204


async def test_expiry_then_purge(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"])
    base = f"/api/accounts/{box['id']}/messages"
    [item] = (await harness.http.get(base, headers=harness.auth())).json()["messages"]
    harness.clock.advance(30 * 86400 + 1)  # the admin is Pro: 30 days
    assert (await harness.http.get(base, headers=harness.auth())).json()["messages"] == []
    for path in (f"{base}/{item['id']}", f"{base}/{item['id']}/source", f"{base}/{item['id']}/attachments/0"):
        response = await harness.http.get(path, headers=harness.auth())
        assert response.status_code == 410 and response.json()["error"] == "expired", path
    sweeper = harness.server._workers[0]
    await sweeper.sweep()
    assert (await harness.http.get(f"/api/accounts/{box['id']}", headers=harness.auth())).json()["used"] == 0
    harness.clock.advance(7 * 86400 + 1)
    await sweeper.sweep()
    assert (await harness.http.get(f"{base}/{item['id']}", headers=harness.auth())).status_code == 404


async def test_expired_bytes_leave_used_at_expiry_not_at_the_sweep(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"])
    harness.clock.advance(86400)
    await harness.send(box["address"])
    info = f"/api/accounts/{box['id']}"
    both = (await harness.http.get(info, headers=harness.auth())).json()["used"]
    harness.clock.advance(29 * 86400 + 1)  # the first message expires (Pro: 30 days); no sweep runs
    [left] = (await harness.http.get(f"{info}/messages", headers=harness.auth())).json()["messages"]
    now = (await harness.http.get(info, headers=harness.auth())).json()["used"]
    assert now == left["size"] and now < both
    listed = (await harness.http.get("/api/user/accounts", headers=harness.auth())).json()["accounts"]
    assert [a["used"] for a in listed if a["id"] == box["id"]] == [now]
    await harness.server._workers[0].sweep()  # the sweep changes nothing that can be seen
    assert (await harness.http.get(info, headers=harness.auth())).json()["used"] == now


async def test_large_bodies_are_answered_whole_and_exact(harness: Harness) -> None:
    """Bodies past the streaming threshold are encoded piece by piece; the JSON is the same."""
    box = await harness.new_mailbox()
    text = ('quote " backslash \\ tab \t nul \x00 ünïcødé 😀 \u2028 ' * 9000)[:300_000]
    html = "<p>" + "x<br>\x01" * 40_000 + "</p>"
    message = simple_message(body=text)
    message.add_alternative(html, subtype="html")
    await harness.send(box["address"], message)
    base = f"/api/accounts/{box['id']}/messages"
    [item] = (await harness.http.get(base, headers=harness.auth())).json()["messages"]
    for _ in range(2):  # the first open parses, the second too (too big to keep)
        detail = (await harness.http.get(f"{base}/{item['id']}", headers=harness.auth())).json()
        assert detail["text_body"].replace("\r\n", "\n") == text + "\n"
        assert detail["html_body"].replace("\r\n", "\n") == html + "\n"
        assert detail["id"] == item["id"] and detail["subject"] == "Hello" and detail["is_read"] is False


async def test_free_retention_is_seven_days(harness: Harness) -> None:
    free = await harness.new_user(plan="free")
    box = await harness.new_mailbox(free)
    await harness.send(box["address"])
    base = f"/api/accounts/{box['id']}/messages"
    harness.clock.advance(6 * 86400)
    assert len((await harness.http.get(base, headers=harness.auth(free))).json()["messages"]) == 1
    harness.clock.advance(86400 + 1)
    assert (await harness.http.get(base, headers=harness.auth(free))).json()["messages"] == []


async def test_mailbox_token_reads_messages(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"])
    base = f"/api/accounts/{box['address']}/messages"
    listing = await harness.http.get(base, headers=harness.auth(box["token"]))
    [item] = listing.json()["messages"]
    detail = await harness.http.get(f"{base}/{item['id']}", headers=harness.auth(box["token"]))
    assert detail.status_code == 200


async def test_unparseable_message_is_kept(harness: Harness) -> None:
    box = await harness.new_mailbox()
    garbage = b"\x00\xff\xfe not a header\r\n\r\n--boundary-without-start\r\n\xc3\x28 body \x00\r\n"
    await harness.send(box["address"], garbage)
    base = f"/api/accounts/{box['id']}/messages"
    [item] = (await harness.http.get(base, headers=harness.auth())).json()["messages"]
    detail = await harness.http.get(f"{base}/{item['id']}", headers=harness.auth())
    assert detail.status_code == 200
    source = await harness.http.get(f"{base}/{item['id']}/source", headers=harness.auth())
    assert source.content.endswith(garbage)


async def test_large_attachment_round_trip(harness: Harness) -> None:
    import os

    box = await harness.new_mailbox()
    payload = os.urandom(3 * 1024 * 1024)  # incompressible, so the stored form stays large
    msg = simple_message()
    msg.add_attachment(payload, maintype="application", subtype="octet-stream", filename="blob.bin")
    await harness.send(box["address"], msg)
    base = f"/api/accounts/{box['id']}/messages"
    [item] = (await harness.http.get(base, headers=harness.auth())).json()["messages"]
    assert item["size"] > 4 * 1024 * 1024  # base64 on the wire
    detail = (await harness.http.get(f"{base}/{item['id']}", headers=harness.auth())).json()
    assert detail["attachments"][0]["size"] == len(payload)
    blob = await harness.http.get(f"{base}/{item['id']}/attachments/0", headers=harness.auth())
    assert blob.content == payload
    source = await harness.http.get(f"{base}/{item['id']}/source", headers=harness.auth())
    assert len(source.content) == item["size"]
