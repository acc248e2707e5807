"""Every page route of the dashboard, and its static assets (shipped in the wheel)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from inboxd.auth.providers import Providers
from inboxd.services.registry import Services
from inboxd.web import account, admin, checks, errors, faults, mail, pro, releases, sign_in
from inboxd.web.pages import PageFailed, SecurityHeaders


def attach(app: Starlette, services: Services) -> None:
    """What the pages need besides the services: the identity providers' clients, and the one
    exception handler that turns a page's error into the error page."""
    app.state.providers = Providers(services.settings)
    app.add_exception_handler(PageFailed, errors.on_page_failed)


def routes() -> list[BaseRoute]:
    static = StaticFiles(packages=[("inboxd.web", "static")])
    return [
        *sign_in.routes,
        *account.routes,
        *admin.routes,
        *mail.routes,
        *releases.routes,
        *faults.routes,
        *checks.routes,
        *pro.routes,
        Mount("/static", app=static, name="static", middleware=[Middleware(SecurityHeaders)]),
    ]
