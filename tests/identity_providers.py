"""Real identity providers for the sign-in tests, on 127.0.0.1.

- `OidcProvider`: the npm package `oidc-provider` (tests/idp/, installed by `make test`), a real
  OpenID Connect issuer with discovery, JWKS, PKCE and signed ID tokens. It stands in for Google and
  for any generic issuer (Keycloak, Dex, ...).
- `FakeGitHub`: GitHub is not an OIDC issuer, so it is faked at its transport: a small HTTP server
  that speaks GitHub's OAuth endpoints (`/login/oauth/authorize`, `/login/oauth/access_token`) and
  the REST API's `/user` and `/user/emails` under `/api/v3`, as GitHub Enterprise lays them out.

Both run until `stop()` (or the end of a `with` block) and are safe to use from sync and async tests.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import subprocess
import tempfile
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

IDP_DIR = Path(__file__).parent / "idp"


@dataclass(frozen=True)
class OidcClient:
    """A client registered at the provider: what inboxd is configured with."""

    client_id: str
    client_secret: str
    redirect_uris: Sequence[str]


class OidcProvider:
    """`oidc-provider` in a Node subprocess.

    `accounts` maps a login name to its claims, e.g.
    `{"alice": {"email": "alice@example.com", "email_verified": True, "name": "Alice"}}`; the login
    name is also the subject (`sub`). The provider's sign-in page is a form with the inputs
    `login` and `password` (any password) and a submit button; consent is granted automatically.
    """

    def __init__(self, clients: Sequence[OidcClient], accounts: Mapping[str, Mapping[str, Any]]) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="inboxd-idp-")
        self._accounts_file = Path(self._dir.name) / "accounts.json"
        self._accounts: dict[str, dict[str, Any]] = {k: dict(v) for k, v in accounts.items()}
        self._write_accounts()
        config_file = Path(self._dir.name) / "config.json"
        config_file.write_text(
            json.dumps(
                {
                    "clients": [
                        {
                            "client_id": c.client_id,
                            "client_secret": c.client_secret,
                            "redirect_uris": list(c.redirect_uris),
                        }
                        for c in clients
                    ],
                    "accounts_file": str(self._accounts_file),
                }
            )
        )
        script = IDP_DIR / "oidc_provider.mjs"
        if not (IDP_DIR / "node_modules" / "oidc-provider").is_dir():
            raise RuntimeError("oidc-provider is not installed: run `make test` (it runs npm ci in tests/idp)")
        self._proc = subprocess.Popen(
            ["node", str(script), str(config_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._proc.kill()
            raise RuntimeError("oidc-provider exited before it listened")
        self.issuer: str = json.loads(line)["issuer"]

    def _write_accounts(self) -> None:
        tmp = self._accounts_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._accounts))
        tmp.replace(self._accounts_file)

    def set_account(self, login: str, claims: Mapping[str, Any]) -> None:
        """Add or replace an account; takes effect on the next sign-in."""
        self._accounts[login] = dict(claims)
        self._write_accounts()

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._dir.cleanup()

    def __enter__(self) -> OidcProvider:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


class _Page(Protocol):
    """The part of a Playwright sync `Page` that `sign_in_at_provider` uses."""

    def fill(self, selector: str, value: str) -> None: ...
    def click(self, selector: str) -> None: ...


def sign_in_at_provider(page: _Page, login: str) -> None:
    """Complete `OidcProvider`'s sign-in form in a browser page that was redirected to it."""
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "any-password")
    page.click("button[type=submit]")


@dataclass
class _Grant:
    client_id: str
    redirect_uri: str
    code_challenge: str | None


@dataclass
class FakeGitHub:
    """GitHub's OAuth and user API at their transport, for `INBOXD_GITHUB_URL` / `INBOXD_GITHUB_API_URL`.

    `/login/oauth/authorize` answers at once with a redirect back (as GitHub does for an app the user
    already authorized), carrying a single-use code and the caller's `state`. The token endpoint
    checks the client credentials, the code, the redirect URI and, when the authorize request sent a
    `code_challenge`, the PKCE verifier; errors come back as GitHub sends them (HTTP 200 with an
    `error` field). Set `deny = True` to make authorize redirect with `error=access_denied`, and
    `garbage = True` to make every endpoint answer a non-JSON body.
    """

    client_id: str = "github-client-id"
    client_secret: str = "github-client-secret"
    user: dict[str, Any] = field(
        default_factory=lambda: {"id": 583231, "login": "octocat", "name": "The Octocat", "email": None}
    )
    emails: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {"email": "octocat@example.com", "primary": True, "verified": True, "visibility": "public"}
        ]
    )
    deny: bool = False
    garbage: bool = False
    requests: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._grants: dict[str, _Grant] = {}
        self._tokens: set[str] = set()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.api_url = f"{self.url}/api/v3"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> FakeGitHub:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- the endpoints --

    def _handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        parsed = urllib.parse.urlsplit(req.path)
        self.requests.append(f"{method} {parsed.path}")
        if self.garbage:
            self._send(req, HTTPStatus.OK, b"<html>Unicorn! This page is taking too long</html>", "text/html")
            return
        query = dict(urllib.parse.parse_qsl(parsed.query))
        if method == "GET" and parsed.path == "/login/oauth/authorize":
            self._authorize(req, query)
        elif method == "POST" and parsed.path == "/login/oauth/access_token":
            length = int(req.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(req.rfile.read(length).decode()))
            self._access_token(req, form)
        elif method == "GET" and parsed.path in ("/api/v3/user", "/api/v3/user/emails"):
            auth = req.headers.get("Authorization", "")
            scheme, _, token = auth.partition(" ")
            with self._lock:
                known = token in self._tokens
            if scheme.lower() not in ("bearer", "token") or not known:
                self._json(req, HTTPStatus.UNAUTHORIZED, {"message": "Bad credentials"})
            elif parsed.path.endswith("/emails"):
                self._json(req, HTTPStatus.OK, self.emails)
            else:
                self._json(req, HTTPStatus.OK, self.user)
        else:
            self._json(req, HTTPStatus.NOT_FOUND, {"message": "Not Found"})

    def _authorize(self, req: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        redirect_uri = query.get("redirect_uri", "")
        if query.get("client_id") != self.client_id or not redirect_uri:
            self._send(req, HTTPStatus.NOT_FOUND, b"unknown application", "text/plain")
            return
        params: dict[str, str]
        if self.deny:
            params = {"error": "access_denied", "error_description": "The user has denied your application access."}
        else:
            code = secrets.token_hex(10)
            with self._lock:
                self._grants[code] = _Grant(self.client_id, redirect_uri, query.get("code_challenge"))
            params = {"code": code}
        if "state" in query:
            params["state"] = query["state"]
        sep = "&" if "?" in redirect_uri else "?"
        req.send_response(HTTPStatus.FOUND)
        req.send_header("Location", f"{redirect_uri}{sep}{urllib.parse.urlencode(params)}")
        req.send_header("Content-Length", "0")
        req.end_headers()

    def _access_token(self, req: BaseHTTPRequestHandler, form: dict[str, str]) -> None:
        client_id, client_secret = form.get("client_id"), form.get("client_secret")
        auth = req.headers.get("Authorization", "")
        if auth.lower().startswith("basic "):
            decoded = base64.b64decode(auth[6:]).decode()
            client_id, _, client_secret = decoded.partition(":")
            client_id, client_secret = urllib.parse.unquote(client_id), urllib.parse.unquote(client_secret)
        if client_id != self.client_id or client_secret != self.client_secret:
            self._json(req, HTTPStatus.OK, {"error": "incorrect_client_credentials"})
            return
        with self._lock:
            grant = self._grants.pop(form.get("code", ""), None)
        if grant is None or grant.redirect_uri != form.get("redirect_uri", grant.redirect_uri):
            self._json(req, HTTPStatus.OK, {"error": "bad_verification_code"})
            return
        if grant.code_challenge is not None:
            verifier = form.get("code_verifier", "")
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if digest != grant.code_challenge:
                self._json(req, HTTPStatus.OK, {"error": "bad_verification_code"})
                return
        token = "gho_" + secrets.token_hex(16)
        with self._lock:
            self._tokens.add(token)
        self._json(req, HTTPStatus.OK, {"access_token": token, "token_type": "bearer", "scope": "read:user,user:email"})

    @staticmethod
    def _json(req: BaseHTTPRequestHandler, status: HTTPStatus, body: Any) -> None:
        FakeGitHub._send(req, status, json.dumps(body).encode(), "application/json; charset=utf-8")

    @staticmethod
    def _send(req: BaseHTTPRequestHandler, status: HTTPStatus, body: bytes, content_type: str) -> None:
        req.send_response(status)
        req.send_header("Content-Type", content_type)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)
