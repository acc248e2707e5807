"""The mail transaction of an SMTP session: MAIL, RCPT and DATA, and at DATA's end the faults, the
space check, the delivery through the session's hooks, its reply and its metrics.

`Transaction` is a base class of the session (`smtp/session.py`), not an object of its own, so a
command costs the same method lookup it did when all of it was one class.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import TYPE_CHECKING, Any

from inboxd.errors import InboxdError, MessageRejected
from inboxd.ids import random_hex
from inboxd.logs import write_info
from inboxd.model import FaultSet
from inboxd.services.fault_rules import NOTHING, Action
from inboxd.services.faults import FaultService, first_action
from inboxd.services.ingest import OFF_LOOP_BYTES, Recipient
from inboxd.smtp import replies as R
from inboxd.smtp.data import DataBuffer
from inboxd.smtp.hooks import Listener, SessionHooks

log = logging.getLogger("inboxd.smtp")


class Transaction:
    """MAIL, RCPT, DATA and the delivery at DATA's end; the state is the session's."""

    declared_size: int | None = None
    queue_id = ""
    # The session's `Received:` header up to the queue id, with what it was written from.
    received_head: tuple[tuple[str | None, bool, bool, bool, str], str] | None = None

    if TYPE_CHECKING:
        # What the session (`smtp/session.py`) holds and does, as this part of it uses it.
        server: Listener[Any]
        hooks: SessionHooks
        transport: asyncio.Transport | None
        buf: bytearray
        message: DataBuffer | None
        busy: bool
        delivering: bool
        peer: str
        helo: str | None
        esmtp: bool
        secure: bool
        sender: str | None
        recipients: list[Recipient]
        envelope: list[str]
        held: list[bytes] | None

        def reply(self, text: str) -> None: ...
        def error(self, text: str) -> None: ...
        def reset(self) -> None: ...
        def pump(self) -> None: ...
        def close(self, text: str | None) -> None: ...
        def drop(self) -> None: ...
        def _release(self) -> None: ...
        def _end_data(self, rest: bytes) -> None: ...

    def do_mail(self, arg: str) -> None:
        if self.helo is None:
            self.error(R.NEED_HELO)
            return
        if self.sender is not None:
            self.error(R.NESTED_MAIL)
            return
        refusal = self.hooks.mail_refusal()
        if refusal is not None:
            self.error(refusal)
            return
        if self._short_of_space(stage="MAIL"):
            return
        parsed = _path(arg, "FROM:")
        if parsed is None:
            self.error(R.SYNTAX_ERROR)
            return
        address, params = parsed
        if address and not _plausible(address):
            self.error(R.BAD_ADDRESS)
            return
        for param in params:
            key, _, value = param.partition("=")
            key = key.upper()
            if key == "SIZE":
                if not (value.isascii() and value.isdigit()):
                    self.error(R.SYNTAX_ERROR)
                    return
                if int(value) > self.server.settings.max_message_size:
                    self.error(R.TOO_BIG)
                    return
            elif key == "BODY":
                if value.upper() not in ("7BIT", "8BITMIME"):
                    self.error(R.SYNTAX_ERROR)
                    return
            elif key != "SMTPUTF8":
                self.error(R.PARAM_UNKNOWN)
                return
        declared = next((int(p[5:]) for p in params if p.upper().startswith("SIZE=")), None)
        faults = self.hooks.session_faults()
        if faults is not None and "mail" in faults.stages:
            self._faulty([faults], "mail", lambda: self._take_sender(address, declared), sender=address)
            return
        self._take_sender(address, declared)

    def _take_sender(self, address: str, declared: int | None) -> None:
        self.sender = address
        self.declared_size = declared
        self.reply(R.SENDER_OK)

    def do_rcpt(self, arg: str) -> None:
        if self.sender is None:
            self.error(R.NEED_MAIL)
            return
        parsed = _path(arg, "TO:")
        if parsed is None or not parsed[0]:
            self.error(R.SYNTAX_ERROR)
            return
        address, params = parsed
        if params:
            self.error(R.PARAM_UNKNOWN)
            return
        # A recipient must be UTF-8 (RFC 6531): bytes that are not arrive as surrogates, which no
        # mailbox address holds and no database takes.
        if not _plausible(address) or "@" not in address or not _is_utf8(address):
            self.error(R.BAD_ADDRESS)
            return
        if len(self.envelope) >= self.server.settings.max_recipients:
            self.reply(R.TOO_MANY_RECIPIENTS)
            return
        recipient = self.hooks.cached(address, declared_size=self.declared_size)
        if recipient is not None:  # answered from memory: no task, no wait
            self._accept(address, recipient)
            return
        self.busy = True
        self.server.tasks.spawn(self._resolve(address))

    async def _resolve(self, address: str) -> None:
        try:
            recipient = await self.hooks.resolve(address, declared_size=self.declared_size)
            self.held = []  # this answer goes out with those of the commands pipelined behind it
        except InboxdError as exc:
            self.error(R.reply_for(exc))
        except Exception:
            log.exception("recipient lookup failed")
            self.reply(R.TEMP_FAILURE)
        else:
            if not self._accept(address, recipient):
                return  # a fault's delay answers later, and goes on with the session then
        self.busy = False
        self.pump()

    def _accept(self, address: str, recipient: Recipient) -> bool:
        """Accept the recipient, unless its mailbox's faults answer RCPT or its DATA faults differ
        from the first recipient's; False while a delay runs."""
        faults = recipient.faults
        first = self.recipients[0].faults if self.recipients else faults
        # One mailbox's DATA or final-dot fault must never answer for another's message (two None
        # checks for mail without faults).
        if (faults is not None or first is not None) and _data_faults(faults) != _data_faults(first):
            self.reply(R.SPLIT_TRANSACTION)
            return True
        if faults is not None and "rcpt" in faults.stages:
            proceed = functools.partial(self._take_recipient, address, recipient)
            return self._faulty([faults], "rcpt", proceed, sender=self.sender or "", recipient=address)
        self._take_recipient(address, recipient)
        return True

    def _take_recipient(self, address: str, recipient: Recipient) -> None:
        # Plus addressing can name one mailbox twice: it gets one copy, with the tags of both.
        for i, known in enumerate(self.recipients):
            if known.mailbox.id == recipient.mailbox.id:
                if recipient.tags:
                    self.recipients[i] = dataclasses.replace(known, tags=(*known.tags, *recipient.tags))
                break
        else:
            self.recipients.append(recipient)
        self.envelope.append(address)
        self.reply(R.RECIPIENT_OK)

    def do_data(self, arg: str) -> None:
        if not self.recipients:
            self.error(R.NEED_RCPT if self.sender is not None else R.NEED_MAIL)
            return
        if arg:
            self.error(R.SYNTAX_ERROR)
            return
        if self._short_of_space(stage="DATA"):
            self.reset()
            return
        sets = [r.faults for r in self.recipients if r.faults is not None and "data" in r.faults.stages]
        if sets:
            self._faulty(sets, "data", self._start_data, refused=self.reset, sender=self.sender or "")
            return
        self._start_data()

    def _start_data(self) -> None:
        self.reply(R.START_DATA)
        self.queue_id = random_hex(16)
        limit = self.server.settings.max_message_size
        # Room for the dots of a stuffed message of the largest size; more is answered 552 at its end.
        self.message = DataBuffer(self._received(self.queue_id), limit=limit + limit // 8 + 1024)
        pipelined = bytes(self.buf)
        self.buf.clear()
        if pipelined:
            rest = self.message.feed(pipelined)
            if rest is not None:
                self._end_data(rest)

    async def _deliver(self, message: DataBuffer) -> None:
        started = time.perf_counter()
        size = max(0, message.size - message.header)
        answer = R.TEMP_FAILURE
        try:
            if message.overflow:
                answer = R.TOO_BIG
                return
            action = await self._data_end_action()
            if action is not NOTHING:
                fault = await self._data_end_fault(action)
                if fault is not None:
                    answer = fault
                    return
            if message.size > OFF_LOOP_BYTES:
                async with self.server.big:
                    await self._deliver_message(message)
            else:
                await self._deliver_message(message)
            answer = R.QUEUED.format(id=self.queue_id)
        except InboxdError as exc:
            answer = R.reply_for(exc)
        except Exception:
            log.exception("delivery failed")
        finally:
            self.held = []  # the answer goes out with those of the commands pipelined behind it
            if answer:
                self.reply(answer)
            self._record(answer or "421 dropped", size=size, seconds=time.perf_counter() - started)
            if not answer:
                self.drop()
            elif answer.startswith("421"):
                self.close(None)
            self.reset()
            self.delivering = False
            self.busy = False
            self.pump()

    async def _data_end_action(self) -> Action:
        engine = self.server.faults
        if engine is None or all(r.faults is None for r in self.recipients):
            return NOTHING
        sets = [r.faults for r in self.recipients]
        try:
            return await first_action(engine, sets, "data_end", client=self.peer, sender=self.sender or "")
        except Exception:
            log.exception("SMTP faults could not be decided; answering normally")
            return NOTHING

    async def _data_end_fault(self, action: Action) -> str | None:
        """A data_end fault, before anything is stored: the reply instead of 250, "" to drop the
        connection without one, or None to go on and deliver (a delay alone)."""
        if action.delay:
            await asyncio.sleep(action.delay)
        if action.disconnect:
            return ""
        return action.reply

    def _faulty(
        self,
        sets: list[FaultSet],
        stage: str,
        proceed: Callable[[], None],
        *,
        refused: Callable[[], None] | None = None,
        sender: str = "",
        recipient: str = "",
    ) -> bool:
        """Answer a stage that has fault rules once they are decided (their counters may live in
        Redis): the fault's reply, a drop, or `proceed` (the normal answer) after any delay. Input
        is held meanwhile; False, since the answer comes later."""
        engine = self.server.faults
        if engine is None:
            proceed()
            return True
        self._release()
        self.busy = True
        self.server.tasks.spawn(self._decide(engine, sets, stage, proceed, refused, sender, recipient))
        return False

    async def _decide(
        self,
        engine: FaultService,
        sets: list[FaultSet],
        stage: str,
        proceed: Callable[[], None],
        refused: Callable[[], None] | None,
        sender: str,
        recipient: str,
    ) -> None:
        try:
            try:
                action = await first_action(engine, sets, stage, client=self.peer, sender=sender, recipient=recipient)
            except Exception:
                log.exception("SMTP faults could not be decided; answering normally")
                action = NOTHING
            if action.delay:
                await asyncio.sleep(action.delay)
            self.held = []
            if self.transport is not None:
                self._answer_fault(action, proceed, refused)
        finally:
            self.busy = False
            if self.transport is not None:
                self.pump()

    def _answer_fault(self, action: Action, proceed: Callable[[], None], refused: Callable[[], None] | None) -> None:
        if action.disconnect:
            self._record("421 dropped", size=0, seconds=action.delay, stage="fault")
            self.drop()
            return
        if action.reply is None:
            proceed()
            return
        if refused is not None:
            refused()
        self._record(action.reply, size=0, seconds=action.delay, stage="fault")
        if action.reply.startswith("421"):
            self.close(action.reply)  # 421 means the server closes the connection (RFC 5321 3.8)
        else:
            self.reply(action.reply)

    async def _deliver_message(self, message: DataBuffer) -> None:
        # No local here keeps the bytes: ingest lets go of them once they are compressed.
        assert self.sender is not None
        await self.hooks.deliver(
            sender=self.sender,
            recipients=self.recipients,
            envelope=self.envelope,
            raw=await self._raw(message),
            client=(self.peer, self.helo),
        )

    async def _raw(self, message: DataBuffer) -> bytearray:
        """The bytes to store (assembled in a thread when big); too big is refused."""
        if message.size > OFF_LOOP_BYTES:
            raw = await asyncio.to_thread(message.assemble)
        else:
            raw = message.assemble()
        if len(raw) - message.header > self.server.settings.max_message_size:
            raise MessageRejected(code="too_big")
        return raw

    def _short_of_space(self, *, stage: str) -> bool:
        """Answer 452 when free space is under INBOXD_MIN_FREE_BYTES (the sender retries later)."""
        space = self.server.space
        if space is None or not space.low():
            return False
        self.reply(R.INSUFFICIENT_STORAGE)
        self._record(R.INSUFFICIENT_STORAGE, size=0, seconds=0.0, stage=stage)
        return True

    def _record(self, answer: str, *, size: int, seconds: float, stage: str = "DATA") -> None:
        """The transaction's metrics and its one log line (never the message, never AUTH)."""
        code = answer[:3]
        outcome = "accepted" if code == "250" else "deferred" if code[0] == "4" else "rejected"
        self.server.tally.transaction(outcome, code, size, seconds)
        if log.isEnabledFor(logging.INFO):
            fields = {
                "client": self.peer,
                "from": self.sender if self.sender is not None else "-",
                "mailbox": ",".join(r.mailbox.address for r in self.recipients) or "-",
                "size": size,
                "stage": stage,
                "reply": answer,
                "ms": round(seconds * 1000, 2),
            }
            # Under `serve`'s text set-up the line goes straight to its handler (`logs.write_info`,
            # as the HTTP access line does); else the record is made and handled as `log.info`
            # would, without its look up the stack for the caller's file and line, which no
            # formatter writes (`logs.py`).
            if write_info(log, f"smtp transaction {outcome}", fields):
                return
            record = log.makeRecord(
                log.name, logging.INFO, __file__, 0, "smtp transaction %s", (outcome,), None, extra={"fields": fields}
            )
            log.handle(record)

    def _received(self, queue_id: str) -> bytes:
        # RFC 5321 4.4: the recipient path as sent, when there is exactly one (never the sandbox's own address).
        single = f"\r\n\tfor <{self.envelope[0]}>" if len(self.envelope) == 1 else ""
        stamp = _date_of(int(time.time()))
        return f"{self._received_head()}id {queue_id}{single}; {stamp}\r\n".encode("utf-8", "surrogateescape")

    def _received_head(self) -> str:
        """The `Received:` header up to the queue id: the same for every message of a session until
        EHLO, STARTTLS or AUTH changes it, so it is written once, not per message."""
        authenticated = self.hooks.authenticated
        key = (self.helo, self.esmtp, self.secure, authenticated, self.peer)
        if self.received_head is not None and self.received_head[0] == key:
            return self.received_head[1]
        proto = "ESMTP" if self.esmtp else "SMTP"
        if self.secure:
            proto += "S"
        if authenticated:
            proto += "A"
        helo = (self.helo or "unknown").replace("\r", "").replace("\n", "")
        head = f"Received: from {helo} ([{self.peer}])\r\n\tby {self.server.hostname} (inboxd) with {proto} "
        self.received_head = (key, head)
        return head


def _data_faults(faults: FaultSet | None) -> str | None:
    """What a recipient's DATA and final dot answer with: its set's version when the set has rules
    for those stages, else None (no faults, or RCPT's alone, which answer each recipient apart)."""
    if faults is None or ("data" not in faults.stages and "data_end" not in faults.stages):
        return None
    return faults.version


@functools.lru_cache(maxsize=2)
def _date_of(second: int) -> str:
    """RFC 5322's date of a second: formatted once per second, not once per message (pure)."""
    return format_datetime(datetime.fromtimestamp(second, UTC))


def _path(arg: str, keyword: str) -> tuple[str, list[str]] | None:
    """`FROM:<addr> PARAMS` → (addr, params); None when malformed. `<>` gives ""."""
    if arg[: len(keyword)].upper() != keyword:
        return None
    rest = arg[len(keyword) :].lstrip()
    if not rest.startswith("<"):
        return None
    close = rest.find(">")
    if close < 0:
        return None
    address = rest[1:close].strip()
    if address.startswith("@") and ":" in address:
        address = address.split(":", 1)[1]  # an obsolete source route
    return address, rest[close + 1 :].split()


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# What no address on MAIL or RCPT may hold: whitespace (`\s` is `str.isspace`), angle brackets, controls.
_IMPLAUSIBLE = re.compile(r"[\s<>\x00-\x1f]")


def _plausible(address: str) -> bool:
    return 0 < len(address) <= 320 and _IMPLAUSIBLE.search(address) is None
