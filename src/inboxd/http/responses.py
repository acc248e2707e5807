"""The answers both faces build: JSON (whole or streamed), 204, and a download's Content-Disposition."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import msgspec
from starlette.responses import Response, StreamingResponse

_encoder = msgspec.json.Encoder()
JSON = "application/json"


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_encoder.encode(data), status_code=status, media_type=JSON, headers=headers)


def encoded_json_response(body: bytes, status: int = 200) -> Response:
    """JSON already encoded (kept from an earlier answer)."""
    return Response(body, status_code=status, media_type=JSON)


def encode_json(data: Any) -> bytes:
    return _encoder.encode(data)


_STREAM_CHARS = 64 * 1024


def encoded_whole(data: msgspec.Struct, *, fields: tuple[str, ...]) -> bytes | None:
    """`data` encoded, when `json_stream_response` would send it whole; None when it would stream."""
    if sum(len(getattr(data, name)) for name in fields) <= _STREAM_CHARS:
        return _encoder.encode(data)
    return None


def json_stream_response(data: msgspec.Struct, *, fields: tuple[str, ...], status: int = 200) -> Response:
    """`data` as JSON, its long string `fields` encoded piece by piece while the answer is sent:
    a body of control characters grows sixfold in JSON, and this never holds it encoded whole.
    Each named field must hold a str and be encoded by name with no rename."""
    whole = encoded_whole(data, fields=fields)
    if whole is not None:
        return encoded_json_response(whole, status)
    values = {name: getattr(data, name) for name in fields}
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


def content_disposition(filename: str) -> str:
    """RFC 6266: an ASCII fallback, plus `filename*` when the name is not plain ASCII."""
    name = filename or "attachment"
    fallback = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    value = f'attachment; filename="{fallback}"'
    if fallback != name:
        value += f"; filename*=UTF-8''{quote(name, safe='')}"
    return value
