"""The free-space guard (Postfix's `queue_minfree`): refuse new work before the disk is full.

When free space under the data directory (and, for SQLite, the database file's directory)
falls below `INBOXD_MIN_FREE_BYTES` plus the guard's reserve, SMTP answers 452 at MAIL and DATA
and the API's writes answer 507 `insufficient_storage`; reads and deletes go on.

What counts as free, and when it is looked at:
- On the database's file system, the pages SQLite keeps free inside its file count too (its
  freelist, `reusable`): a delete frees the pages of the mail it removes, and new mail is
  written into them before the file grows, but the file never shrinks, so `statvfs` alone would
  never see a delete (the guard stayed at 452 for good).
- The reserve is what mail accepted just before the refusal may still write (`reserve_for`:
  twice the largest message, once in SQLite's WAL and once in the database, and on SQLite the
  WAL's pages not yet copied into the database file), so the guard stops with the threshold
  still free rather than overshooting it.
- Free space is looked at once a second while it is well above the threshold, and at every
  call once it comes near (within the reserve and twice the largest fall seen between two
  looks): a look is a `statvfs` and, on SQLite, one pragma, microseconds, where a second's
  worth of accepted mail overshot the threshold by megabytes.

PostgreSQL's own disk is not visible from here: a write it refuses for lack of space still
answers 451 / 507 through `InsufficientStorage`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from inboxd.errors import InsufficientStorage

CHECK_INTERVAL = 1.0
# What SQLite's WAL holds at most between two automatic checkpoints (1,000 pages of 4 KiB): mail
# written there reaches the database file, which grows for it, only at the next checkpoint.
SQLITE_WAL_BYTES = 1000 * 4096


# Within this much of where it stops, the guard looks at every call: mail arriving at tens of MB a
# second would otherwise fill the second between two looks past the threshold (a look costs a
# statvfs and two pragmas, microseconds).
NEAR_MARGIN = 64 * 1024 * 1024


def reserve_for(max_message_size: int, *, sqlite: bool) -> int:
    """What mail accepted just before a refusal may still write: the largest message twice (in
    the WAL, then in the database) and, on SQLite, a WAL's worth not yet in the database file."""
    return 2 * max_message_size + (SQLITE_WAL_BYTES if sqlite else 0)


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on `path`'s file system."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def _device(path: Path) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


class SpaceGuard:
    def __init__(
        self,
        paths: Sequence[Path],
        *,
        min_free: int,
        reserve: int = 0,
        database_dir: Path | None = None,
        reusable: Callable[[], int] | None = None,
        interval: float = CHECK_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        free: Callable[[Path], int] = free_bytes,
    ) -> None:
        """`reusable` gives the bytes the database will reuse before it grows (SQLite's free
        pages), counted as free on every path of `database_dir`'s file system; `free` is the
        file system's own answer (`statvfs`)."""
        self._paths = list(dict.fromkeys(paths))
        self._min_free = min_free
        self._reserve = max(0, reserve)
        self._database_dir = database_dir
        self._reusable = reusable
        self._interval = interval
        self._clock = clock
        self._free = free
        self._checked_at = float("-inf")
        self._low = False
        self._near = True
        # The largest fall of free space seen between two looks: how far it may fall before the next.
        self._fall = 0
        self.free = -1

    def low(self) -> bool:
        """Whether free space, less the reserve, is under the threshold (looked at once per
        interval while far above it, at every call near it)."""
        if self._min_free <= 0:
            return False
        now = self._clock()
        if self._near or now - self._checked_at >= self._interval:
            self._checked_at = now
            before, self.free = self.free, self._look()
            if before >= 0 and self.free >= 0:
                self._fall = max(self._fall, before - self.free)
            stop = self._min_free + self._reserve
            self._low = 0 <= self.free < stop
            self._near = 0 <= self.free < stop + max(NEAR_MARGIN, self._reserve + 2 * self._fall)
        return self._low

    def _look(self) -> int:
        """The least free space among the watched paths (-1 when none exists yet)."""
        sizes: list[int] = []
        database_device = None if self._database_dir is None else _device(self._database_dir)
        reusable: int | None = None
        for path in self._paths:
            if not path.exists():
                continue
            size = self._free(path)
            if self._reusable is not None and database_device is not None and _device(path) == database_device:
                if reusable is None:
                    reusable = self._reusable()
                size += reusable
            sizes.append(size)
        return min(sizes) if sizes else -1

    def check(self) -> None:
        """Raise `InsufficientStorage` when space is low."""
        if self.low():
            raise InsufficientStorage(
                "Free disk space is below the operator's threshold (INBOXD_MIN_FREE_BYTES); try again later."
            )


def disabled() -> SpaceGuard:
    return SpaceGuard([], min_free=0)
