"""The sign-in tests' identity providers work as the real ones do: a full code flow against each."""

from __future__ import annotations

import base64
import hashlib
import html
import re
import secrets
import urllib.parse
from collections.abc import Iterator

import httpx
import jwt
import pytest

from tests.identity_providers import FakeGitHub, OidcClient, OidcProvider

REDIRECT = "http://127.0.0.1:9/auth/oidc/callback"


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


@pytest.fixture(scope="module")
def oidc() -> Iterator[OidcProvider]:
    accounts = {"alice": {"email": "alice@example.com", "email_verified": True, "name": "Alice"}}
    with OidcProvider([OidcClient("inboxd-test", "s3cret", [REDIRECT])], accounts) as provider:
        yield provider


def _code_flow(oidc: OidcProvider, login: str, nonce: str, challenge: str) -> str:
    """Drive the provider's pages as a browser would; return the authorization code."""
    with httpx.Client(follow_redirects=False, timeout=10) as browser:
        meta = browser.get(oidc.discovery_url).json()
        params = {
            "client_id": "inboxd-test",
            "redirect_uri": REDIRECT,
            "response_type": "code",
            "scope": "openid email profile",
            "state": "st4te",
            "nonce": nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        response = browser.get(meta["authorization_endpoint"], params=params)
        while response.status_code in (302, 303):
            location = urllib.parse.urljoin(str(response.url), response.headers["location"])
            if location.startswith(REDIRECT):
                break
            response = browser.get(location)
            if response.status_code == 200 and 'name="login"' in response.text:
                action = html.unescape(re.search(r'<form[^>]*action="([^"]+)"', response.text).group(1))  # type: ignore[union-attr]
                response = browser.post(
                    urllib.parse.urljoin(str(response.url), action),
                    data={"prompt": "login", "login": login, "password": "x"},
                )
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
        assert query.get("state") == "st4te", query
        return query["code"]


def test_oidc_provider_issues_verifiable_id_tokens(oidc: OidcProvider) -> None:
    meta = httpx.get(oidc.discovery_url, timeout=10).json()
    assert meta["issuer"] == oidc.issuer
    verifier, challenge = _pkce()
    code = _code_flow(oidc, "alice", "n0nce", challenge)
    tokens = httpx.post(
        meta["token_endpoint"],
        data={"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "code_verifier": verifier},
        auth=("inboxd-test", "s3cret"),
        timeout=10,
    ).json()
    key = jwt.PyJWKClient(meta["jwks_uri"]).get_signing_key_from_jwt(tokens["id_token"])
    claims = jwt.decode(tokens["id_token"], key, algorithms=["RS256"], audience="inboxd-test", issuer=oidc.issuer)
    assert claims["sub"] == "alice"
    assert claims["nonce"] == "n0nce"
    assert claims["email"] == "alice@example.com"
    assert claims["email_verified"] is True
    # The code is single use: a replay is refused by the real provider.
    replay = httpx.post(
        meta["token_endpoint"],
        data={"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "code_verifier": verifier},
        auth=("inboxd-test", "s3cret"),
        timeout=10,
    )
    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"


def test_oidc_provider_accounts_change_while_running(oidc: OidcProvider) -> None:
    oidc.set_account("bob", {"email": "bob@example.com", "email_verified": False})
    verifier, challenge = _pkce()
    code = _code_flow(oidc, "bob", "n2", challenge)
    meta = httpx.get(oidc.discovery_url, timeout=10).json()
    tokens = httpx.post(
        meta["token_endpoint"],
        data={"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "code_verifier": verifier},
        auth=("inboxd-test", "s3cret"),
        timeout=10,
    ).json()
    claims = jwt.decode(tokens["id_token"], options={"verify_signature": False})
    assert claims["email"] == "bob@example.com"
    assert claims["email_verified"] is False


def test_fake_github_speaks_the_oauth_flow() -> None:
    with FakeGitHub() as github, httpx.Client(timeout=10) as client:
        verifier, challenge = _pkce()
        redirect = "http://127.0.0.1:9/auth/github/callback"
        authorize = client.get(
            f"{github.url}/login/oauth/authorize",
            params={
                "client_id": github.client_id,
                "redirect_uri": redirect,
                "state": "s1",
                "code_challenge": challenge,
            },
        )
        assert authorize.status_code == 302
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(authorize.headers["location"]).query))
        assert query["state"] == "s1"
        form = {
            "client_id": github.client_id,
            "client_secret": github.client_secret,
            "code": query["code"],
            "redirect_uri": redirect,
            "code_verifier": verifier,
        }
        token = client.post(f"{github.url}/login/oauth/access_token", data=form, headers={"Accept": "application/json"})
        access = token.json()["access_token"]
        headers = {"Authorization": f"Bearer {access}"}
        assert client.get(f"{github.api_url}/user", headers=headers).json()["login"] == "octocat"
        emails = client.get(f"{github.api_url}/user/emails", headers=headers).json()
        assert emails[0] == {"email": "octocat@example.com", "primary": True, "verified": True, "visibility": "public"}
        # Single-use codes, and the API refuses unknown tokens.
        again = client.post(f"{github.url}/login/oauth/access_token", data=form).json()
        assert again == {"error": "bad_verification_code"}
        assert client.get(f"{github.api_url}/user", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_fake_github_checks_pkce_and_can_deny_or_break() -> None:
    with FakeGitHub() as github, httpx.Client(timeout=10) as client:
        redirect = "http://127.0.0.1:9/cb"
        _, challenge = _pkce()
        location = client.get(
            f"{github.url}/login/oauth/authorize",
            params={"client_id": github.client_id, "redirect_uri": redirect, "code_challenge": challenge},
        ).headers["location"]
        code = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))["code"]
        wrong = client.post(
            f"{github.url}/login/oauth/access_token",
            data={"code": code, "code_verifier": "wrong", "redirect_uri": redirect},
            auth=(github.client_id, github.client_secret),
        ).json()
        assert wrong == {"error": "bad_verification_code"}
        github.deny = True
        denied = client.get(
            f"{github.url}/login/oauth/authorize",
            params={"client_id": github.client_id, "redirect_uri": redirect, "state": "z"},
        ).headers["location"]
        assert "error=access_denied" in denied and "state=z" in denied
        github.garbage = True
        assert client.get(f"{github.api_url}/user").headers["content-type"] == "text/html"
