"""The OpenAPI 3.1 document, built from the routes and the msgspec types their handlers use.

Each handler carries its own description, next to it: `@describe(...)` names its summary, tag,
request body, response struct, query parameters and the errors it may answer. What `endpoint()`
already knows (who may call: API token, mailbox token, Pro) becomes the security requirement
and the 401/403/429 answers, so it is never written twice. `build_document` walks the
application's routes once at start; `undescribed` lists the `/api` routes that lack a
description (the test suite fails on any).

Field types, required fields and examples come from the structs in `api/schemas.py` through
`msgspec.json.schema_components`; inboxd's additions to the contract carry `x-inboxd-extension`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import msgspec
from starlette.routing import BaseRoute, Route

from inboxd.api import schemas
from inboxd.http.pipeline import WRITES

F = TypeVar("F", bound=Callable[..., Any])
Access = Literal["none", "token", "mailbox_token", "pro", "metrics"]
JSON = "application/json"
REF = "#/components/schemas/{name}"

# Statuses a handler may list in `errors=`, with the codes each can carry.
ERROR_CODES: dict[int, tuple[str, ...]] = {
    400: ("invalid_request",),
    401: ("invalid_token", "invalid_or_expired_token", "account_revoked"),
    403: ("access_denied",),
    404: ("not_found",),
    408: ("timeout",),
    409: ("conflict",),
    410: ("expired",),
    413: ("payload_too_large",),
    422: ("filter_too_broad",),
    429: ("rate_limit_exceeded", "ops_quota_exceeded"),
    501: ("render_unavailable",),
    502: ("relay_error",),
    503: ("unavailable",),
    507: ("insufficient_storage",),
}
ERROR_TEXT = {
    400: "Malformed request",
    401: "Missing, invalid or revoked token",
    403: "Not allowed",
    404: "Not found, or not the caller's",
    408: "Nothing matched within the wait's timeout",
    409: "Already exists",
    410: "Expired",
    413: "Request body over the limit",
    422: "A filter no index answers read its bound of messages (`INBOXD_FILTER_SCAN_ROWS`) without filling the page "
    "while older ones remain; narrow it with `since`/`until`",
    429: "Rate limited or monthly quota used up",
    501: "Rendering is not installed on this server (the `inboxd[render]` extra, Chromium)",
    502: "The relay could not be reached or broke the session",
    503: "The server is stopping",
    507: "Free space under the operator's threshold",
}

# Path parameters by name: every route spells them the same way.
PATH_PARAMS: dict[str, dict[str, Any]] = {
    "mailbox": {
        "description": "The mailbox: its UUID or its full address (any case).",
        "schema": {"type": "string", "examples": ["alice@inboxd.localhost"]},
    },
    "id": {
        "description": "A UUID (any case).",
        "schema": {"type": "string", "format": "uuid"},
    },
    "index": {
        "description": "The attachment's `index` from the message detail.",
        "schema": {"type": "integer", "minimum": 0},
    },
}


@dataclass(frozen=True, slots=True)
class Query:
    """One query parameter."""

    name: str
    type: type = str
    description: str = ""
    required: bool = False
    minimum: int | None = None
    extension: bool = False


@dataclass(frozen=True, slots=True)
class Operation:
    """What `@describe` records about one handler."""

    summary: str
    tag: str
    description: str = ""
    body: Any = None  # the msgspec type `read_json` decodes
    response: Any = None  # the msgspec type of a JSON success body
    status: int = 200
    media_type: str | None = None  # a success body that is not JSON (raw mail, files, pages)
    query: tuple[Query, ...] = ()
    errors: tuple[int, ...] = ()
    codes: tuple[str, ...] = ()  # further error codes worth naming (e.g. `invalid_index`)
    extension: bool = False  # the whole route is an inboxd addition to the contract
    access: Access | None = None  # None: from `endpoint()`, or "none" for a bare handler
    headers: dict[str, str] = field(default_factory=dict)  # success headers: name → description


def describe(summary: str, *, tag: str, **details: Any) -> Callable[[F], F]:
    """Attach an `Operation` to a handler; works above or below `@endpoint(...)`."""
    operation = Operation(summary=summary, tag=tag, **details)

    def mark(handler: F) -> F:
        handler.__dict__["openapi"] = operation
        return handler

    return mark


def operation_of(route: Route) -> Operation | None:
    found = getattr(route.endpoint, "openapi", None)
    return found if isinstance(found, Operation) else None


def access_of(route: Route, operation: Operation) -> Access:
    if operation.access is not None:
        return operation.access
    marked = getattr(route.endpoint, "access", None)
    return marked if marked in ("token", "mailbox_token", "pro") else "none"


def documented(path: str) -> bool:
    """Paths the document must cover: the REST API and the operational endpoints."""
    return path.startswith("/api/") or path in ("/healthz", "/metrics")


def undescribed(routes: Sequence[BaseRoute]) -> list[str]:
    """`METHOD path` of every documented route without `@describe` (the suite fails on any)."""
    return [
        f"{method} {route.path}"
        for route in routes
        if isinstance(route, Route) and documented(route.path) and operation_of(route) is None
        for method in sorted(route.methods or ())
        if method != "HEAD"
    ]


_RATE_HEADERS = {
    "RateLimit-Limit": "Requests per second the caller's plan allows.",
    "RateLimit-Remaining": "Requests left in the bucket now.",
    "RateLimit-Reset": "Whole seconds until the bucket is full again.",
    "X-Ops-Used": "Operations counted this calendar month (UTC).",
    "X-Ops-Limit": "The plan's monthly operations.",
}


def _headers(names: dict[str, str]) -> dict[str, Any]:
    return {name: {"description": text, "schema": {"type": "string"}} for name, text in names.items()}


class _Builder:
    def __init__(self, *, metrics_open: bool = False) -> None:
        self.types: list[Any] = [schemas.ErrorBody]
        self.tags: list[str] = []
        # No `INBOXD_METRICS_TOKEN`: `/metrics` asks for nothing, and the document says so (no lock).
        self.metrics_open = metrics_open

    def ref(self, kind: Any) -> dict[str, Any]:
        """A placeholder for `kind`'s schema, filled in once every type is known."""
        if kind not in self.types:
            self.types.append(kind)
        return {"$inboxd-type": self.types.index(kind)}

    def operation(self, method: str, route: Route, op: Operation) -> dict[str, Any]:
        access = access_of(route, op)
        if access == "metrics" and self.metrics_open:
            access = "none"
        if access in ("token", "mailbox_token", "pro") and method.upper() in WRITES:
            op = replace(op, errors=(*op.errors, 507))
        if op.tag not in self.tags:
            self.tags.append(op.tag)
        out: dict[str, Any] = {
            "operationId": _operation_id(route),
            "summary": op.summary,
            "tags": [op.tag],
        }
        if op.description:
            out["description"] = op.description
        if op.extension:
            out["x-inboxd-extension"] = True
        params = [self._path_param(name) for name in route.param_convertors]
        params += [self._query(q) for q in op.query]
        if params:
            out["parameters"] = params
        if op.body is not None:
            out["requestBody"] = {"required": True, "content": {JSON: {"schema": self.ref(op.body)}}}
        out["security"] = _security(access)
        out["responses"] = self._responses(op, access)
        return out

    def _path_param(self, name: str) -> dict[str, Any]:
        known = PATH_PARAMS.get(name, {"schema": {"type": "string"}})
        return {"name": name, "in": "path", "required": True, **known}

    def _query(self, q: Query) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": _QUERY_TYPES.get(q.type, "string")}
        if q.minimum is not None:
            schema["minimum"] = q.minimum
        out: dict[str, Any] = {"name": q.name, "in": "query", "required": q.required, "schema": schema}
        if q.description:
            out["description"] = q.description
        if q.extension:
            out["x-inboxd-extension"] = True
        return out

    def _responses(self, op: Operation, access: Access) -> dict[str, Any]:
        authenticated = access in ("token", "mailbox_token", "pro")
        success: dict[str, Any] = {"description": op.summary}
        if op.response is not None:
            success["content"] = {JSON: {"schema": self.ref(op.response)}}
        elif op.media_type is not None:
            success["content"] = {op.media_type: {"schema": {"type": "string"}}}
        headers = {**(_RATE_HEADERS if authenticated else {}), **op.headers}
        if headers:
            success["headers"] = _headers(headers)
        out: dict[str, Any] = {str(op.status): success}
        statuses = set(op.errors)
        if op.body is not None or op.query:
            statuses.add(400)
        if op.body is not None:
            statuses.add(413)
        if authenticated or access == "metrics":
            statuses.add(401)
        if authenticated:
            statuses.update((403, 429))
        for status in sorted(statuses):
            out[str(status)] = self._error(status, op, access)
        return out

    def _error(self, status: int, op: Operation, access: Access) -> dict[str, Any]:
        codes = list(ERROR_CODES.get(status, ()))
        if status == 403 and access == "pro":
            codes.append("pro_required")
        codes += [c for c in op.codes if _status_of_code(c) == status and c not in codes]
        out: dict[str, Any] = {
            "description": f"{ERROR_TEXT.get(status, 'Error')}: " + ", ".join(f"`{c}`" for c in codes),
            "content": {JSON: {"schema": self.ref(schemas.ErrorBody)}},
        }
        if status == 429:
            out["headers"] = _headers({"Retry-After": "Seconds to wait before trying again."})
        return out

    def resolve(self, document: dict[str, Any]) -> dict[str, Any]:
        refs, components = msgspec.json.schema_components(self.types, ref_template=REF)

        def walk(node: Any) -> Any:
            if isinstance(node, dict):
                if "$inboxd-type" in node:
                    return refs[node["$inboxd-type"]]
                return {k: walk(v) for k, v in node.items()}
            if isinstance(node, list):
                return [walk(v) for v in node]
            return node

        resolved: dict[str, Any] = walk(document)
        resolved.setdefault("components", {})["schemas"] = {
            name: _cleaned_docstring(schema) for name, schema in components.items()
        }
        return resolved


def _cleaned_docstring(schema: dict[str, Any]) -> dict[str, Any]:
    """A component whose description (a struct's docstring) is cleaned by the rule Python's own
    `inspect.cleandoc` keeps: msgspec's cleaning has changed between releases (0.23 dedents the
    lines after the first, 0.22 did not), and the document must not move with it."""
    description = schema.get("description")
    if not isinstance(description, str):
        return schema
    return {**schema, "description": inspect.cleandoc(description)}


_QUERY_TYPES: dict[type, str] = {int: "integer", float: "number", bool: "boolean"}

_CODE_STATUS = {
    "invalid_address": 400,
    "invalid_domain": 400,
    "password_too_short": 400,
    "invalid_url": 400,
    "invalid_index": 400,
    "account_limit_reached": 403,
    "domain_limit_reached": 403,
    "webhook_limit_reached": 403,
    "address_taken": 409,
    "domain_already_exists": 409,
    "domain_expired": 410,
    "too_many_waits": 429,
    "release_disabled": 403,
    "recipient_not_allowed": 403,
    "release_limit_reached": 429,
}


def _status_of_code(code: str) -> int:
    return _CODE_STATUS.get(code, 0)


def _operation_id(route: Route) -> str:
    """`module_handler`: handler names repeat across modules (`list_domains`)."""
    module = str(getattr(route.endpoint, "__module__", "")).rpartition(".")[2]
    return f"{module}_{route.name}" if module else route.name


def _security(access: Access) -> list[dict[str, list[str]]]:
    if access == "mailbox_token":
        return [{"apiToken": []}, {"mailboxToken": []}]
    if access in ("token", "pro"):
        return [{"apiToken": []}]
    if access == "metrics":
        return [{}, {"metricsToken": []}]
    return []


SECURITY_SCHEMES = {
    "apiToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token (`ibx_…`): the bootstrap token, `inboxd tokens create` "
        "or `POST /api/user/tokens`.",
    },
    "mailboxToken": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "A mailbox token from `POST /api/accounts` or `POST /api/token`: "
        "one mailbox's info and messages.",
    },
    "metricsToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "`INBOXD_METRICS_TOKEN`, when the operator set one.",
    },
}

DESCRIPTION = """\
Receivable mailboxes over SMTP, served through REST, WebSocket and webhooks.

Every authenticated answer carries `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`,
`X-Ops-Used` and `X-Ops-Limit`; every answer carries `X-Request-ID`. Errors are
`{"error": code, "message": text}` (a 429 `rate_limit_exceeded` has only `error`). Fields and
routes marked `x-inboxd-extension` are inboxd's additions to the service contract.
"""


def build_document(
    routes: Sequence[BaseRoute], *, base_url: str, version: str, metrics_open: bool = False
) -> dict[str, Any]:
    """The OpenAPI 3.1 document for `routes` (built once at start). `metrics_open`: this server's
    `/metrics` needs no token, so it is documented without one; without it (the reference in
    docs/api.md) the token is optional, "none or metricsToken"."""
    builder = _Builder(metrics_open=metrics_open)
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not isinstance(route, Route) or (op := operation_of(route)) is None:
            continue
        for method in sorted(route.methods or ()):
            if method == "HEAD":
                continue
            paths.setdefault(route.path, {})[method.lower()] = builder.operation(method.lower(), route, op)
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "inboxd", "version": version, "description": DESCRIPTION},
        "servers": [{"url": base_url.rstrip("/")}],
        "tags": [{"name": t} for t in builder.tags],
        "paths": paths,
        "components": {"securitySchemes": SECURITY_SCHEMES},
    }
    return builder.resolve(document)
