"""The admission every request of both faces runs: who is calling, the access rules of the path,
the limits and their headers; handlers stay small.

`endpoint(...)` wraps an API handler `(request, call) -> Response` with bearer authentication
and `admitted(...)`; the dashboard's `page(...)` finds its caller in the session cookie and runs
the pages that do an operation (create a mailbox, reset a password, ...) through the same
`admitted(...)`, so both faces hold one user to one request rate, creation interval and quota.
A handler of either face gets the request and its `Call`.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from inboxd.errors import Forbidden, InboxdError, Unauthorized
from inboxd.http.body import services_of
from inboxd.model import Principal, User, WebSession
from inboxd.services.limits import Allowance
from inboxd.services.registry import Services

# Methods the free-space guard refuses (507) while space is low; DELETE stays open, as it frees space.
WRITES = frozenset({"POST", "PUT", "PATCH"})


async def _nothing() -> None:
    return None


class Call:
    """One request as its handler sees it, on either face: the services, who is calling, and the
    creation gate; on a page also the browser session and the submitted form."""

    __slots__ = ("_principal", "admit_creation", "form", "services", "session")

    def __init__(
        self,
        services: Services,
        *,
        principal: Principal | None = None,
        admit_creation: Callable[[], Awaitable[None]] = _nothing,
    ) -> None:
        self.services = services
        self._principal = principal
        # For a path that creates a mailbox: admits the request and reserves the creation interval.
        # Its service awaits it once the request is known to be valid, before any costly work.
        self.admit_creation = admit_creation
        # A page's: its session (a sign-in under way has one with no user yet) and a POST's form.
        self.session: WebSession | None = None
        self.form: dict[str, str] = {}

    @property
    def principal(self) -> Principal:
        """Who is calling: an API handler's call always knows (the token's); a page's knows once
        its session is signed in, which every page but the signed-out ones (`page("public")`)
        makes sure of before its handler runs."""
        assert self._principal is not None
        return self._principal

    @principal.setter
    def principal(self, principal: Principal) -> None:
        self._principal = principal

    @property
    def user(self) -> User:
        return self.principal.user


Handler = Callable[[Request, Call], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


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

            async def work(gate: Gate) -> Response:
                if request.method in WRITES:
                    services.space.check()
                _normalize_id(request)
                return await handler(request, Call(services, principal=principal, admit_creation=gate.admit_creation))

            return await admitted(
                services,
                principal,
                work,
                creates_mailbox=creates_mailbox,
                refusal=_refusal(principal, mailbox_token=mailbox_token, pro=pro),
            )

        run.__name__ = handler.__name__
        run.__qualname__ = handler.__qualname__
        run.__module__ = handler.__module__
        run.__doc__ = handler.__doc__
        # What the OpenAPI document needs: the handler's `@describe` and who may call it.
        run.__dict__.update(handler.__dict__)
        run.__dict__["access"] = "pro" if pro else "mailbox_token" if mailbox_token else "token"
        return run

    return wrap


async def admitted(
    services: Services,
    principal: Principal,
    work: Callable[[Gate], Awaitable[Response]],
    *,
    creates_mailbox: bool,
    refusal: InboxdError | None = None,
) -> Response:
    """Run `work` as one operation of `principal`: limited, counted, and answered with the headers.

    Most requests are admitted first. A creation is admitted when its service is about to create
    (`Gate.admit_creation`), so a malformed or invalid request answers its own 400/413 even within
    the creation interval, and only a request that could create reserves the interval.
    """
    gate = Gate(services, principal)
    if not (creates_mailbox and refusal is None):
        await gate.admit(creates_mailbox=False)
    try:
        if refusal is not None:
            raise refusal
        response = await work(gate)
    except BaseException as exc:
        await gate.failed(exc)
        if isinstance(exc, InboxdError):
            exc.headers.update(gate.headers)
        raise
    if gate.allowance is None:
        await gate.admit(creates_mailbox=False)
    # Appended as raw headers: no handler sets the limits' own headers, and `headers.update`
    # would look each one up among the response's headers first.
    response.raw_headers.extend([(_raw_name(name), value.encode("latin-1")) for name, value in gate.headers.items()])
    return response


@functools.cache
def _raw_name(name: str) -> bytes:
    """A header's name as a raw header holds it, encoded once per name (the limits' five)."""
    return name.lower().encode("latin-1")


class Gate:
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
