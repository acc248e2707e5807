"""The free-space guard (Postfix's `queue_minfree`): refuse new work before the disk is full.

When free space under the data directory (and, for SQLite, the database file's directory)
falls below `INBOXD_MIN_FREE_BYTES`, SMTP answers 452 at MAIL and DATA and the API's writes
answer 507 `insufficient_storage`; reads go on. Free space is looked at most once a second, so
the guard costs one `statvfs` a second however busy inboxd is, and everything resumes within a
second of space returning. PostgreSQL's own disk is not visible from here: a write it refuses
for lack of space still answers 451 / 507 through `InsufficientStorage`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from inboxd.errors import InsufficientStorage

CHECK_INTERVAL = 1.0


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on `path`'s file system."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


class SpaceGuard:
    def __init__(
        self,
        paths: Sequence[Path],
        *,
        min_free: int,
        interval: float = CHECK_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._paths = list(dict.fromkeys(paths))
        self._min_free = min_free
        self._interval = interval
        self._clock = clock
        self._checked_at = float("-inf")
        self._low = False
        self.free = -1

    def low(self) -> bool:
        """Whether free space is under the threshold (looked at most once per interval)."""
        if self._min_free <= 0:
            return False
        now = self._clock()
        if now - self._checked_at >= self._interval:
            self._checked_at = now
            sizes = [free_bytes(p) for p in self._paths if p.exists()]
            self.free = min(sizes) if sizes else -1
            self._low = 0 <= self.free < self._min_free
        return self._low

    def check(self) -> None:
        """Raise `InsufficientStorage` when space is low."""
        if self.low():
            raise InsufficientStorage(
                "Free disk space is below the operator's threshold (INBOXD_MIN_FREE_BYTES); try again later."
            )


def disabled() -> SpaceGuard:
    return SpaceGuard([], min_free=0)
