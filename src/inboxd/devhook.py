"""`python -m inboxd.devhook`: a webhook receiver for local development, in one command.

It registers itself as a webhook of the local inboxd (`http://127.0.0.1:<port>/`, which needs
`INBOXD_WEBHOOK_ALLOW_HTTP=true` and `INBOXD_WEBHOOK_ALLOW_PRIVATE=true` on that inboxd), makes
sure the mailbox `hook@<first public domain>` exists, then prints each delivery after checking
its signature with `inboxd.webhooks.verify`. Standard library plus inboxd only.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from inboxd.webhooks import VerificationError, verify


def _call(api: str, token: str, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(api + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--api", default="http://127.0.0.1:8025", help="the inboxd to register with")
    parser.add_argument("--port", type=int, default=8787, help="port to receive deliveries on")
    parser.add_argument("--token-file", default="data/bootstrap-token", help="file holding a Pro API token")
    parser.add_argument("--once", action="store_true", help="exit after the first verified delivery")
    args = parser.parse_args(argv)
    token = Path(args.token_file).read_text().strip()
    api = args.api.rstrip("/")
    status, domains = _call(api, token, "GET", "/api/domains")
    address = f"hook@{domains['domains'][0]['domain']}"
    status, _ = _call(api, token, "POST", "/api/accounts", {"address": address, "password": "devhook-secret"})
    if status not in (201, 409):
        print(f"devhook: could not create {address} (HTTP {status})", file=sys.stderr)
        return 1
    url = f"http://127.0.0.1:{args.port}/"
    status, created = _call(api, token, "POST", "/api/user/webhooks", {"url": url, "events": ["email.received"]})
    if status != 201:
        print(f"devhook: inboxd refused {url}: {created}; is INBOXD_WEBHOOK_ALLOW_HTTP=true set?", file=sys.stderr)
        return 1
    secret = created["secret"]
    done = {"count": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                event_id = verify(secret, dict(self.headers), body)
            except VerificationError as exc:
                print(f"devhook: rejected a delivery: {exc}", flush=True)
                self.send_response(400)
                self.end_headers()
                return
            data = json.loads(body)["data"]
            print(f"devhook: verified {event_id}: from {data['sender']!r}, subject {data['subject']!r}", flush=True)
            self.send_response(204)
            self.end_headers()
            done["count"] += 1

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", args.port), Handler)
    print(f"devhook: listening on {url} (webhook {created['id']}); send mail to {address}", flush=True)
    try:
        while not (args.once and done["count"]):
            server.handle_request()
    except KeyboardInterrupt:
        pass
    finally:
        _call(api, token, "DELETE", f"/api/user/webhooks/{created['id']}")
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
