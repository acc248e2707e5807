"""The sign-in rules of services/sign_in.py on both back ends: which identities link by themselves,
linking from a signed-in session, and unlinking that never leaves a user without a way to sign in."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from inboxd.app import Inboxd
from inboxd.errors import Conflict, NotFound, SignInRefused
from inboxd.services.sign_in import VouchedIdentity
from tests.conftest import Clock


@pytest.fixture
async def server(make_settings: Any, clock: Clock) -> AsyncIterator[Inboxd]:
    """An inboxd offering GitHub and a generic OIDC issuer (never contacted here), not Google."""
    settings = make_settings(
        github_client_id="gh",
        github_client_secret="gh-secret",
        oidc_issuer="http://127.0.0.1:9",
        oidc_client_id="oidc",
        oidc_client_secret="oidc-secret",
    )
    started = Inboxd(settings, clock=clock)
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


def vouched(provider: str, subject: str, email: str = "carol@example.com") -> VouchedIdentity:
    return VouchedIdentity(provider=provider, subject=subject, email=email, email_verified=True)


async def test_an_admin_is_never_linked_by_email_alone(server: Inboxd) -> None:
    sign_in, users = server.services.sign_in, server.services.users
    admin = await users.create_user("root@example.com", plan="pro", role="admin")
    with pytest.raises(SignInRefused) as refused:
        await sign_in.sign_in_identity(vouched("github", "7", "Root@Example.com"))
    assert refused.value.code == "link_required" and "account page" in refused.value.message
    assert await sign_in.identities(admin) == []

    # Linked from the admin's session, the same provider account signs the admin in.
    await sign_in.link_identity(admin, vouched("github", "7", "someone-else@example.org"))
    assert (await sign_in.sign_in_identity(vouched("github", "7", "root@example.com"))).id == admin.id

    # A user who is not an admin is still linked by a verified email.
    carol = await users.create_user("carol@example.com", plan="free")
    assert (await sign_in.sign_in_identity(vouched("oidc", "carol"))).id == carol.id
    # A provider account reaches one user only.
    with pytest.raises(Conflict) as taken:
        await sign_in.link_identity(carol, vouched("github", "7"))
    assert taken.value.code == "identity_taken"


async def test_unlinking_keeps_a_way_to_sign_in(server: Inboxd) -> None:
    sign_in = server.services.sign_in
    carol = await server.services.users.create_user("carol@example.com", plan="free")
    await sign_in.link_identity(carol, vouched("github", "carol-gh"))
    await sign_in.link_identity(carol, vouched("oidc", "carol-oidc"))
    # Google is not offered by this server any more: its identity signs nobody in, and counts for nothing.
    await sign_in.link_identity(carol, vouched("google", "carol-old"))

    await sign_in.unlink_identity(carol, provider="github", subject="carol-gh")
    with pytest.raises(Conflict) as refused:
        await sign_in.unlink_identity(carol, provider="oidc", subject="carol-oidc")
    assert refused.value.code == "last_sign_in" and "Link another provider first" in refused.value.message
    assert sorted(i.provider for i in await sign_in.identities(carol)) == ["google", "oidc"]

    await sign_in.unlink_identity(carol, provider="google", subject="carol-old")  # not a way in: allowed
    assert [i.provider for i in await sign_in.identities(carol)] == ["oidc"]
    other = await server.services.users.create_user("dave@example.com", plan="free")
    with pytest.raises(NotFound):  # only one's own
        await sign_in.unlink_identity(other, provider="oidc", subject="carol-oidc")
