"""The administrators' users page: list and search by email, then change a user's plan, role or
status. Suspending ends the user's sessions at once and their tokens are refused from the next
request (the rule lives in `UserService.update_user`, as for `inboxd users set`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inboxd.errors import Forbidden
from inboxd.http.pipeline import Call
from inboxd.services.users import PLANS, ROLES, STATUSES
from inboxd.web.pages import page, redirect, render

PAGE_SIZE = 50


@page("admin")
async def users(request: Request, call: Call) -> Response:
    query = request.query_params.get("q", "").strip()
    after = request.query_params.get("after", "")
    found = await call.services.users.search(query, after=after, limit=PAGE_SIZE + 1)
    return render(
        request,
        call,
        "admin_users.html",
        users=found[:PAGE_SIZE],
        query=query,
        next_after=found[PAGE_SIZE - 1].email if len(found) > PAGE_SIZE else "",
    )


@page("admin")
async def user_detail(request: Request, call: Call) -> Response:
    services = call.services
    user = await services.users.user_by_id(request.path_params["id"])
    tokens = [t for t in await services.users.list_tokens(user) if t.revoked_at is None]
    return render(
        request,
        call,
        "admin_user.html",
        subject=user,
        tokens=len(tokens),
        sessions=await services.sessions.count(user),
        identities=await services.sign_in.identities(user),
        plans=PLANS,
        roles=ROLES,
        statuses=STATUSES,
        notice="Saved." if request.query_params.get("notice") == "saved" else "",
    )


@page("admin")
async def update_user(request: Request, call: Call) -> Response:
    services = call.services
    user = await services.users.user_by_id(request.path_params["id"])
    role, status = call.form.get("role") or None, call.form.get("status") or None
    if user.id == call.user.id and (role not in (None, user.role) or status not in (None, user.status)):
        raise Forbidden("You cannot change your own role or status; ask another administrator.")
    await services.users.update_user(user, plan=call.form.get("plan") or None, role=role, status=status)
    return redirect(f"/admin/users/{user.id}?notice=saved")


routes = [
    Route("/admin/users", users, methods=["GET"]),
    Route("/admin/users/{id}", user_detail, methods=["GET"]),
    Route("/admin/users/{id}", update_user, methods=["POST"]),
]
