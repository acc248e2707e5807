"""A small typed client for the inboxd REST API over httpx: `Client` (sync) and `AsyncClient`.

    from inboxd.client import Client

    with Client("http://127.0.0.1:8025", token="ibx_...") as inboxd:
        box = inboxd.create_mailbox()                   # a random address on the default domain
        ...                                             # the code under test sends mail to box.address
        msg = inboxd.wait_for(box.address, subject="Verify", timeout=30)
        print(msg.code, msg.links[0].url)

Every operation is written once, in `AsyncClient` (`_async/client.py`), as the request it sends
(`calls._Call`: method, path, query, body and how to read the answer); `Client` is generated from
it by unasync (`python -m inboxd.client.generate`), so the two cannot drift apart. Mailboxes are
named by id or address wherever the API accepts either. Errors answer `ApiError` with the API's
`error` code; a wait that ends without a message raises `WaitTimedOut`. A 429 is retried after its
`Retry-After` (a few times, at most 10 s each), so a test suite may run into the rate limits of a
shared server without failing.

`/api/accounts/...` answers only for the mailboxes the token made; the user's other mailboxes (made
in the dashboard, or with another token) answer 404 there and are reached through the user's routes
(`/api/user/accounts/{id}/...`, Pro). Listing, waiting, reading a message, deleting and resetting
a password try the token's route, then the user's on a 404, and remember which one answered.
"""

from inboxd.client._async.client import AsyncClient
from inboxd.client._sync.client import Client
from inboxd.client.calls import MAX_WAIT
from inboxd.client.results import (
    ApiError,
    Attachment,
    Filters,
    Json,
    Link,
    Mailbox,
    Message,
    MessageSummary,
    NoCodeFound,
    SandboxInfo,
    SandboxMessage,
    ServerInfo,
    WaitTimedOut,
    When,
)

__all__ = [
    "MAX_WAIT",
    "ApiError",
    "AsyncClient",
    "Attachment",
    "Client",
    "Filters",
    "Json",
    "Link",
    "Mailbox",
    "Message",
    "MessageSummary",
    "NoCodeFound",
    "SandboxInfo",
    "SandboxMessage",
    "ServerInfo",
    "WaitTimedOut",
    "When",
]
