"""`RedisBus`: the event bus across processes, over Redis pub/sub.

Every process subscribes once, to one channel (`<prefix>events`), and filters by mailbox locally;
so a process costs Redis one subscription however many mailboxes its clients watch. A message is
`<origin> <kind> <mailbox id> <payload>`: kind `m` carries a `new_email` frame (serialized once,
by the publishing process), kind `r` a revocation's password generation, kind `i` that mail of
the mailbox entered the search index, kind `c` that caches are void, kind `s` the comma-separated
ids of browser sessions that ended. The publishing process delivers to its own listeners at
once and skips its own messages when they come back, so local latency never includes a Redis
round trip.

Publishing never blocks ingest: messages go to a bounded outbox that one task sends in pipelined
batches; while Redis is down the oldest are dropped once the outbox is full (pub/sub keeps
nothing for absent subscribers anyway). The subscriber reconnects with backoff after a loss;
mail events published while it was away are not replayed, but revocations must not be lost:
after a reconnect the bus asks its resync listeners (the WebSocket hub) to check the open
connections' tokens against the database.

WebSocket slots (at most `ws_max_connections` per mailbox, across processes) are members of a
sorted set per mailbox (`<prefix>ws:<mailbox id>`), scored with an expiry that each process
renews for its live connections; a crashed process's slots free themselves within `SLOT_TTL`.
While Redis is unreachable, each process still enforces the cap on its own connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections import deque
from collections.abc import Sequence

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from inboxd.events import Fanout, new_email_frame
from inboxd.model import NewMailEvent
from inboxd.tasks import cancel_and_wait

log = logging.getLogger("inboxd.events")
MAIL = b"m"
REVOKE = b"r"
INDEXED = b"i"
CHANGED = b"c"
SESSIONS_ENDED = b"s"
# Session ids per `s` message: 65 bytes each, so a message stays under about 32 KiB.
_SESSIONS_PER_MESSAGE = 500
_BATCH = 512
SLOT_TTL = 90.0
# Drop expired slots, then take one if fewer than the cap are held: atomic inside Redis.
_CLAIM = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


class RedisBus(Fanout):
    def __init__(self, url: str, *, prefix: str, outbox_limit: int = 10000) -> None:
        super().__init__()
        self._url = url
        self._channel = f"{prefix}events"
        self._slot_prefix = f"{prefix}ws:"
        self._slots: dict[str, str] = {}  # slot id → its sorted set
        self._released: list[tuple[str, str]] = []
        self._serial = itertools.count()
        self._origin = secrets.token_hex(8).encode()
        self._outbox: deque[bytes] = deque(maxlen=outbox_limit)
        self._wake = asyncio.Event()
        self._redis: aioredis.Redis | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # Set while the subscription is live (tests and start-up wait on it).
        self.subscribed = asyncio.Event()

    async def start(self) -> None:
        self._redis = aioredis.from_url(self._url, socket_connect_timeout=2, health_check_interval=30)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._subscribe_loop()),
            loop.create_task(self._publish_loop()),
            loop.create_task(self._renew_loop()),
        ]
        # Start-up waits briefly for the subscription so a fresh process misses nothing; a Redis
        # that is down does not stop inboxd (local delivery works, the loop keeps retrying).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self.subscribed.wait()

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    async def publish(self, events: Sequence[NewMailEvent]) -> None:
        for event in events:
            frame = new_email_frame(event)
            if self.has_listeners(event.mailbox_id):
                self.deliver(event.mailbox_id, frame)
            self._post(MAIL, event.mailbox_id, frame)

    async def revoke(self, mailbox_id: str, password_gen: int) -> None:
        self.deliver_revoke(mailbox_id, password_gen)
        self._post(REVOKE, mailbox_id, str(password_gen))

    async def indexed(self, mailbox_ids: Sequence[str]) -> None:
        for mailbox_id in mailbox_ids:
            self.deliver_indexed(mailbox_id)
            self._post(INDEXED, mailbox_id, "-")

    async def changed(self) -> None:
        self.deliver_changed()
        self._post(CHANGED, "-", "-")

    async def sessions_ended(self, session_ids: Sequence[str]) -> None:
        self.deliver_sessions_ended(session_ids)
        for start in range(0, len(session_ids), _SESSIONS_PER_MESSAGE):
            self._post(SESSIONS_ENDED, "-", ",".join(session_ids[start : start + _SESSIONS_PER_MESSAGE]))

    async def claim_slot(self, mailbox_id: str, cap: int) -> str | None:
        assert self._redis is not None
        if not self.subscribed.is_set():
            return ""  # Redis is known to be away: do not make every sign-in wait for it
        key = f"{self._slot_prefix}{mailbox_id}"
        slot = f"{self._origin.decode()}:{next(self._serial)}"
        now = time.time()
        try:
            taken = await self._redis.eval(_CLAIM, 1, key, now, now + SLOT_TTL, slot, cap, int(SLOT_TTL) + 1)
        except (RedisError, OSError) as exc:
            log.warning("WebSocket slot claim in Redis failed (%s); counting this process only", exc)
            return ""
        if not taken:
            return None
        self._slots[slot] = key
        return slot

    def release_slot(self, slot: str) -> None:
        key = self._slots.pop(slot, None)
        if key is not None:
            self._released.append((key, slot))
            self._wake.set()

    async def _renew_loop(self) -> None:
        assert self._redis is not None
        while True:
            await asyncio.sleep(SLOT_TTL / 3)
            if not self._slots:
                continue
            expiry = time.time() + SLOT_TTL
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for slot, key in list(self._slots.items()):
                        pipe.zadd(key, {slot: expiry}, xx=True)
                        pipe.expire(key, int(SLOT_TTL) + 1)
                    await pipe.execute()
            except (RedisError, OSError) as exc:
                log.warning("renewing WebSocket slots in Redis failed (%s)", exc)

    def _post(self, kind: bytes, mailbox_id: str, payload: str) -> None:
        self._outbox.append(b" ".join((self._origin, kind, mailbox_id.encode(), payload.encode())))
        self._wake.set()

    async def _publish_loop(self) -> None:
        assert self._redis is not None
        backoff = 0.05
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._outbox or self._released:
                batch = [self._outbox.popleft() for _ in range(min(_BATCH, len(self._outbox)))]
                released, self._released = self._released, []
                try:
                    async with self._redis.pipeline(transaction=False) as pipe:
                        for message in batch:
                            pipe.publish(self._channel, message)
                        for key, slot in released:
                            pipe.zrem(key, slot)
                        await pipe.execute()
                    backoff = 0.05
                except (RedisError, OSError) as exc:
                    log.warning("event publish to Redis failed (%s); retrying in %.2fs", exc, backoff)
                    self._outbox.extendleft(reversed(batch))
                    self._released.extend(released)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)

    async def _subscribe_loop(self) -> None:
        assert self._redis is not None
        backoff = 0.05
        lost = False
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                self.subscribed.set()
                backoff = 0.05
                if lost:
                    lost = False
                    self.resync()
                while True:
                    message = await pubsub.get_message(timeout=None)
                    if message is not None and message["type"] == "message":
                        self._receive(message["data"])
            except (RedisError, OSError) as exc:
                lost = True
                self.subscribed.clear()
                log.warning("Redis subscription lost (%s); reconnecting in %.2fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]

    def _receive(self, data: bytes) -> None:
        parts = data.split(b" ", 3)
        if len(parts) != 4 or parts[0] == self._origin:
            return
        _, kind, raw_id, payload = parts
        mailbox_id = raw_id.decode()
        if kind == MAIL:
            if self.has_listeners(mailbox_id):
                self.deliver(mailbox_id, payload.decode())
        elif kind == REVOKE and payload.isdigit():
            self.deliver_revoke(mailbox_id, int(payload))
        elif kind == INDEXED:
            self.deliver_indexed(mailbox_id)
        elif kind == CHANGED:
            self.deliver_changed()
        elif kind == SESSIONS_ENDED:
            self.deliver_sessions_ended(payload.decode().split(","))
