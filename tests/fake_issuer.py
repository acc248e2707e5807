"""A deliberately faulty OpenID Connect issuer, faked at its transport (a local HTTP server).

The real provider for the happy paths is `oidc-provider` (tests/identity_providers.py); this one
exists to sign ID tokens that must be refused: for another audience, from another issuer, with
another key, expired, with another nonce, or a token endpoint that answers garbage. `mode` picks
the fault; "ok" signs a correct token, so each test can show that only the fault is refused.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

MODES = ("ok", "audience", "audience-azp", "issuer", "signature", "expired", "nonce", "garbage")


class FaultyIssuer:
    def __init__(self, client_id: str = "faulty-client", client_secret: str = "faulty-secret") -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.mode = "ok"
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._grants: dict[str, str] = {}  # code → nonce
        self._lock = threading.Lock()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                issuer._get(self)

            def do_POST(self) -> None:
                issuer._post(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.issuer = f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _get(self, req: BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(req.path)
        if parsed.path == "/.well-known/openid-configuration":
            self._json(
                req,
                {
                    "issuer": self.issuer,
                    "authorization_endpoint": f"{self.issuer}/authorize",
                    "token_endpoint": f"{self.issuer}/token",
                    "jwks_uri": f"{self.issuer}/jwks",
                    "userinfo_endpoint": f"{self.issuer}/userinfo",
                    "response_types_supported": ["code"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": ["RS256"],
                },
            )
        elif parsed.path == "/jwks":
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
            self._json(req, {"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]})
        elif parsed.path == "/authorize":
            query = dict(urllib.parse.parse_qsl(parsed.query))
            code = secrets.token_hex(8)
            with self._lock:
                self._grants[code] = query.get("nonce", "")
            back = urllib.parse.urlencode({"code": code, "state": query.get("state", "")})
            req.send_response(HTTPStatus.FOUND)
            req.send_header("Location", f"{query['redirect_uri']}?{back}")
            req.send_header("Content-Length", "0")
            req.end_headers()
        else:
            self._json(req, {"error": "not_found"}, HTTPStatus.NOT_FOUND)

    def _post(self, req: BaseHTTPRequestHandler) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        form = dict(urllib.parse.parse_qsl(req.rfile.read(length).decode()))
        with self._lock:
            nonce = self._grants.pop(form.get("code", ""), None)
        if nonce is None:
            self._json(req, {"error": "invalid_grant"}, HTTPStatus.BAD_REQUEST)
            return
        if self.mode == "garbage":
            body = b"<html><body>502 Bad Gateway</body></html>"
            req.send_response(HTTPStatus.OK)
            req.send_header("Content-Type", "text/html")
            req.send_header("Content-Length", str(len(body)))
            req.end_headers()
            req.wfile.write(body)
            return
        now = int(time.time())
        claims = {
            "iss": "https://elsewhere.example" if self.mode == "issuer" else self.issuer,
            "aud": "someone-else" if self.mode.startswith("audience") else self.client_id,
            "sub": "faulty-subject",
            "email": "mallory@example.com",
            "email_verified": True,
            "nonce": "another-nonce" if self.mode == "nonce" else nonce,
            "iat": now - (7200 if self.mode == "expired" else 0),
            "exp": now - 3600 if self.mode == "expired" else now + 600,
        }
        if self.mode == "audience-azp":  # names us as the authorized party, but is not for us
            claims["azp"] = self.client_id
        key = self._other_key if self.mode == "signature" else self._key
        id_token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
        self._json(req, {"access_token": secrets.token_hex(8), "token_type": "Bearer", "id_token": id_token})

    @staticmethod
    def _json(req: BaseHTTPRequestHandler, body: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        data = json.dumps(body).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)
