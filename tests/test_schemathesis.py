"""schemathesis over /api/openapi.json against a live `inboxd serve` on SQLite: every answer
conforms to the document (status, content type, headers, body schema) and none is a 5xx."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import positive_data_acceptance

LISTENING = re.compile(r"HTTP on (http://[^ ]+)\s+SMTP on [^:]+:(\d+)")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("schemathesis")
    env = {
        **os.environ,
        "INBOXD_DATA_DIR": str(data),
        "INBOXD_HTTP_PORT": "0",
        "INBOXD_SMTP_PORT": "0",
        "INBOXD_SUBMISSION_PORT": "0",
        "INBOXD_LOG_LEVEL": "warning",
        # Generated requests come fast: the limits are tested elsewhere.
        "INBOXD_PRO_RPS": "100000",
        "INBOXD_FREE_RPS": "100000",
        "INBOXD_PUBLIC_RPS": "100000",
        "INBOXD_PRO_CREATE_INTERVAL": "0",
        "INBOXD_FREE_CREATE_INTERVAL": "0",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "inboxd", "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    base = ""
    for line in proc.stdout:
        found = LISTENING.search(line)
        if found:
            base = found.group(1)
            break
    assert base, "inboxd did not start"
    token = (data / "bootstrap-token").read_text().strip()
    try:
        yield {"base_url": base, "token": token}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# Data the document admits but the service refuses (an address on a domain inboxd does not serve,
# a password under 6 characters) answers 400: the document describes types, not every rule.
LOOSE = [positive_data_acceptance]
SETTINGS = hypothesis.settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck),
    derandomize=True,
    database=None,
    phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
)


def test_api_conforms_to_its_document(live: dict[str, Any]) -> None:
    """Every operation, a few generated cases each (schemathesis' default checks)."""
    schema = schemathesis.openapi.from_url(live["base_url"] + "/api/openapi.json")
    headers = {"Authorization": f"Bearer {live['token']}"}
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]  # an invalid operation raises here
        operations += 1

        @SETTINGS
        @hypothesis.given(case=operation.as_strategy())
        def check(case: Any) -> None:
            if case.path.endswith("/wait"):
                # A long poll waits its timeout out (30 s by default): keep the run short.
                case.query = {**(case.query or {}), "timeout": 0.2}
            case.call_and_validate(base_url=live["base_url"], headers=headers, excluded_checks=LOOSE)

        try:
            check()
        except (Exception, BaseExceptionGroup) as exc:
            failures.append(f"{operation.label}: {exc}"[:2000])
    assert operations > 30
    assert not failures, "\n\n".join(failures)


def test_the_document_names_the_paths_it_is_run_over(tmp_path: Path) -> None:
    """The parametrized test above is not vacuous: the document it runs over has the API in it."""
    from inboxd.api.app import api_routes
    from inboxd.api.openapi import build_document

    paths = build_document(api_routes(), base_url="http://x", version="1")["paths"]
    assert "/api/accounts/{mailbox}/messages" in paths and len(paths) > 30
