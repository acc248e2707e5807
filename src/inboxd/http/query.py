"""Query parameters both faces read the same way."""

from __future__ import annotations

from starlette.requests import Request

from inboxd.errors import InvalidRequest


def page_number(request: Request) -> int:
    """`?page=`, numbered from 1, default 1 (the API's message lists and the dashboard's inbox);
    anything else is 400 invalid_request."""
    # No query string, no page: the common case skips parsing an empty one.
    raw = request.query_params.get("page") if request.scope["query_string"] else None
    if raw is None:
        return 1
    # isdigit alone admits "²" (int() then fails) and other scripts' digits; nine digits keep
    # `10**30` from reaching a page query as an offset no database column holds.
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9 or int(raw) < 1:
        raise InvalidRequest("`page` must be an integer of at least 1.")
    return int(raw)
