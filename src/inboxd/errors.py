"""The one exception tree of inboxd. Each error carries its API code and HTTP status.

    InboxdError                      500 internal_error
    ├── InvalidRequest               400 invalid_request (and the spec's other 400 codes)
    ├── Unauthorized                 401 invalid_token / invalid_or_expired_token / account_revoked
    ├── Forbidden                    403 access_denied / pro_required / *_limit_reached / csrf_failed /
    │                                    release_disabled / recipient_not_allowed
    │   └── SignInRefused            403 email_not_verified / sign_up_closed / account_revoked
    ├── NotFound                     404 not_found
    ├── MethodNotAllowed             405 method_not_allowed
    ├── WaitTimeout                  408 timeout (no matching message within a wait's timeout)
    ├── Conflict                     409 address_taken / domain_already_exists
    ├── Gone                         410 expired / domain_expired
    ├── PayloadTooLarge              413 payload_too_large
    ├── FilterTooBroad               422 filter_too_broad (a filter read its bound of rows, the page not full)
    ├── FaultDelayTooLong            422 fault_delay_too_long (a fault set's delays of one stage over the cap)
    ├── RateLimited                  429 rate_limit_exceeded / ops_quota_exceeded / release_limit_reached
    ├── ProviderError                502 provider_error: an identity provider down or answering nonsense
    ├── RelayError                   502 relay_error: the release relay unreachable or failing the session
    ├── RenderUnavailable            501 render_unavailable: no `inboxd[render]` extra or no Chromium
    ├── Unavailable                  503 unavailable (the server is stopping)
    │   └── IndexBehind              503 unavailable: a list on `q`/`to`/`has_attachments` met unindexed mail
    └── StorageError                 500 a fault of the database (SMTP answers 451)
        ├── DuplicateKey             409 a unique key taken (services turn it into their Conflict)
        └── InsufficientStorage      507 insufficient_storage: the disk or database is full (SMTP 451)

The HTTP mapping lives in `http/errors.py` (pages: `web/errors.py`), the SMTP mapping in `smtp/replies.py`; everything
else raises these and never builds a response itself.
"""

from __future__ import annotations


class InboxdError(Exception):
    status = 500
    code = "internal_error"
    default_message = "An unexpected error occurred."

    def __init__(self, message: str | None = None, *, code: str | None = None) -> None:
        self.message = message or self.default_message
        # Extra response headers, e.g. the limits' RateLimit-* on an error after admission.
        self.headers: dict[str, str] = {}
        if code is not None:
            self.code = code
        super().__init__(self.message)


class InvalidRequest(InboxdError):
    status = 400
    code = "invalid_request"
    default_message = "The request is malformed."


class Unauthorized(InboxdError):
    status = 401
    code = "invalid_token"
    default_message = "The token is missing, invalid or revoked."


class Forbidden(InboxdError):
    status = 403
    code = "access_denied"
    default_message = "This token may not do that."


class NotFound(InboxdError):
    status = 404
    code = "not_found"
    default_message = "Not found."


class MethodNotAllowed(InboxdError):
    status = 405
    code = "method_not_allowed"
    default_message = "That method is not allowed on this path."


class WaitTimeout(InboxdError):
    status = 408
    code = "timeout"
    default_message = "No matching message arrived within the timeout."


class Conflict(InboxdError):
    status = 409
    code = "conflict"
    default_message = "That already exists."


class SignInRefused(Forbidden):
    """A browser sign-in that must not go through; the web face shows `message` on a page."""

    code = "sign_in_refused"
    default_message = "The sign-in was refused."


class Gone(InboxdError):
    status = 410
    code = "expired"
    default_message = "This message has expired."


class PayloadTooLarge(InboxdError):
    status = 413
    code = "payload_too_large"
    default_message = "The request body is larger than 1 MiB."


class FilterTooBroad(InboxdError):
    status = 422
    code = "filter_too_broad"
    default_message = "The filter read as many messages as it may without filling the page."


class FaultDelayTooLong(InboxdError):
    status = 422
    code = "fault_delay_too_long"
    default_message = "The fault set's delays of one stage add up to more than senders should wait."


class RateLimited(InboxdError):
    status = 429
    code = "rate_limit_exceeded"
    default_message = "Too many requests."

    def __init__(self, message: str | None = None, *, code: str | None = None, retry_after: float = 1.0) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


class ProviderError(InboxdError):
    """An identity provider was unreachable, refused the exchange, or answered something invalid
    (bad state, wrong audience or issuer, a bad signature)."""

    status = 502
    code = "provider_error"
    default_message = "The sign-in provider could not complete the sign-in."


class RelayError(InboxdError):
    """The relay a release goes through could not be reached or broke the session (TLS, AUTH,
    a timeout); refusals of single recipients are answers, not this error."""

    status = 502
    code = "relay_error"
    default_message = "The relay could not take the message."


class RenderUnavailable(InboxdError):
    """Rendered images need the optional `inboxd[render]` extra (Playwright) and a Chromium binary."""

    status = 501
    code = "render_unavailable"
    default_message = "Rendering is not available on this server: install `inboxd[render]` and Chromium."


class Unavailable(InboxdError):
    status = 503
    code = "unavailable"
    default_message = "The server is stopping; try again."


class IndexBehind(Unavailable):
    """A read on a filter the search index answers (`q`, `to`, `has_attachments`) found mail of
    `mailbox_id` the index does not hold yet: the database engine has it indexed and reads again
    (`Database.catch_up`); only when that does not catch up does a client see this 503."""

    default_message = "The search index is still taking in this mailbox's newest mail; try again in a moment."

    def __init__(self, mailbox_id: str, message: str | None = None) -> None:
        super().__init__(message)
        self.mailbox_id = mailbox_id


class StorageError(InboxdError):
    """A database fault: 500 `internal_error` with no detail over HTTP, 451 over SMTP."""

    status = 500
    code = "internal_error"
    default_message = "An unexpected error occurred."


class DuplicateKey(StorageError):
    """A unique key was already taken; services turn it into their own `Conflict`."""

    status = 409
    code = "conflict"


class InsufficientStorage(StorageError):
    """The disk or the database is full (SQLITE_FULL, PostgreSQL's disk_full, ENOSPC). The write did
    not happen and may succeed once space returns: 507 over HTTP, 451 over SMTP."""

    status = 507
    code = "insufficient_storage"
    default_message = "The server has no room left to store this; try again later."


class MessageRejected(InboxdError):
    """A recipient or message refused at SMTP level; `code` names the reply in smtp/replies.py."""

    status = 400
    code = "rejected"
