"""The bounded executor of mail analysis: a message's first detail build, the checks' pure parts
(HTML compatibility, content, the list of URLs), the HTML view's sanitizing.

Any stranger can send the mail analysed here, so it runs on threads of its own
(INBOXD_ANALYSIS_THREADS), never on the default pool that ingest (`asyncio.to_thread(_prepare…)`)
and Argon2 use, and:

- single-flight: concurrent requests for one (message, part) share one computation (`shared` for
  a computation on the event loop, such as a report with its I/O; `within` for one job);
- a share per user: each user (the mailbox's owner) has at most `per_user` jobs on the threads
  (half of them, at least one); a user's further jobs wait in that user's own line, and the lines
  take turns, so one user's queue of heavy jobs never makes another user's job wait behind it.
  A free thread is not lent beyond a user's share: it is what keeps one for the next user;
- a time budget (INBOXD_ANALYSIS_BUDGET): `within` stops waiting after it and answers None, the
  caller answering what it has (services/checks/reports.py says what was cut). The job goes on
  in its thread (the steps are linear and capped, so it ends soon), still counted in its user's
  share, and when it ends its result is kept for the next caller of that (message, part)
  (`LATE_RESULTS` of them).

`runs` and `cuts` count computations started and budgets run out, per part: what tests and
operators read to see that three concurrent requests computed once. A job that finds a thread
free costs what `asyncio.to_thread` costs, plus a few dictionary updates.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar, cast

T = TypeVar("T")

# (message id, part): "detail", "pure", "html", "html+remote", "checks"...
FlightKey = tuple[str, str]

# Results that finished after every caller had stopped waiting, kept for the next caller: a few,
# since the next request comes soon after (and a report or a detail is then stored).
LATE_RESULTS = 16


class Analysis:
    """Mail analysis on `threads` threads of its own, fair between users, single-flight per
    (message, part), with a time budget per call of `within`."""

    def __init__(self, *, threads: int, budget: float, per_user: int | None = None) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="inboxd-analysis")
        self.threads = threads
        self.budget = budget
        self.per_user = per_user if per_user is not None else max(1, threads // 2)
        self._free = threads
        self._running: Counter[str] = Counter()  # jobs on the threads, per user
        # The users with jobs waiting, in turn order (a user served goes to the back of the line);
        # each waiting job is a future set when a thread is reserved for it.
        self._lines: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()
        self._shared: dict[FlightKey, asyncio.Future[Any]] = {}
        self._jobs: dict[FlightKey, asyncio.Task[Any]] = {}
        self._cut: set[FlightKey] = set()  # jobs a caller stopped waiting for
        self._late: OrderedDict[FlightKey, Any] = OrderedDict()
        self.runs: Counter[str] = Counter()
        self.cuts: Counter[str] = Counter()
        self._closed = False

    # --- one job on the threads -------------------------------------------------------------------

    async def execute(self, *, user: str, work: Callable[[], T]) -> T:
        """`work()` on the analysis threads in `user`'s turn (no single-flight of its own)."""
        if self._closed:
            raise asyncio.CancelledError
        if self._lines or self._free == 0 or self._running[user] >= self.per_user:
            await self._turn(user)
        else:
            self._take(user)
        loop = asyncio.get_running_loop()
        running = self._pool.submit(work)
        try:
            result = await asyncio.wrap_future(running, loop=loop)
        except asyncio.CancelledError:
            # The caller went, the thread goes on: its place is given back when it is free.
            running.add_done_callback(lambda _: loop.call_soon_threadsafe(self._give_back, user))
            raise
        except BaseException:
            self._give_back(user)
            raise
        self._give_back(user)
        return result

    async def _turn(self, user: str) -> None:
        """Wait in `user`'s line until a thread is reserved for this job (`_dispatch`)."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line = self._lines.get(user)
        if line is None:
            self._lines[user] = line = deque()
        line.append(turn)
        self._dispatch()
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._give_back(user)  # reserved, then given up: the thread goes to the next job
            else:
                self._leave(user, turn)
            raise

    def _take(self, user: str) -> None:
        self._free -= 1
        self._running[user] += 1

    def _give_back(self, user: str) -> None:
        self._free += 1
        self._running[user] -= 1
        if self._running[user] <= 0:
            del self._running[user]
        if self._lines:
            self._dispatch()

    def _leave(self, user: str, turn: asyncio.Future[None]) -> None:
        line = self._lines.get(user)
        if line is not None and turn in line:
            line.remove(turn)
            if not line:
                del self._lines[user]

    def _dispatch(self) -> None:
        """Reserve the free threads for the first job of each user in line under their share,
        in turn; a user served goes to the back of the line."""
        while self._free > 0:
            for user in self._lines:
                if self._running[user] < self.per_user:
                    break
            else:
                return
            line = self._lines.pop(user)
            turn = line.popleft()
            if line:
                self._lines[user] = line
            self._take(user)
            turn.set_result(None)

    # --- single-flight --------------------------------------------------------------------------------

    async def shared(self, key: FlightKey, make: Callable[[], Awaitable[T]]) -> T:
        """`await make()`, once for every concurrent caller of `key`: the first runs it, the others
        wait for its outcome (and run it themselves if the first was cancelled)."""
        while (leader := self._shared.get(key)) is not None:
            try:
                return cast(T, await asyncio.shield(leader))
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not leader.cancelled() or (task is not None and task.cancelling()):
                    raise
        outcome: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._shared[key] = outcome
        self.runs[key[1]] += 1
        try:
            result = await make()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                outcome.cancel()
            else:
                outcome.set_exception(exc)
                outcome.exception()  # retrieved: the followers, if any, raise it themselves
            raise
        else:
            outcome.set_result(result)
            return result
        finally:
            del self._shared[key]

    async def within(
        self, key: FlightKey, *, user: str, work: Callable[[], T], budget: float | None = None
    ) -> T | None:
        """`work()` on the threads, once for every concurrent caller of `key`; None once `budget`
        seconds (INBOXD_ANALYSIS_BUDGET by default) have passed: the job goes on, and its result
        is kept for the next caller of `key`."""
        if key in self._late:
            return cast(T, self._late.pop(key))
        job = self._jobs.get(key)
        if job is None:
            self.runs[key[1]] += 1
            job = asyncio.ensure_future(self.execute(user=user, work=work))
            self._jobs[key] = job
            job.add_done_callback(partial(self._landed, key))
        try:
            return cast(T, await asyncio.wait_for(asyncio.shield(job), self.budget if budget is None else budget))
        except TimeoutError:
            self._cut.add(key)
            self.cuts[key[1]] += 1
            return None

    def _landed(self, key: FlightKey, job: asyncio.Task[Any]) -> None:
        if self._jobs.get(key) is job:
            del self._jobs[key]
        cut = key in self._cut
        self._cut.discard(key)
        if job.cancelled() or job.exception() is not None:
            return  # the exception is retrieved: a cut caller is no longer there to raise it
        if cut:
            self._late[key] = job.result()
            while len(self._late) > LATE_RESULTS:
                self._late.popitem(last=False)

    def close(self) -> None:
        """Stop taking jobs; those waiting are cancelled, those running end in their threads."""
        self._closed = True
        for line in self._lines.values():
            for turn in line:
                turn.cancel()
        self._lines.clear()
        for job in self._jobs.values():
            job.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
