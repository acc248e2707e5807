"""`inboxd check FILE.eml` with DNS: DKIM and ARC verified over the suite's DNS server (a message
signed in the test, its key published there), SPF and DMARC reported as not run, exit status 1
when a signature fails; without `--dns` or INBOXD_DNS_NAMESERVERS authentication is skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dkim
import msgspec
import pytest

from inboxd.mail.checks.report import CheckReport
from tests.dns_server import DnsServerPair, FakeDns
from tests.test_checks_auth import key as key
from tests.test_checks_auth import message, publish_key, signed


@pytest.fixture
def zone() -> Iterator[DnsServerPair]:
    server = DnsServerPair(FakeDns())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "INBOXD_DNS_NAMESERVERS"}
    return subprocess.run(
        [sys.executable, "-m", "inboxd", "check", *args],
        env={**environment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def arc_sealed(raw: bytes, key: tuple[bytes, str]) -> bytes:
    """`raw` as a forwarder at mx.example.org would pass it on: its verdict, then an ARC set."""
    raw = b"Authentication-Results: mx.example.org; dkim=pass header.d=example.org\r\n" + raw
    sealed = dkim.arc_sign(raw, b"s1", b"example.org", key[0], b"mx.example.org")
    return b"".join(sealed) + raw


def test_a_signed_file_passes_dkim_and_arc(zone: DnsServerPair, key: tuple[bytes, str], tmp_path: Path) -> None:
    publish_key(zone.zone, key, "s1._domainkey.example.org")
    path = tmp_path / "signed.eml"
    path.write_bytes(arc_sealed(signed(message(), key), key))
    done = check("--json", "--dns", zone.address, str(path))
    report = msgspec.json.decode(done.stdout, type=CheckReport)
    assert [(d.domain, d.selector, d.result, d.body_hash) for d in report.auth.dkim] == [
        ("example.org", "s1", "pass", "pass")
    ]
    assert report.auth.arc is not None and (report.auth.arc.result, report.auth.arc.instances) == ("pass", 1)
    assert report.auth.spf is None and report.auth.dmarc is None
    (not_run,) = [f for f in report.auth.findings if f.code == "spf_not_checked"]
    assert not_run.severity == "info" and "SPF and DMARC were not run" in not_run.message
    assert report.auth.verdict == "ok" and "dkim=pass" in report.auth.authentication_results
    assert done.returncode == (1 if report.verdict == "error" else 0), done.stderr

    # The same through INBOXD_DNS_NAMESERVERS, as text.
    text = check(str(path), env={"INBOXD_DNS_NAMESERVERS": zone.address})
    assert "auth     ok: DKIM pass (d=example.org s=s1); ARC pass; SPF not run; DMARC not run" in text.stdout


def test_a_body_changed_after_signing_fails_with_exit_1(
    zone: DnsServerPair, key: tuple[bytes, str], tmp_path: Path
) -> None:
    publish_key(zone.zone, key, "s1._domainkey.example.org")
    path = tmp_path / "changed.eml"
    path.write_bytes(signed(message(), key).replace(b"has shipped", b"was cancelled"))
    done = check("--dns", zone.address, str(path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "auth/dkim_fail [s1._domainkey.example.org]" in done.stdout
    assert "body hash mismatch" in done.stdout


def test_without_dns_authentication_is_skipped(key: tuple[bytes, str], tmp_path: Path) -> None:
    path = tmp_path / "signed.eml"
    path.write_bytes(signed(message(), key))
    done = check("--json", str(path))
    report = msgspec.json.decode(done.stdout, type=CheckReport)
    assert report.auth.verdict == "skipped" and "--dns" in report.auth.reason
    assert report.auth.dkim == []
