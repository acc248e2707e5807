"""`/api/openapi.json` and `/api/docs`: the document, and Swagger UI served from the wheel.

The document is built once, when the application is; the page and its assets (Swagger UI, from
npm's `swagger-ui-dist`, in `docs_assets/`) never reach for a CDN.
"""

from __future__ import annotations

from importlib import metadata, resources

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from inboxd.api.openapi import build_document, describe

ASSETS = "docs_assets"


def _version() -> str:
    try:
        return metadata.version("inboxd")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0"


def openapi_bytes(routes: list[BaseRoute], *, base_url: str, metrics_open: bool = False) -> bytes:
    """This server's document; `metrics_open` when `/metrics` needs no token (no lock shown on it)."""
    document = build_document(routes, base_url=base_url, version=_version(), metrics_open=metrics_open)
    return msgspec.json.encode(document)


@describe(
    "The OpenAPI 3.1 document",
    tag="operations",
    description="This document: every route, its parameters, bodies, answers and error codes.",
    media_type="application/json",
    extension=True,
)
async def openapi_json(request: Request) -> Response:
    body: bytes = request.app.state.openapi
    return Response(body, media_type="application/json")


@describe(
    "The API reference page",
    tag="operations",
    description="Swagger UI over `/api/openapi.json`, served from the package (no CDN).",
    media_type="text/html",
    extension=True,
)
async def docs_page(request: Request) -> Response:
    page = resources.files("inboxd.api").joinpath(ASSETS, "index.html").read_bytes()
    return Response(page, media_type="text/html")


routes: list[BaseRoute] = [
    Route("/api/openapi.json", openapi_json, methods=["GET"]),
    Route("/api/docs", docs_page, methods=["GET"]),
    Mount("/api/docs/assets", StaticFiles(packages=[("inboxd.api", ASSETS)]), name="docs_assets"),
]
