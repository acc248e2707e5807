"""Raw message bytes at rest: zstandard level 1, fast and about a third of the size for a typical
message (figures in docs/performance.md).

Compressors are not thread-safe, so each thread keeps its own.
"""

from __future__ import annotations

import threading

import zstandard

_local = threading.local()


def _codecs() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    codecs: tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor] | None = getattr(_local, "codecs", None)
    if codecs is None:
        codecs = (zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor())
        _local.codecs = codecs
    return codecs


def compress(raw: bytes | bytearray) -> bytes:
    data: bytes = _codecs()[0].compress(raw)
    return data


def decompress(data: bytes | bytearray) -> bytes:
    raw: bytes = _codecs()[1].decompress(data)
    return raw
