"""The users' store: the email search takes the query's text as it is (LIKE's wildcards and its
escape character match only themselves) and walks the matches by email."""

from __future__ import annotations

from tests.conftest import Harness


async def test_user_search_takes_wildcards_literally(harness: Harness) -> None:
    users = harness.server.services.users
    for email in ("a_b@x.test", "axb@x.test", "c%d@x.test", "cd@x.test", "e\\f@x.test", "ef@x.test"):
        await users.create_user(email)

    async def found(query: str, after: str = "") -> list[str]:
        return [u.email for u in await users.search(query, after=after)]

    assert await found("a_b") == ["a_b@x.test"]
    assert await found("c%d") == ["c%d@x.test"]
    assert await found("e\\f") == ["e\\f@x.test"]
    assert await found("b@X.TEST") == ["a_b@x.test", "axb@x.test"]
    assert await found("@x.test", after="cd@x.test") == ["e\\f@x.test", "ef@x.test"]
