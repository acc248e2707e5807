"""The `inboxd` command line on users and tokens, run as a real process against the database of a
running inboxd, whose API then answers by the plan and status the CLI set."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from inboxd.services.users import AUTH_TTL
from tests.conftest import Harness


async def cli(h: Harness, *args: str) -> subprocess.CompletedProcess[str]:
    settings = h.server.settings
    env = {**os.environ, "INBOXD_DATA_DIR": str(settings.data_dir)}
    if settings.is_postgres:
        env.update(INBOXD_DATABASE_URL=settings.database_url, INBOXD_DATABASE_SCHEMA=settings.database_schema)
    else:
        env.pop("INBOXD_DATABASE_URL", None)
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "inboxd", *args], env=env, capture_output=True, text=True, timeout=60
    )


def settle(h: Harness) -> None:
    """A running server sees a CLI change once what it kept of the token is AUTH_TTL old: the CLI
    has no way to announce it (services/users.py)."""
    h.clock.advance(AUTH_TTL)


async def test_cli_creates_users_and_tokens_and_sets_plan_and_status(harness: Harness) -> None:
    created = await cli(harness, "users", "create", "--email", "Ops@Example.test", "--plan", "pro")
    assert created.returncode == 0, created.stderr
    assert "ops@example.test" in created.stdout

    made = await cli(harness, "tokens", "create", "--email", "ops@example.test", "--name", "deploy")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    assert token.startswith("ibx_") and len(token) == 47

    me = await harness.http.get("/api/user/me", headers=harness.auth(token))
    assert me.status_code == 200 and me.json()["plan"] == "pro" and me.json()["email"] == "ops@example.test"
    names = [
        t["name"] for t in (await harness.http.get("/api/user/tokens", headers=harness.auth(token))).json()["tokens"]
    ]
    assert names == ["deploy"]

    assert (await cli(harness, "users", "set", "--email", "ops@example.test", "--plan", "free")).returncode == 0
    settle(harness)
    free = await harness.http.get("/api/user/me", headers=harness.auth(token))
    assert free.status_code == 403 and free.json()["error"] == "pro_required"

    suspended = await cli(harness, "users", "set", "--email", "ops@example.test", "--status", "suspended")
    assert suspended.returncode == 0 and "status=suspended" in suspended.stdout
    settle(harness)
    blocked = await harness.http.get("/api/user/me", headers=harness.auth(token))
    assert blocked.status_code == 401 and blocked.json()["error"] == "account_revoked"

    back = await cli(harness, "users", "set", "--email", "ops@example.test", "--plan", "pro", "--status", "active")
    assert back.returncode == 0 and "plan=pro status=active" in back.stdout
    settle(harness)
    assert (await harness.http.get("/api/user/me", headers=harness.auth(token))).status_code == 200


async def test_cli_refuses_bad_input(harness: Harness) -> None:
    unknown = await cli(harness, "users", "set", "--email", "nobody@example.test", "--plan", "pro")
    assert unknown.returncode != 0 and "nobody@example.test" in unknown.stderr
    bad_plan = await cli(harness, "users", "set", "--email", "admin@localhost", "--plan", "gold")
    assert bad_plan.returncode != 0
    duplicate = await cli(harness, "users", "create", "--email", "admin@localhost")
    assert duplicate.returncode != 0
