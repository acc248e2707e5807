"""Filters on the message lists: full text on the background index, from/to/subject substrings,
unread, attachments and time bounds, with `page`; malformed values; the index off the SMTP path
(searchable within 2 s, catches up after a restart, forgets deleted mail)."""

from __future__ import annotations

import asyncio
import smtplib
import sqlite3
import time
from email.message import EmailMessage
from email.policy import SMTP
from typing import Any

import httpx
import psycopg
import pytest

from inboxd.app import Inboxd
from inboxd.mail.message_walk import MessageWalk
from inboxd.services.rawcodec import compress
from inboxd.store import messages as message_store
from inboxd.store import search, search_index
from inboxd.worker.indexer import build_doc
from tests.conftest import PG_URL, Harness, simple_message


def message(subject: str, body: str, *, sender: str = "alice@example.org", to: str = "", cc: str = "") -> EmailMessage:
    msg = simple_message(subject=subject, body=body, sender=sender)
    if to:
        del msg["To"]
        msg["To"] = to
    if cc:
        msg["Cc"] = cc
    return msg


def send_many(port: int, to: str, messages: list[EmailMessage]) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        for msg in messages:
            sender = msg["From"].addresses[0].addr_spec
            client.sendmail(sender, [to], msg.as_bytes(policy=SMTP))


async def listed(h: Harness, box: dict[str, Any], token: str | None = None, **params: str) -> list[str]:
    answer = await h.http.get(f"/api/accounts/{box['id']}/messages", params=params, headers=h.auth(token))
    assert answer.status_code == 200, answer.text
    return [m["subject"] for m in answer.json()["messages"]]


async def every(h: Harness, box: dict[str, Any], **params: str) -> list[str]:
    """Every page of a filtered list."""
    out: list[str] = []
    for page in range(1, 100):
        items = await listed(h, box, page=str(page), **params)
        out += items
        if len(items) < 30:
            return out
    raise AssertionError("too many pages")


async def indexed(h: Harness, box: dict[str, Any], count: int) -> None:
    """Until the background indexer has taken in `count` messages of the mailbox."""
    async with asyncio.timeout(10):
        # Every page: a test with more than a page of mail must not go on with some of it unindexed.
        while (
            len(await every(h, box, has_attachments="false")) + len(await every(h, box, has_attachments="true")) < count
        ):
            await asyncio.sleep(0.05)


def corpus() -> list[EmailMessage]:
    with_file = message("Invoice November", "Please find the invoice attached.\n", sender="billing@shop.example")
    with_file.add_attachment(b"%PDF-1.4", maintype="application", subtype="pdf", filename="invoice.pdf")
    html = EmailMessage()
    html["From"] = "Zoë Müller <zoe@example.de>"
    html["To"] = "Team <team@example.test>"
    html["Subject"] = "Bestätigung Ihrer Anmeldung"
    html.set_content("<p>Ihr <b>Sicherheitscode</b> lautet 482913.</p>", subtype="html")
    return [
        message("Verify your account", "Your verification code is 123456.\n", sender="noreply@auth.example"),
        message("Weekly digest", "Nothing to verify here; the zebra crossing is closed.\n", to="dev@example.test"),
        message("Meeting", "Let us meet on Monday.\n", sender="bob@corp.example", cc="Carol <carol@corp.example>"),
        with_file,
        html,
    ]


async def test_each_filter_alone_and_combined(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await asyncio.to_thread(send_many, harness.server.smtp_port, box["address"], corpus())
    await indexed(harness, box, 5)
    everything = await listed(harness, box)
    assert len(everything) == 5

    async def subjects(**params: str) -> set[str]:
        return set(await listed(harness, box, **params))

    # Full text: every word, any case, over subject, from, recipients and the text body; `*` = prefix.
    assert await subjects(q="verify") == {"Verify your account", "Weekly digest"}
    assert await subjects(q="VERIFY code") == {"Verify your account"}
    assert await subjects(q="verif*") == {"Verify your account", "Weekly digest"}
    assert await subjects(q="verif") == set()
    assert await subjects(q="zebra") == {"Weekly digest"}
    assert await subjects(q="carol") == {"Meeting"}  # a Cc recipient
    assert await subjects(q="dev@example.test") == {"Weekly digest"}  # a To recipient, cut in words
    assert await subjects(q="billing") == {"Invoice November"}  # the sender
    assert await subjects(q="sicherheitscode 482913") == {"Bestätigung Ihrer Anmeldung"}  # HTML-only body
    assert await subjects(q="BESTÄTIGUNG") == {"Bestätigung Ihrer Anmeldung"}
    assert await subjects(q="zoë") == {"Bestätigung Ihrer Anmeldung"}
    assert await subjects(q="verify nothing-such") == set()
    # Substrings.
    assert await subjects(subject="VERIFY") == {"Verify your account"}
    assert await subjects(subject="bestätigung") == {"Bestätigung Ihrer Anmeldung"}
    assert await subjects(subject="BESTÄTIGUNG") == {"Bestätigung Ihrer Anmeldung"}
    assert await subjects(subject="100%") == set()  # LIKE wildcards are literal
    assert await subjects(subject="_") == set()
    assert await subjects(**{"from": "Corp.Example"}) == {"Meeting"}
    assert await subjects(**{"from": "MÜLLER"}) == {"Bestätigung Ihrer Anmeldung"}
    assert await subjects(to="carol@corp") == {"Meeting"}  # Cc counts as a recipient
    assert await subjects(to="TEAM@example") == {"Bestätigung Ihrer Anmeldung"}
    assert await subjects(to=box["address"]) == set(everything)  # the mailbox itself
    # Flags.
    assert await subjects(has_attachments="true") == {"Invoice November"}
    assert len(await subjects(has_attachments="false")) == 4
    detail = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())
    meeting = next(m for m in detail.json()["messages"] if m["subject"] == "Meeting")
    read = await harness.http.put(f"/api/accounts/{box['id']}/messages/{meeting['id']}/read", headers=harness.auth())
    assert read.status_code == 204
    assert await subjects(unread="false") == {"Meeting"}
    assert len(await subjects(unread="true")) == 4
    # Combined.
    assert await subjects(q="verify", unread="true", has_attachments="false", subject="digest") == {"Weekly digest"}
    assert await subjects(q="invoice", has_attachments="false") == set()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_many_matches_walk_the_mailbox_with_the_same_answers(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL reads a mailbox with more than `FEW_MATCHES` matches newest first, testing each
    row against the tsquery, rather than from the matches: the same messages either way."""
    box = await harness.new_mailbox()
    await asyncio.to_thread(send_many, harness.server.smtp_port, box["address"], corpus())
    await indexed(harness, box, 5)
    queries: list[dict[str, str]] = [
        {"q": "verify"},
        {"q": "verif*"},
        {"q": "VERIFY code"},
        {"q": "verify nothing-such"},
        {"q": "verify", "unread": "true", "has_attachments": "false", "subject": "digest"},
        {"q": "invoice", "has_attachments": "true", "from": "billing"},
        {"q": "it's"},
    ]
    from_hits = [set(await listed(harness, box, **params)) for params in queries]
    monkeypatch.setattr(search, "FEW_MATCHES", 1)
    walked = [set(await listed(harness, box, **params)) for params in queries]
    assert walked == from_hits
    assert from_hits[0] == {"Verify your account", "Weekly digest"}
    assert from_hits[5] == {"Invoice November"}
    # The list reads a page's keys first (and its whole rows only for items not kept): each of the
    # two statements is planned per call and compiled at most once, the keys' one surely.
    keys, rows = (message_store._PAGES((search.Shape(words="walk"), 30, False, only)) for only in (True, False))
    assert keys.replan and rows.replan
    assert keys.compilations == 1 and rows.compilations <= 1


async def test_time_bounds_and_pages(harness: Harness) -> None:
    box = await harness.new_mailbox()
    first = [message(f"Batch A {i:02d}", "alpha\n") for i in range(3)]
    await asyncio.to_thread(send_many, harness.server.smtp_port, box["address"], first)
    harness.clock.advance(60)
    await asyncio.to_thread(
        send_many, harness.server.smtp_port, box["address"], [message(f"Batch B {i:02d}", "beta\n") for i in range(33)]
    )
    harness.clock.advance(60)
    await asyncio.to_thread(send_many, harness.server.smtp_port, box["address"], [message("Batch C", "gamma\n")])
    await indexed(harness, box, 37)
    answer = await harness.http.get(f"/api/accounts/{box['id']}/messages", params={"q": "beta"}, headers=harness.auth())
    items = answer.json()["messages"]
    newest_b = items[0]["created_at"]
    oldest_b = (
        await harness.http.get(
            f"/api/accounts/{box['id']}/messages", params={"q": "beta", "page": "2"}, headers=harness.auth()
        )
    ).json()["messages"][-1]["created_at"]
    assert len(items) == 30
    # page with a filter: 33 matches → 30 + 3, newest first.
    page2 = await listed(harness, box, q="beta", page="2")
    assert len(page2) == 3 and all(s.startswith("Batch B") for s in page2)
    assert await listed(harness, box, q="beta", page="3") == []
    # since is inclusive, until exclusive.
    since_b = await every(harness, box, since=oldest_b)
    assert len(since_b) == 34 and "Batch C" in since_b
    until_b = await every(harness, box, until=oldest_b)
    assert len(until_b) == 3 and all(s.startswith("Batch A") for s in until_b)
    between = await every(harness, box, since=oldest_b, until=newest_b)
    # The newest of B is out, with any other stored in the same millisecond (times are shown,
    # and taken as bounds, to the millisecond).
    times_b = [m["created_at"] for m in items] + [
        m["created_at"]
        for m in (
            await harness.http.get(
                f"/api/accounts/{box['id']}/messages", params={"q": "beta", "page": "2"}, headers=harness.auth()
            )
        ).json()["messages"]
    ]
    assert len(between) == sum(1 for t in times_b if t < newest_b) >= 31
    assert await listed(harness, box, since=oldest_b, until=oldest_b) == []
    # Offsets and other spellings of the same instant.
    assert len(await every(harness, box, since=oldest_b.replace("Z", "+00:00"))) == 34
    assert len(await every(harness, box, since=oldest_b.replace("Z", "z").replace("T", " "))) == 34


async def test_the_user_route_filters_too(harness: Harness) -> None:
    token = await harness.new_user("pro")
    box = await harness.new_mailbox(token)
    await asyncio.to_thread(send_many, harness.server.smtp_port, box["address"], corpus())
    answer = await harness.http.get(
        f"/api/user/accounts/{box['id']}/messages", params={"subject": "meeting"}, headers=harness.auth(token)
    )
    assert [m["subject"] for m in answer.json()["messages"]] == ["Meeting"]
    async with asyncio.timeout(10):
        while True:
            answer = await harness.http.get(
                f"/api/user/accounts/{box['id']}/messages", params={"q": "zebra"}, headers=harness.auth(token)
            )
            if answer.json()["messages"]:
                break
            await asyncio.sleep(0.05)
    assert [m["subject"] for m in answer.json()["messages"]] == ["Weekly digest"]
    bad = await harness.http.get(
        f"/api/user/accounts/{box['id']}/messages", params={"since": "yesterday"}, headers=harness.auth(token)
    )
    assert bad.status_code == 400 and "`since`" in bad.json()["message"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_malformed_values_are_400_naming_the_parameter(harness: Harness) -> None:
    box = await harness.new_mailbox()
    cases = [
        ("unread", "yes"),
        ("unread", "1"),
        ("has_attachments", "TRUE"),
        ("since", "2026-11-23"),
        ("since", "2026-11-23T10:00:00"),  # no zone
        ("since", "2026-02-30T10:00:00Z"),
        ("until", "1700000000"),
        ("until", "2026-11-23T25:00:00Z"),
        ("q", "*** ---"),
        ("q", "x" * 1001),
        ("subject", "y" * 1001),
        ("page", "0"),
    ]
    for name, value in cases:
        answer = await harness.http.get(
            f"/api/accounts/{box['id']}/messages", params={name: value}, headers=harness.auth()
        )
        assert answer.status_code == 400, (name, value)
        body = answer.json()
        assert body["error"] == "invalid_request"
        assert f"`{name}`" in body["message"], (name, body)
    # An empty value is no filter, and unknown parameters are ignored.
    ok = await harness.http.get(
        f"/api/accounts/{box['id']}/messages", params={"q": "", "unread": "", "other": "x"}, headers=harness.auth()
    )
    assert ok.status_code == 200


@pytest.mark.alone  # a bound on time
async def test_searchable_within_two_seconds_of_the_250(harness: Harness) -> None:
    box = await harness.new_mailbox()
    await harness.send(box["address"], message("Fresh", "A quokka smiled.\n"))
    sent = time.monotonic()
    async with asyncio.timeout(10):
        while not await listed(harness, box, q="quokka"):
            await asyncio.sleep(0.02)
    assert time.monotonic() - sent < 2


def index_rows(harness: Harness) -> int:
    settings = harness.server.settings
    if settings.is_postgres:
        with psycopg.connect(PG_URL, options=f"-csearch_path={settings.database_schema}") as conn:
            row = conn.execute("SELECT count(*) FROM message_search").fetchone()
            assert row is not None
            return int(row[0])
    with sqlite3.connect(settings.data_dir / "inboxd.sqlite3") as conn:
        (search_rows,) = conn.execute("SELECT count(*) FROM message_search").fetchone()
        (fts_rows,) = conn.execute("SELECT count(*) FROM message_fts").fetchone()
        assert search_rows == fts_rows
        return int(search_rows)


def indexed_words(harness: Harness) -> list[list[str]]:
    """The words the index holds for each message, as stored: FTS5's text on SQLite (which it
    keeps as it was given), the tsvector's lexemes on PostgreSQL."""
    settings = harness.server.settings
    if settings.is_postgres:
        with psycopg.connect(PG_URL, options=f"-csearch_path={settings.database_schema}") as conn:
            rows = conn.execute("SELECT tsvector_to_array(terms) FROM message_search").fetchall()
            return [list(r[0]) for r in rows]
    with sqlite3.connect(settings.data_dir / "inboxd.sqlite3") as conn:
        return [str(r[0]).split(" ") for r in conn.execute("SELECT terms FROM message_fts")]


async def test_the_index_holds_each_word_of_a_message_once(harness: Harness) -> None:
    """A page of repeated text is stored as its distinct words (the C word set on SQLite: FTS5
    would otherwise tokenize every repeat and keep the whole text), and found by any of them."""
    box = await harness.new_mailbox()
    body = "the code is 4242 and the code expires soon\n" * 80
    await harness.send(box["address"], message("Your code, again", body))
    await indexed(harness, box, 1)
    (stored,) = indexed_words(harness)
    assert len(stored) == len(set(stored))
    for word in ("the", "code", "4242", "expires", "soon", "your", "again", "alice", "example", "org"):
        assert word in stored
    assert await listed(harness, box, q="expires 4242") == ["Your code, again"]


def run_sql(harness: Harness, statements: dict[str, list[str]]) -> None:
    settings = harness.server.settings
    if settings.is_postgres:
        with psycopg.connect(PG_URL, options=f"-csearch_path={settings.database_schema}") as conn:
            for sql in statements["postgres"]:
                conn.execute(sql)
        return
    with sqlite3.connect(settings.data_dir / "inboxd.sqlite3") as conn:
        for sql in statements["sqlite"]:
            conn.execute(sql)


async def restart(harness: Harness) -> Inboxd:
    server = Inboxd(harness.server.settings, clock=harness.clock)
    await server.start()
    harness.extra.append(server)
    return server


async def found_by(server: Inboxd, harness: Harness, box: dict[str, Any], q: str) -> list[str]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.http_port}", timeout=30) as http:
        async with asyncio.timeout(10):
            while True:
                answer = await http.get(f"/api/accounts/{box['id']}/messages", params={"q": q}, headers=harness.auth())
                if answer.json()["messages"]:
                    return [m["subject"] for m in answer.json()["messages"]]
                await asyncio.sleep(0.05)


def unindex_everything(harness: Harness) -> None:
    """What a crash between commit and indexing leaves: stored mail the index has not seen."""
    settings = harness.server.settings
    statements = ["UPDATE messages SET indexed = 0", "DELETE FROM message_search"]
    if settings.is_postgres:
        with psycopg.connect(PG_URL, options=f"-csearch_path={settings.database_schema}") as conn:
            for sql in statements:
                conn.execute(sql)
        return
    with sqlite3.connect(settings.data_dir / "inboxd.sqlite3") as conn:
        for sql in [*statements, "DELETE FROM message_fts"]:
            conn.execute(sql)


async def test_deleted_mail_leaves_the_index_and_a_restart_catches_up(harness: Harness, make_settings: Any) -> None:
    box = await harness.new_mailbox()
    other = await harness.new_mailbox()
    await asyncio.to_thread(send_many, harness.server.smtp_port, box["address"], corpus())
    await asyncio.to_thread(send_many, harness.server.smtp_port, other["address"], corpus()[:2])
    await indexed(harness, box, 5)
    await indexed(harness, other, 2)
    assert index_rows(harness) == 7
    # Ingest handed each message's MIME walk to the indexer: none was read back to be parsed again.
    assert harness.server._indexer is not None
    assert (harness.server._indexer.handed, harness.server._indexer.read_back) == (7, 0)
    first = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())).json()
    victim = next(m for m in first["messages"] if m["subject"] == "Weekly digest")
    gone = await harness.http.delete(f"/api/accounts/{box['id']}/messages/{victim['id']}", headers=harness.auth())
    assert gone.status_code == 204
    assert index_rows(harness) == 6
    assert await listed(harness, box, q="zebra") == []
    removed = await harness.http.delete(f"/api/accounts/{other['id']}", headers=harness.auth())
    assert removed.status_code == 204
    assert index_rows(harness) == 4

    # Stop, lose the index, start again: the indexer takes the stored mail back in.
    await harness.server.stop()
    unindex_everything(harness)
    restarted = await restart(harness)
    assert await found_by(restarted, harness, box, "verif*") == ["Verify your account"]
    assert index_rows(harness) == 4
    # Mail the indexer finds by itself is read back from the database and parsed there.
    assert restarted._indexer is not None
    assert (restarted._indexer.handed, restarted._indexer.read_back) == (0, 4)

    # An index of another format (an older inboxd) is rebuilt at start.
    await restarted.stop()
    stale = "UPDATE meta SET value = '1' WHERE key = 'search_format'"
    run_sql(
        harness,
        {
            "sqlite": [stale, "DELETE FROM message_fts"],
            "postgres": [stale, "UPDATE message_search SET terms = to_tsvector('simple', 'stale')"],
        },
    )
    again = await restart(harness)
    assert await found_by(again, harness, box, "zoë") == ["Bestätigung Ihrer Anmeldung"]
    assert index_rows(harness) == 4


async def test_another_process_s_fresh_mail_is_left_to_it_until_settled(harness: Harness) -> None:
    """Processes on one database each index the mail they took (their ingest hands the ids to
    their indexer): another process's mail is parsed only once SETTLE seconds old, as when that
    process stopped before indexing it. So no message is parsed twice, and two indexers do not
    wait on each other's row locks."""
    from inboxd.worker.indexer import SETTLE, SearchIndexer

    server = harness.server
    assert server._indexer is not None and server._db is not None and server._bus is not None
    await server._indexer.stop()  # this process's indexer: stopped, so its mail stays waiting
    other = SearchIndexer(server._db, server._bus, clock=harness.clock)  # as in another process
    box = await harness.new_mailbox()
    await harness.send(box["address"], message("Left behind", "the quokka waits\n"))
    assert await other.index_pending() == 0  # fresh, and not its own
    harness.clock.advance(SETTLE + 1)
    assert await other.index_pending() == 1  # settled: taken in
    assert await listed(harness, box, q="quokka") == ["Left behind"]

    await harness.send(box["address"], message("Handed over", "the wombat digs\n"))
    (newest, *_) = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())).json()[
        "messages"
    ]
    assert await other.index_pending() == 0
    other.wake([newest["id"]])  # what its ingest does after a commit
    assert await other.index_pending() == 1
    assert await listed(harness, box, q="wombat") == ["Handed over"]


def test_the_walk_ingest_hands_over_indexes_as_the_stored_source_does() -> None:
    """The indexer's two ways to a document (the walk ingest took the summary from, or the
    compressed source read back and parsed again) give the same document."""
    for msg in [*corpus(), message("Big", "many words\n" * 200_000)]:
        raw = msg.as_bytes(policy=SMTP)
        source = search_index.Source(
            "m1", compress(raw), "subject", "from", "sender", "box@example.test", '["x@y.test"]'
        )
        pending = search_index.Pending("m1", "b1", len(raw), 1_700_000_000.0)
        walk = MessageWalk(bytearray(raw))
        walk.summary()
        assert build_doc(source, pending, walk) == build_doc(source, pending)


async def test_copies_of_one_delivery_are_each_indexed(harness: Harness) -> None:
    """One delivery to three mailboxes stores three copies in the same microsecond: each gets its
    own index row (SQLite keys them by time, the next free id for each copy)."""
    boxes = [await harness.new_mailbox() for _ in range(3)]
    await harness.send([b["address"] for b in boxes], message("Shared", "the platypus swims\n"))
    for box in boxes:
        async with asyncio.timeout(10):
            while await listed(harness, box, q="platypus") != ["Shared"]:
                await asyncio.sleep(0.05)
    assert index_rows(harness) == 3


async def test_a_handed_over_batch_is_claimed_without_a_read_and_skips_what_was_deleted(harness: Harness) -> None:
    """Mail ingest hands over whole (walk and row) is indexed without reading what is waiting:
    `save`'s claim alone decides, so a copy deleted before the indexer ran stays out of the index,
    and one another indexer took in meanwhile is not written twice. Mail left by others is found
    by the scan that comes at least every poll interval."""
    from inboxd.worker.indexer import POLL_INTERVAL, SETTLE, SearchIndexer

    server = harness.server
    assert server._indexer is not None and server._db is not None and server._bus is not None
    await server._indexer.stop()  # this process's own indexer: out of the way
    mine = SearchIndexer(server._db, server._bus, clock=harness.clock)
    # Ingest hands it everything but "Left behind", which stands for mail another process left.
    server.services.ingest.on_stored(lambda stored: mine.took([s for s in stored if s.source.subject != "Left behind"]))
    box = await harness.new_mailbox()
    await harness.send(box["address"], message("Left behind", "the axolotl waits\n"))
    harness.clock.advance(SETTLE - 1)
    assert await mine.index_pending() == 0  # a scan: the mail left behind is not settled yet
    for subject in ["Kept", "Deleted", "Taken by another"]:
        await harness.send(box["address"], message(subject, f"the axolotl of {subject}\n"))
    items = (await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())).json()["messages"]
    ids = {m["subject"]: m["id"] for m in items}
    gone = await harness.http.delete(f"/api/accounts/{box['id']}/messages/{ids['Deleted']}", headers=harness.auth())
    assert gone.status_code == 204
    other = SearchIndexer(server._db, server._bus, clock=harness.clock)
    other.wake([ids["Taken by another"]])
    assert await other.index_pending() == 1
    harness.clock.advance(2)  # the mail left behind is settled now (SETTLE + 1), the next scan not due

    # The three it was handed; a read would have given two: "Kept" and the settled "Left behind".
    assert await mine.index_pending() == 3
    assert (mine.handed, mine.read_back) == (3, 0)
    # (Not looked at through a list: a list on `q` would index "Left behind" itself first.)
    assert index_rows(harness) == 2
    harness.clock.advance(POLL_INTERVAL)
    assert await mine.index_pending() == 1  # the scan finds what was left behind
    assert (mine.handed, mine.read_back) == (3, 1)
    assert sorted(await listed(harness, box, q="axolotl")) == ["Kept", "Left behind", "Taken by another"]


async def test_copies_of_one_delivery_indexed_in_separate_batches_get_their_own_rows(harness: Harness) -> None:
    """The copies of one delivery share a microsecond, so their FTS5 rowids start from the same
    base; a copy indexed in a later batch than its siblings takes the next id the earlier batch
    left free."""
    from inboxd.worker.indexer import SearchIndexer

    server = harness.server
    assert server._indexer is not None and server._db is not None and server._bus is not None
    await server._indexer.stop()
    boxes = [await harness.new_mailbox() for _ in range(3)]
    await harness.send([b["address"] for b in boxes], message("Shared", "the pangolin rolls\n"))
    ids = []
    for box in boxes:
        answer = await harness.http.get(f"/api/accounts/{box['id']}/messages", headers=harness.auth())
        ids.append(answer.json()["messages"][0]["id"])
    mine = SearchIndexer(server._db, server._bus, clock=harness.clock)
    mine.wake(ids[:1])
    assert await mine.index_pending() == 1
    mine.wake(ids[1:])
    assert await mine.index_pending() == 2
    for box in boxes:
        assert await listed(harness, box, q="pangolin") == ["Shared"]
    assert index_rows(harness) == 3
