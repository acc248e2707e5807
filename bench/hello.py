"""The HTTP baseline: a bare Starlette app on the same uvicorn setup as inboxd (uvloop, httptools,
one process, no access log). `python -m bench goals` runs it beside inboxd in the same run, so the
API figures read as a share of what the framework itself answers on this machine."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


async def hello(request: Request) -> JSONResponse:
    return JSONResponse({"hello": "world"})


app = Starlette(routes=[Route("/", hello), Route("/healthz", hello)])
