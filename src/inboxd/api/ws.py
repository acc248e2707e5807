"""`/api/ws`: the WebSocket that pushes a `new_email` frame when mail lands in one mailbox.

The handshake is refused with HTTP 403 when an `Origin` header is present and is not the
service's own web origin (browsers always send one; server-side clients need not). Then the
client has `ws_auth_timeout` seconds to send `{"type": "auth", "token": <mailbox token>}`: a
mailbox token, or the short-lived token the dashboard's live inbox hands its script (valid here
only, while its browser session is signed in). Every refusal is one `{"error": ...}` message
followed by close 1008; a malformed token is refused by `MailboxTokens` before it is decoded.

Each connection keeps a bounded queue of frames not yet written; a client that stops reading
fills it and is dropped (its TCP connection aborted), so it never holds up the others. A frame
still unwritten after `ws_write_timeout` seconds drops its client too, however few are queued. Pings and
the pong deadline are uvicorn's (`ws_ping_interval`/`ws_ping_timeout`, set in `app.py`), as are
the 64 KiB frame limit (close 1009) and compression being off.

Revocation: a password reset or a deletion arrives from the bus with the mailbox's new password
generation; connections authenticated with an older one get `invalid_token` and close 1008. The
connection joins its mailbox before the token's generation is checked against the database, so
a reset that commits in between is still seen.

Memory: an idle connection is what the server keeps for it plus one suspended coroutine. This
is plain ASGI, dispatched ahead of Starlette's router and middleware (whose frames would stay
suspended for the life of every connection); the bus holds one listener per mailbox, not per
connection; nothing from authentication is kept but the mailbox id and generation.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, MutableMapping
from functools import partial

import msgspec
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inboxd.api.ws_admission import Unauthenticated, client_ip
from inboxd.errors import Unauthorized
from inboxd.events import REVOKE_ALL
from inboxd.metrics import Metrics
from inboxd.services.credentials import MailboxClaims
from inboxd.services.registry import Services

log = logging.getLogger("inboxd.ws")
PATH = "/api/ws"
POLICY_VIOLATION = 1008
AUTH_OK = '{"type":"auth_ok"}'
_DENIED = b'{"error":"access_denied","message":"This Origin may not open the WebSocket."}'
_BUSY = b'{"error":"too_many_connections","message":"Too many WebSockets waiting to authenticate."}'
_REVOKED = "revoked"  # an in-queue marker, compared by identity, never sent


class AuthMessage(msgspec.Struct):
    type: str
    token: str


_decode_auth = msgspec.json.Decoder(AuthMessage).decode


def _error(code: str) -> str:
    return f'{{"error":"{code}"}}'


async def _refuse(send: Send, code: str) -> None:
    await send({"type": "websocket.send", "text": _error(code)})
    await send({"type": "websocket.close", "code": POLICY_VIOLATION})


def _transport_abort(receive: Receive) -> Callable[[], None] | None:
    """The server transport's `abort`, where the ASGI server exposes it.

    Under uvicorn, `receive` is a bound method of the connection's protocol. Closing politely
    is useless for a client that does not read: the close frame would wait behind the frames it
    never took, and the transport would linger until its buffer drained.
    """
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    abort = getattr(transport, "abort", None)
    return abort if callable(abort) else None


def _shed_handshake(scope: Scope, receive: Receive) -> None:
    """Let go of the handshake once accepted: its headers would stay for the connection's life.

    uvicorn's websockets-sans-I/O protocol keeps the request and response on the connection and
    never reads them after the handshake, and websockets' parser generator keeps the request in a
    local of its suspended frame, out of reach; so the header sets themselves are emptied, not
    just dropped. The scope's header list is ours. What each step saves per idle connection is
    in docs/performance.md (bench/ws_latency.py).
    """
    scope["headers"] = []
    protocol = getattr(receive, "__self__", None)
    if getattr(protocol, "handshake_complete", False):
        for name in ("request", "response"):
            message = getattr(protocol, name, None)
            headers = getattr(message, "headers", None)
            if isinstance(headers, MutableMapping):
                headers.clear()
            if message is not None:
                setattr(protocol, name, None)


class Connection:
    """One authenticated socket: its mailbox, its token's generation and its send queue."""

    __slots__ = (
        "_abort",
        "_limit",
        "_pending",
        "_ready",
        "_send",
        "_sender",
        "_timeout",
        "closed",
        "gen",
        "mailbox_id",
        "slot",
    )

    def __init__(
        self,
        send: Send,
        claims: MailboxClaims,
        *,
        limit: int,
        timeout: float,
        abort: Callable[[], None] | None,
    ) -> None:
        self._send = send
        self.mailbox_id = claims.mailbox_id
        self.gen = claims.password_gen
        self._limit = limit
        self._timeout = timeout
        self._abort = abort
        # Frames not yet written; None while there are none (most connections are idle).
        self._pending: deque[str] | None = None
        self._sender: asyncio.Task[None] | None = None
        # Frames that arrive before `auth_ok` is written wait until `start()`.
        self._ready = False
        self.closed = False
        # The bus's slot id when the cap is also counted across processes.
        self.slot = ""

    async def welcome(self) -> None:
        """Send `auth_ok`, then the frames that arrived meanwhile, then each as it comes."""
        await self._send({"type": "websocket.send", "text": AUTH_OK})
        self._ready = True
        if self._pending and self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._drain())

    def push(self, frame: str) -> None:
        """Queue a frame, or drop the client when its queue is full."""
        if self.closed:
            return
        if self._pending is None:
            self._pending = deque()
        elif len(self._pending) >= self._limit:
            log.info("dropping a WebSocket client of %s: %d frames unread", self.mailbox_id, len(self._pending))
            self.drop()
            return
        self._pending.append(frame)
        if self._ready and self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._drain())

    def revoked(self, password_gen: int) -> None:
        """A reset or deletion voided tokens older than `password_gen`."""
        if password_gen > self.gen:
            self.push(_REVOKED)

    async def _drain(self) -> None:
        try:
            while self._pending and not self.closed:
                frame = self._pending.popleft()
                if frame is _REVOKED:
                    await self.refuse("invalid_token")
                    return
                # The send waits while the server's buffer for this client is full.
                async with asyncio.timeout(self._timeout):
                    await self._send({"type": "websocket.send", "text": frame})
        except TimeoutError:
            log.info("dropping a WebSocket client of %s: a frame unwritten for %s s", self.mailbox_id, self._timeout)
            self._sender = None  # this task ends here; drop() must not cancel it
            self.drop()
        except Exception as exc:  # the peer went away mid-send; the receive loop ends the session
            log.debug("WebSocket send failed: %s", exc)
            self.closed = True
        finally:
            self._sender = None
            if not self._pending:
                self._pending = None

    async def refuse(self, code: str) -> None:
        if not self.closed:
            self.closed = True
            await _refuse(self._send, code)

    def drop(self) -> None:
        """Give up on a client that does not read: abort its transport, forget its frames."""
        self.closed = True
        self._pending = None
        if self._abort is not None:
            self._abort()
        elif self._sender is not None:
            self._sender.cancel()

    def stop(self) -> None:
        self.closed = True
        if self._sender is not None:
            self._sender.cancel()


class WebSocketHub:
    """The `/api/ws` ASGI app and this process's open connections, by mailbox."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._open: dict[str, set[Connection]] = {}
        self._unsubscribe: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {}
        self._resyncs: set[asyncio.Task[None]] = set()
        services.bus.on_resync(self._resync)
        settings = services.settings
        self.unauthenticated = Unauthenticated(
            total=settings.ws_max_unauthenticated, per_ip=settings.ws_max_unauthenticated_per_ip
        )

    def count(self, mailbox_id: str | None = None) -> int:
        if mailbox_id is None:
            return sum(len(c) for c in self._open.values())
        return len(self._open.get(mailbox_id, ()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Only this frame (and the server's) stays suspended while a connection idles.
        ip = client_ip(scope)
        if not self.unauthenticated.enter(ip):
            if (await receive())["type"] == "websocket.connect":
                await _deny(scope, receive, send, status=429, body=_BUSY)
            return
        try:
            conn = await self._open_session(scope, receive, send)
        finally:
            self.unauthenticated.leave(ip)
        if conn is None:
            return
        try:
            while (await receive())["type"] != "websocket.disconnect":
                pass  # nothing a client says after auth changes anything
        finally:
            self._leave(conn)

    async def _open_session(self, scope: Scope, receive: Receive, send: Send) -> Connection | None:
        """Handshake and auth message: a joined connection, or None once refused or gone."""
        settings = self._services.settings
        if (await receive())["type"] != "websocket.connect":
            return None
        origin = _header(scope, b"origin")
        if origin is not None and origin.rstrip("/").lower() != settings.resolved_web_origin.lower():
            await _deny(scope, receive, send)
            return None
        await send({"type": "websocket.accept"})
        _shed_handshake(scope, receive)
        try:
            async with asyncio.timeout(settings.ws_auth_timeout):
                message = await receive()
        except TimeoutError:
            await _refuse(send, "auth_timeout")
            return None
        if message["type"] == "websocket.disconnect":
            return None
        token = _auth_token(message)
        if token is None:
            await _refuse(send, "invalid_auth_message")
            return None
        try:
            claims = self._services.mailbox_tokens.check(token, now=self._services.clock())
        except Unauthorized:
            await _refuse(send, "invalid_token")
            return None
        cap = settings.ws_max_connections
        slot = None
        if self.count(claims.mailbox_id) < cap:
            slot = await self._services.bus.claim_slot(claims.mailbox_id, cap)
        if slot is None or self.count(claims.mailbox_id) >= cap:
            if slot:
                self._services.bus.release_slot(slot)
            await _refuse(send, "too_many_connections")
            return None
        conn = Connection(
            send,
            claims,
            limit=settings.ws_send_queue,
            timeout=settings.ws_write_timeout,
            abort=_transport_abort(receive),
        )
        conn.slot = slot
        self._join(conn)
        try:
            admitted = await self._admit(conn, token)
        except BaseException:
            self._leave(conn)
            raise
        if not admitted:
            self._leave(conn)
            return None
        return conn

    async def _admit(self, conn: Connection, token: str) -> bool:
        """Check the token against the database (generation, owner active), then `auth_ok`."""
        try:
            principal = await self._services.users.authenticate(token, self._services.mailbox_tokens, websocket=True)
        except Unauthorized:
            principal = None
        if principal is None or principal.mailbox_id != conn.mailbox_id:
            await conn.refuse("invalid_token")
            return False
        await conn.welcome()
        return True

    def _join(self, conn: Connection) -> None:
        mailbox_id = conn.mailbox_id
        if mailbox_id not in self._open:
            self._open[mailbox_id] = set()
            bus = self._services.bus
            self._unsubscribe[mailbox_id] = (
                bus.listen(mailbox_id, partial(self._deliver, mailbox_id)),
                bus.on_revoke(mailbox_id, partial(self._revoke, mailbox_id)),
            )
        self._open[mailbox_id].add(conn)

    def _leave(self, conn: Connection) -> None:
        conn.stop()
        if conn.slot:
            self._services.bus.release_slot(conn.slot)
            conn.slot = ""
        mine = self._open.get(conn.mailbox_id)
        if mine is None:
            return
        mine.discard(conn)
        if not mine:
            del self._open[conn.mailbox_id]
            for remove in self._unsubscribe.pop(conn.mailbox_id, ()):
                remove()

    def _deliver(self, mailbox_id: str, frame: str) -> None:
        for conn in tuple(self._open.get(mailbox_id, ())):
            conn.push(frame)

    def _revoke(self, mailbox_id: str, password_gen: int) -> None:
        for conn in tuple(self._open.get(mailbox_id, ())):
            conn.revoked(password_gen)

    def _resync(self) -> None:
        task = asyncio.get_running_loop().create_task(self._check_generations())
        self._resyncs.add(task)
        task.add_done_callback(self._resyncs.discard)

    async def _check_generations(self) -> None:
        """After the bus may have missed revocations: close what the database says is void."""
        mailbox_ids = list(self._open)
        for start in range(0, len(mailbox_ids), 500):
            batch = mailbox_ids[start : start + 500]
            current = await self._services.mailboxes.password_gens(batch)
            for mailbox_id in batch:
                self._revoke(mailbox_id, current.get(mailbox_id, REVOKE_ALL))


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


async def _deny(scope: Scope, receive: Receive, send: Send, *, status: int = 403, body: bytes = _DENIED) -> None:
    """An HTTP error before the handshake completes (a body where the server allows one)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        # uvicorn (0.54) forgets that such a response ends the handshake and logs an ERROR for
        # each one, which anyone could then fill the log with.
        protocol = getattr(receive, "__self__", None)
        if getattr(protocol, "initial_response", None) is not None and hasattr(protocol, "handshake_complete"):
            setattr(protocol, "handshake_complete", True)  # noqa: B010 - uvicorn's, set only where it exists
    else:
        await send({"type": "websocket.close", "code": POLICY_VIOLATION})


def _auth_token(message: Message) -> str | None:
    text = message.get("text")
    if text is None:
        return None
    try:
        auth = _decode_auth(text)
    except (msgspec.DecodeError, RecursionError):  # RecursionError: objects nested ~1,000 deep
        return None
    return auth.token if auth.type == "auth" else None


def with_websocket(app: ASGIApp, services: Services, *, metrics: Metrics | None = None) -> ASGIApp:
    """`app` with `/api/ws` answered ahead of it."""
    hub = WebSocketHub(services)
    if metrics is not None:
        gauge = metrics.ws_connections

        async def count_open() -> None:
            gauge.set(hub.count())

        metrics.on_scrape(count_open)

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and scope["path"] == PATH:
            await hub(scope, receive, send)
        else:
            await app(scope, receive, send)

    return dispatch
