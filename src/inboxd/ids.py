"""Identifiers: UUIDs as text (random ones, version 4, and time-ordered ones, version 7), made
without the `uuid.UUID` object.

`str(uuid.uuid4())` builds an object, checks and sets its bits on a 128-bit integer and formats
it back; ingest makes three or more per message. The same random bits formatted directly cost a
fraction of that, and give the same kind of id.
"""

from __future__ import annotations

import os
import threading

_VARIANT = "89ab89ab89ab89ab"  # RFC 9562 variant bits 10xx over the 16 values of a hex digit


# Random bytes are drawn from the kernel this many at a time, per thread. A `getrandom` call
# lets go of the GIL, and a thread that lets go of it while another waits for it waits in turn
# to take it back; ingest makes three ids a message (docs/performance.md, "The writer's
# hand-overs"). The bytes are the kernel's all the same: only the calls are fewer.
POOL_BYTES = 4096


class _Pool(threading.local):
    def __init__(self) -> None:
        self.data = b""
        self.at = 0


_pool = _Pool()


def _forget_pool() -> None:
    # A forked child must not hand out the bytes its parent will hand out too.
    global _pool
    _pool = _Pool()


os.register_at_fork(after_in_child=_forget_pool)


def random_bytes(n: int) -> bytes:
    """`n` bytes of `os.urandom`, taken from this thread's pool of them."""
    pool = _pool
    end = pool.at + n
    if end > len(pool.data):
        if n > POOL_BYTES // 4:
            return os.urandom(n)
        pool.data = os.urandom(POOL_BYTES)
        pool.at, end = 0, n
    taken = pool.data[pool.at : end]
    pool.at = end
    return taken


def _canonical(h: str, version: str) -> str:
    """32 hex digits as a UUID's text, with `version` and the RFC 9562 variant set over theirs."""
    return f"{h[:8]}-{h[8:12]}-{version}{h[13:16]}-{_VARIANT[int(h[16], 16)]}{h[17:20]}-{h[20:]}"


def random_uuid() -> str:
    """A random (version 4) UUID in its canonical text form, as `str(uuid.uuid4())`."""
    return _canonical(random_bytes(16).hex(), "4")


def random_hex(digits: int = 32) -> str:
    """`digits` random lowercase hex digits, as `uuid.uuid4().hex[:digits]` is random in them."""
    return random_bytes((digits + 1) // 2).hex()[:digits]


def time_ordered_uuid(at: float) -> str:
    """A UUID version 7 (RFC 9562) for the time `at` (Unix seconds): 48 bits of milliseconds, then 74
    random bits. Stored messages and sources take these as keys: each insert lands at the right
    edge of the primary key's B-tree instead of on a random page of it, so a commit writes one page
    of each such index rather than one per message (docs/performance.md, "Ingest's writes")."""
    return _canonical(f"{int(at * 1000) & 0xFFFF_FFFF_FFFF:012x}{random_bytes(10).hex()}", "7")
