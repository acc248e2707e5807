"""Reading a request's body within the size limit, as JSON (the API) or as a form (the pages)."""

from __future__ import annotations

from typing import TypeVar
from urllib.parse import parse_qsl

import msgspec
from starlette.requests import Request

from inboxd.errors import InvalidRequest, PayloadTooLarge
from inboxd.services.registry import Services

S = TypeVar("S")
MAX_FORM = 64 * 1024


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


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
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        # msgspec checks UTF-8 only when it builds a string, raising Python's own error before 0.23
        # and a DecodeError since: the body is looked at again (on this error path only), so the
        # answer never depends on msgspec's release or wording.
        if not _is_utf8(body):
            raise InvalidRequest("Malformed JSON: the body is not valid UTF-8.") from exc
        raise InvalidRequest(f"Malformed JSON: {exc}.") from exc
    except RecursionError as exc:
        # msgspec skips an unknown key's value recursively: about a thousand nested objects, 6 KB.
        raise InvalidRequest("Malformed JSON: nested too deeply.") from exc


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode()
    except UnicodeDecodeError:
        return False
    return True


async def read_form(request: Request) -> dict[str, str]:
    body = await read_body(request)
    if not body:
        return {}
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise InvalidRequest("This form must be sent as application/x-www-form-urlencoded.")
    if len(body) > MAX_FORM:
        raise InvalidRequest("The form is too large.")
    try:
        return dict(parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=100))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequest("The form could not be read.") from exc
