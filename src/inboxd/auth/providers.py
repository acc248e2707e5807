"""The identity providers an operator configured: GitHub, Google, and one generic OIDC issuer."""

from __future__ import annotations

from dataclasses import dataclass

from inboxd.config import Settings

PROVIDER_KEYS = ("github", "google", "oidc")


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    key: str
    label: str


def configured(settings: Settings) -> list[ProviderInfo]:
    found: list[ProviderInfo] = []
    if settings.github_client_id:
        found.append(ProviderInfo("github", "GitHub"))
    if settings.google_client_id:
        found.append(ProviderInfo("google", "Google"))
    if settings.oidc_issuer and settings.oidc_client_id:
        found.append(ProviderInfo("oidc", settings.oidc_name))
    return found
