"""The shape every handler shares: authenticate, admit, decode, call a service, encode.

`endpoint(...)` wraps a handler `(request, call) -> Response` with authentication, the access
rules of the path (mailbox tokens, Pro), the limits and their headers; handlers stay small.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from inboxd.errors import Forbidden, InboxdError, InvalidRequest, PayloadTooLarge, Unauthorized
from inboxd.model import Principal
from inboxd.services.limits import Allowance
from inboxd.services.registry import Services

S = TypeVar("S")
_encoder = msgspec.json.Encoder()
JSON = "application/json"
# Methods the free-space guard refuses (507) while space is low; DELETE stays open, as it frees space.
WRITES = frozenset({"POST", "PUT", "PATCH"})


async def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Call:
    services: Services
    principal: Principal
    # For a path that creates a mailbox: admits the request and reserves the creation interval.
    # Its service awaits it once the request is known to be valid, before any costly work.
    admit_creation: Callable[[], Awaitable[None]] = _nothing


Handler = Callable[[Request, Call], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_encoder.encode(data), status_code=status, media_type=JSON, headers=headers)


_STREAM_CHARS = 64 * 1024


def json_stream_response(data: msgspec.Struct, *, fields: tuple[str, ...], status: int = 200) -> Response:
    """`data` as JSON, its long string `fields` encoded piece by piece while the answer is sent:
    a body of control characters grows sixfold in JSON, and this never holds it encoded whole.
    Each named field must hold a str and be encoded by name with no rename."""
    values = {name: getattr(data, name) for name in fields}
    if sum(len(v) for v in values.values()) <= _STREAM_CHARS:
        return json_response(data, status)
    skeleton = _encoder.encode(msgspec.structs.replace(data, **dict.fromkeys(fields, "")))
    pieces: list[tuple[bytes, str]] = []
    rest = skeleton
    for name in fields:
        marker = f'"{name}":""'.encode()
        head, found, rest = rest.partition(marker)
        assert found, name
        pieces.append((head + marker[:-1], values[name]))
        rest = b'"' + rest

    async def body() -> AsyncIterator[bytes]:
        for head, text in pieces:
            yield head
            for start in range(0, len(text), _STREAM_CHARS):
                yield _encoder.encode(text[start : start + _STREAM_CHARS])[1:-1]
        yield rest

    return StreamingResponse(body(), status_code=status, media_type=JSON)


def no_content() -> Response:
    return Response(status_code=204)


def bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthorized("Send 'Authorization: Bearer <token>'.", code="invalid_token")
    return value.strip()


async def authenticate(request: Request, services: Services) -> Principal:
    return await services.users.authenticate(bearer(request), services.mailbox_tokens)


def endpoint(
    *, mailbox_token: bool = False, pro: bool = False, creates_mailbox: bool = False
) -> Callable[[Handler], Endpoint]:
    """Wrap a handler with the path's access rules.

    mailbox_token: the path is one a mailbox token may use (its own mailbox's info and messages).
    pro: the path is under /api/user and needs a Pro account.
    """

    def wrap(handler: Handler) -> Endpoint:
        async def run(request: Request) -> Response:
            services = services_of(request)
            principal = await authenticate(request, services)
            refusal = _refusal(principal, mailbox_token=mailbox_token, pro=pro)
            gate = _Gate(services, principal)
            # Every authenticated answer is limited, counted and carries the headers. Most paths
            # are admitted first. A creation is admitted when its service is about to create, so
            # a malformed or invalid request answers its own 400/413 even within the creation
            # interval, and only a request that could create reserves the interval.
            if not (creates_mailbox and refusal is None):
                await gate.admit(creates_mailbox=False)
            try:
                if refusal is not None:
                    raise refusal
                if request.method in WRITES:
                    services.space.check()
                _normalize_id(request)
                response = await handler(
                    request, Call(services=services, principal=principal, admit_creation=gate.admit_creation)
                )
            except BaseException as exc:
                await gate.failed(exc)
                if isinstance(exc, InboxdError):
                    exc.headers.update(gate.headers)
                raise
            if gate.allowance is None:
                await gate.admit(creates_mailbox=False)
            response.headers.update(gate.headers)
            return response

        run.__name__ = handler.__name__
        run.__qualname__ = handler.__qualname__
        run.__module__ = handler.__module__
        run.__doc__ = handler.__doc__
        # What the OpenAPI document needs: the handler's `@describe` and who may call it.
        run.__dict__.update(handler.__dict__)
        run.__dict__["access"] = "pro" if pro else "mailbox_token" if mailbox_token else "token"
        return run

    return wrap


class _Gate:
    """One request's admission: done at most once, and the creation interval given back if the
    request that reserved it created nothing."""

    __slots__ = ("_principal", "_services", "allowance")

    def __init__(self, services: Services, principal: Principal) -> None:
        self._services = services
        self._principal = principal
        self.allowance: Allowance | None = None

    @property
    def headers(self) -> dict[str, str]:
        return self.allowance.headers if self.allowance is not None else {}

    async def admit(self, *, creates_mailbox: bool) -> None:
        if self.allowance is None:
            self.allowance = await self._services.admission.admit(self._principal.user, creates_mailbox=creates_mailbox)

    async def admit_creation(self) -> None:
        await self.admit(creates_mailbox=True)

    async def failed(self, exc: BaseException) -> None:
        if self.allowance is not None:
            await self._services.admission.creation_failed(self._principal.user, self.allowance)
        elif isinstance(exc, Exception):
            # Refused before admission (a malformed body): still limited and counted, and a 429
            # from the rate limit takes precedence over the request's own error.
            await self.admit(creates_mailbox=False)


def _refusal(principal: Principal, *, mailbox_token: bool, pro: bool) -> Forbidden | None:
    if principal.is_mailbox_token and not mailbox_token:
        return Forbidden("A mailbox token cannot use this endpoint.", code="access_denied")
    if pro and not principal.user.is_pro:
        return Forbidden("This endpoint needs a Pro account.", code="pro_required")
    return None


def _normalize_id(request: Request) -> None:
    """`{id}` is always a UUID, stored lowercase; an uppercase spelling names the same thing,
    as it already does for `{mailbox}`."""
    params = request.scope.get("path_params")
    if params and isinstance(params.get("id"), str):
        params["id"] = params["id"].strip().lower()


async def read_body(request: Request) -> bytes:
    limit = services_of(request).settings.max_body_size
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge()
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, schema: type[S]) -> S:
    """Decode the body into `schema`; any mistake is 400 invalid_request naming the field."""
    body = await read_body(request)
    if not body.strip():
        raise InvalidRequest("The request needs a JSON body.")
    try:
        return msgspec.json.decode(body, type=schema)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"Invalid field: {exc}.") from exc
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"Malformed JSON: {exc}.") from exc
    except UnicodeDecodeError as exc:
        # msgspec checks UTF-8 only when it builds a string, and then raises Python's own error.
        raise InvalidRequest("Malformed JSON: the body is not valid UTF-8.") from exc
    except RecursionError as exc:
        # msgspec skips an unknown key's value recursively: about a thousand nested objects, 6 KB.
        raise InvalidRequest("Malformed JSON: nested too deeply.") from exc


def int_query(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    # isdigit alone admits "²" (int() then fails) and other scripts' digits.
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9 or int(raw) < 1:
        raise InvalidRequest(f"`{name}` must be an integer of at least 1.")
    return int(raw)
