"""Settings from the environment: types, lists, secrets from files, and errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from inboxd.config import Settings, SettingsError, load_settings, options, replace


def test_environment_values_take_the_declared_types(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("INBOXD_HTTP_PORT", "9000")
    monkeypatch.setenv("INBOXD_DNS_TIMEOUT", "2.5")
    monkeypatch.setenv("INBOXD_WEBHOOK_ALLOW_HTTP", "yes")
    monkeypatch.setenv("INBOXD_PUBLIC_DOMAINS", "Mail.Example.COM., other.org")
    monkeypatch.setenv("INBOXD_WEBHOOK_RETRY_SCHEDULE", "0, 5,60")
    monkeypatch.setenv("INBOXD_SIGNUP_ALLOW", "@Example.com")
    monkeypatch.setenv("INBOXD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("INBOXD_SUBMISSIONS_PORT", "")
    monkeypatch.setenv("INBOXD_NOT_AN_OPTION", "ignored")
    settings = load_settings(smtp_port=2600)
    assert settings.http_port == 9000 and settings.dns_timeout == 2.5
    assert settings.webhook_allow_http is True
    assert settings.public_domains == ["mail.example.com", "other.org"]
    assert settings.webhook_retry_schedule == [0.0, 5.0, 60.0]
    assert settings.signup_allow == ["example.com"]
    assert settings.data_dir == tmp_path and isinstance(settings.data_dir, Path)
    assert settings.submissions_port is None
    assert settings.smtp_port == 2600  # keyword overrides win over the environment


def test_a_secret_file_wins_over_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("from-the-file\n")
    monkeypatch.setenv("INBOXD_METRICS_TOKEN", "from-the-variable")
    monkeypatch.setenv("INBOXD_METRICS_TOKEN_FILE", str(secret))
    monkeypatch.setenv("INBOXD_WEBHOOK_CA_FILE", "/etc/ssl/ca.pem")  # an option, not a secret file
    settings = load_settings()
    assert settings.metrics_token == "from-the-file"
    assert settings.webhook_ca_file == "/etc/ssl/ca.pem"


@pytest.mark.parametrize(
    ("name", "value"),
    [("INBOXD_HTTP_PORT", "eighty"), ("INBOXD_WEBHOOK_ALLOW_HTTP", "perhaps"), ("INBOXD_SIGNUP_PLAN", "gold")],
)
def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=name):
        load_settings()


def test_keyword_arguments_are_normalised_like_the_environment() -> None:
    settings = Settings(data_dir="relative", public_domains="A.example.")  # type: ignore[arg-type]
    assert settings.data_dir == Path("relative") and settings.public_domains == ["a.example"]
    changed = replace(settings, http_port=1)
    assert changed.http_port == 1 and settings.http_port == 8025
    with pytest.raises(AttributeError):
        settings.http_port = 2  # type: ignore[misc]
    assert "http_port" in options() and "secret_key" in options()
