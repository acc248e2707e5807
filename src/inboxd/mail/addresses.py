"""The addresses a message's own headers name (To, Cc, Bcc); pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from email.parser import BytesHeaderParser
from email.policy import compat32
from email.utils import getaddresses

# Header blocks beyond this are not read for addresses (the summary parse has the same bound).
_HEADER_LIMIT = 256 * 1024


@dataclass(frozen=True, slots=True)
class HeaderRecipients:
    to: tuple[str, ...]
    cc: tuple[str, ...]
    bcc: tuple[str, ...]


def header_recipients(raw: bytes) -> HeaderRecipients:
    """The bare addresses of To, Cc and Bcc, in order, without duplicates; malformed entries skipped."""
    end = raw.find(b"\r\n\r\n", 0, _HEADER_LIMIT)
    head = raw[: end + 2] if end >= 0 else raw[:_HEADER_LIMIT]
    headers = BytesHeaderParser(policy=compat32).parsebytes(head)

    def named(name: str) -> tuple[str, ...]:
        values = [str(v) for v in headers.get_all(name, [])]
        found = [addr.strip() for _, addr in getaddresses(values) if "@" in addr]
        return tuple(dict.fromkeys(found))

    return HeaderRecipients(to=named("To"), cc=named("Cc"), bcc=named("Bcc"))
