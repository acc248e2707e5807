"""docs/api.md, the API reference in the repository, rendered from the OpenAPI document.

`python -m inboxd.api.reference > docs/api.md` writes it; `tests/test_openapi.py` fails when the
file differs from what the document renders to, so the two cannot drift. Examples are built from
the schemas' `examples` (and plain placeholders where a field has none).
"""

from __future__ import annotations

import json
from typing import Any

from inboxd.api.app import api_routes
from inboxd.api.openapi import build_document

BASE = "http://localhost:8025"
PATH_EXAMPLES = {"mailbox": "alice@inboxd.localhost", "id": "0b7c6e1e-5a8e-4c43-9a57-2d1f0e1e9c11", "index": "0"}
PLACEHOLDER = {"string": "…", "integer": 0, "number": 0, "boolean": False}


def example(schema: dict[str, Any], components: dict[str, Any], depth: int = 0) -> Any:
    if depth > 8 or not isinstance(schema, dict):
        return None
    if "$ref" in schema:
        return example(components[schema["$ref"].rsplit("/", 1)[1]], components, depth + 1)
    if "examples" in schema:
        return schema["examples"][0]
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema and schema["default"] is not None:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return example(options[0], components, depth + 1)
    if "items" in schema and isinstance(schema["items"], bool) and "prefixItems" in schema:
        return [example(s, components, depth + 1) for s in schema["prefixItems"]]
    kind = schema.get("type")
    if kind == "object":
        return {name: example(sub, components, depth + 1) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [example(schema.get("items", {}), components, depth + 1)]
    return PLACEHOLDER.get(str(kind))


def _request(method: str, path: str, op: dict[str, Any], components: dict[str, Any]) -> str:
    url = path
    for name, value in PATH_EXAMPLES.items():
        url = url.replace("{" + name + "}", value)
    parts = [f"curl -X {method.upper()} '{BASE}{url}'"]
    if op.get("security"):
        parts.append('-H "Authorization: Bearer $TOKEN"')
    body = op.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None:
        parts.append("-H 'Content-Type: application/json'")
        parts.append("-d '" + json.dumps(example(body["schema"], components), ensure_ascii=False) + "'")
    return " \\\n  ".join(parts)


def _answer(op: dict[str, Any], components: dict[str, Any]) -> str:
    status, success = next(iter(op["responses"].items()))
    content = success.get("content", {})
    if "application/json" in content:
        body = example(content["application/json"]["schema"], components)
        return f"{status}\n" + json.dumps(body, indent=2, ensure_ascii=False)
    if content:
        return f"{status} ({next(iter(content))})"
    return f"{status} (no body)"


def _params(op: dict[str, Any]) -> list[str]:
    out = []
    for p in op.get("parameters", []):
        if p["in"] == "query":
            text = p.get("description", "")
            ext = " (inboxd extension)" if p.get("x-inboxd-extension") else ""
            out.append(f"- `{p['name']}` ({p['schema'].get('type', 'string')}, query): {text}{ext}".rstrip(": "))
    return out


def render(document: dict[str, Any]) -> str:
    components = document.get("components", {}).get("schemas", {})
    lines = [
        "# inboxd API reference",
        "",
        "<!-- Generated from the OpenAPI document by `python -m inboxd.api.reference > docs/api.md`;",
        "     tests/test_openapi.py fails when this file and the document differ. Do not edit by hand. -->",
        "",
        document["info"]["description"].strip(),
        "",
        "A running inboxd serves the same document at `/api/openapi.json` and a browsable page at",
        "`/api/docs`. Examples use `$TOKEN` for an API token (or, where allowed, a mailbox token).",
        "",
    ]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in document["paths"].items():
        for method, op in item.items():
            by_tag.setdefault(op["tags"][0], []).append((method, path, op))
    lines.append("## Contents")
    lines.append("")
    for tag, ops in by_tag.items():
        lines.append(f"- {tag}: " + ", ".join(f"`{m.upper()} {p}`" for m, p, _ in ops))
    lines.append("")
    for tag, ops in by_tag.items():
        lines += [f"## {tag}", ""]
        for method, path, op in ops:
            lines += [f"### `{method.upper()} {path}`", "", op["summary"] + "."]
            if op.get("description"):
                lines += ["", op["description"]]
            if op.get("x-inboxd-extension"):
                lines += ["", "*An inboxd extension to the service contract.*"]
            security = op.get("security") or []
            who = " or ".join(next(iter(s), "none") for s in security) if security else "none"
            lines += ["", f"Auth: {who}."]
            params = _params(op)
            if params:
                lines += ["", "Query parameters:", "", *params]
            errors = [f"`{code}` {r['description']}" for code, r in op["responses"].items() if int(code) >= 400]
            lines += [
                "",
                "```sh",
                _request(method, path, op, components),
                "```",
                "",
                "```",
                _answer(op, components),
                "```",
            ]
            if errors:
                lines += ["", "Errors: " + "; ".join(errors) + "."]
            lines.append("")
    lines += [EVENTS, "## Schemas", ""]
    for name, schema in components.items():
        props = schema.get("properties", {})
        if not props:
            continue
        required = set(schema.get("required", []))
        lines += [f"### {name}", ""]
        if schema.get("description"):
            lines += [schema["description"], ""]
        lines += ["| field | type | required | notes |", "|---|---|---|---|"]
        for field, sub in props.items():
            kind = _type(sub)
            notes = sub.get("description", "")
            if sub.get("x-inboxd-extension"):
                notes = (notes + " inboxd extension.").strip()
            lines.append(f"| `{field}` | {kind} | {'yes' if field in required else 'no'} | {notes} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


EVENTS = """## Events (outside the HTTP document)

### WebSocket `/api/ws`

Open `ws://localhost:8025/api/ws` (`wss://` behind TLS); within 10 s send
`{"type": "auth", "token": "<mailbox token>"}` (from `POST /api/accounts` or `POST /api/token`;
API tokens are refused). The answer is `{"type": "auth_ok"}`, then one frame per new mail:

```
{"type": "new_email", "id": "…", "sender": "…", "from": "…", "subject": "…", "preview_text": "…",
 "size": 1234, "created_at": "2026-11-21T15:16:00.123Z", "account_id": "…", "address": "alice@inboxd.localhost"}
```

Refusals are one `{"error": code}` frame (`invalid_token`, `invalid_or_expired_token`,
`invalid_auth_message`, `auth_timeout`, `too_many_connections`), then close 1008. A handshake
with an `Origin` other than the service's web origin gets HTTP 403, and one beyond the caps on
sockets not yet authenticated (per client address and in all) HTTP 429 `too_many_connections`.
At most 3 connections per mailbox; a ping every 30 s.

### Webhook `email.received`

`POST` to the registered URL, `Content-Type: application/json`, with `X-Webhook-ID` (the event
id), `X-Webhook-Timestamp` (Unix seconds) and `X-Webhook-Signature`: `sha256=` + hex
HMAC-SHA256 of `<timestamp>.<raw body>` keyed with the webhook's secret (`whsec_…`, as UTF-8).

```
{"id": "evt_…", "type": "email.received", "created_at": "…",
 "data": {"email_id": "…", "account_id": "…", "address": "…", "from": "…", "sender": "…",
          "subject": "…", "preview_text": "…", "size": 1234, "created_at": "…"}}
```

Any 2xx within 10 s acknowledges; otherwise inboxd retries (0 s, 5 s, 5 min, 30 min, 2 h, 5 h,
10 h, 10 h after the event) with the same event id. `inboxd.webhooks.verify` checks a call.
"""


def _type(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[1]
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if schema.get("type") == "array":
        return "array of " + _type(schema.get("items", {}))
    return str(schema.get("type", "any"))


def current() -> str:
    return render(build_document(api_routes(), base_url=BASE, version="-"))


if __name__ == "__main__":
    print(current(), end="")
