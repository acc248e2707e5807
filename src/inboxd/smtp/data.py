"""DATA as it arrives: the chunks kept as they came, the terminator found with `bytes.find`, and the
message assembled once at its end with the stuffed dots left out."""

from __future__ import annotations

# A line that starts with a dot: the end of DATA when the dot is alone on it, else a stuffed dot.
DOT_LINE = b"\r\n."
# Stuffed dots noted as DATA streams in; past this many (hostile input) one replace at the end does it.
MAX_DOTS = 20_000
# Messages up to this size without stuffed dots are assembled with one join.
SMALL = 256 * 1024


class DataBuffer:
    """DATA as it streams in: the chunks as they came, and where the stuffed dots are.

    The chunks are kept as received and copied once at the end: one buffer grown to 25 MiB next to
    others is copied again at each growth, on the event loop. Each chunk is searched once for CRLF
    followed by a dot: that is the end of DATA when CRLF follows the dot, a stuffed dot (RFC 5321
    4.5.2) otherwise. The stream starts with the `Received:` header (written when DATA starts, as
    Postfix does), whose final CRLF lets a first line that starts with a dot be found too.
    """

    __slots__ = ("chunks", "dots", "head", "header", "limit", "overflow", "size")

    def __init__(self, received: bytes, *, limit: int) -> None:
        self.chunks = [received]
        self.size = self.header = len(received)
        self.limit = limit
        # The stream's last bytes, searched again with the next chunk (a match may straddle them).
        self.head = received[-2:]
        # Stream offsets of the dots to drop; None once there are too many to note (hostile input).
        self.dots: list[int] | None = []
        self.overflow = False

    def feed(self, data: bytes) -> bytes | None:
        """Take bytes of DATA; once CRLF.CRLF has come, the bytes that followed it (else None)."""
        region = self.head + data
        base = self.size - len(self.head)
        pos = region.find(DOT_LINE)
        while pos >= 0:
            if len(region) < pos + 5:
                break  # whether this dot ends DATA shows with the next bytes
            if region.startswith(b"\r\n", pos + 3):
                self._keep(data, end=base + pos + 2)
                return region[pos + 5 :]
            if self.dots is not None:
                self.dots.append(base + pos + 2)
                if len(self.dots) > MAX_DOTS:
                    self.dots = None
            pos = region.find(DOT_LINE, pos + 3)
        self.head = region[pos:] if pos >= 0 else region[-2:]
        self._keep(data)
        return None

    def _keep(self, data: bytes, *, end: int | None = None) -> None:
        start = self.size
        self.size += len(data)
        if self.overflow:
            return
        if self.size - self.header > self.limit:
            # Too big: keep counting (the reply comes at the end of DATA), keep nothing.
            self.overflow = True
            self.chunks, self.dots = [], None
            return
        if end is None:
            self.chunks.append(data)
        elif end > start:
            self.chunks.append(data[: end - start])
        else:
            # The end's CRLF began in chunks already kept: take back what came after it.
            excess = start - end
            while excess:
                last = self.chunks.pop()
                cut = min(excess, len(last))
                if cut < len(last):
                    self.chunks.append(last[: len(last) - cut])
                excess -= cut

    def assemble(self) -> bytearray:
        """The message without its stuffed dots, in one buffer of its final size; each chunk is let
        go once copied, so the message is held about once, not as chunks and their join.

        The copy is one slice assignment per piece: short GIL holds, whatever the message's size.
        """
        chunks, dots, self.chunks = self.chunks, self.dots, []
        if not dots and dots is not None and self.size <= SMALL:
            return bytearray().join(chunks)  # one C call; held twice only for a moment, and small
        if dots is None:
            # Too many stuffed dots to have noted (hostile input): undone over the whole text.
            return bytearray().join(chunks).replace(DOT_LINE, b"\r\n")
        out = bytearray(sum(len(chunk) for chunk in chunks) - len(dots))
        marks = iter(dots)
        mark = next(marks, -1)
        offset = written = 0
        for index, chunk in enumerate(chunks):
            chunks[index] = b""
            view = memoryview(chunk)
            start = 0
            while 0 <= mark - offset < len(chunk):
                piece = view[start : mark - offset]
                out[written : written + len(piece)] = piece
                written += len(piece)
                start = mark - offset + 1
                mark = next(marks, -1)
            piece = view[start:]
            out[written : written + len(piece)] = piece
            written += len(piece)
            offset += len(chunk)
            del view, piece, chunk
        return out
