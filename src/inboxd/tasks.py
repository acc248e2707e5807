"""Background-task plumbing shared by the workers, the SMTP sessions and the event bus."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel the tasks, then wait until each has finished, so nothing outlives its owner.

    The wait is `asyncio.wait`, which never raises the tasks' own `CancelledError`: a
    `CancelledError` here is the caller's own cancellation, and it propagates. (Suppressing it
    around `await task` would swallow it and let a cancelled caller carry on.) A task that ended
    with an error other than its cancellation has that error raised here, the first one found.
    """
    pending = list(tasks)
    if not pending:
        return
    for task in pending:
        task.cancel()
    await asyncio.wait(pending)
    errors = [task.exception() for task in pending if not task.cancelled()]
    for error in errors:
        if error is not None:
            raise error


class TaskSet:
    """Keeps a strong reference to each task it starts until the task ends.

    The event loop holds only weak references to tasks, so a task nobody keeps can be collected
    part-way through (a delivery whose 250 is then never sent). `spawn` is `create_task` plus
    that reference; `cancel` ends whatever is still running.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task: object) -> bool:
        return task in self._tasks

    async def cancel(self) -> None:
        await cancel_and_wait(list(self._tasks))
