"""The REST API's routes, in the order the OpenAPI document lists them."""

from __future__ import annotations

from starlette.routing import BaseRoute

from inboxd.api import (
    accounts,
    checks,
    docs,
    faults,
    messages,
    operations,
    public,
    releases,
    render,
    sandbox,
    server,
    user,
    webhooks,
)


def api_routes() -> list[BaseRoute]:
    """Every HTTP route; the OpenAPI document describes the ones under /api and the operational ones."""
    return [
        *public.routes,
        *messages.routes,
        *checks.routes,
        *render.routes,
        *accounts.routes,
        *user.routes,
        *sandbox.routes,
        *releases.routes,
        *faults.routes,
        *checks.sandbox_routes,
        *render.sandbox_routes,
        *webhooks.routes,
        *docs.routes,
        *operations.routes,
        *server.routes,
    ]
