"""Stopping cleanly: every part closes even when one step fails, background tasks stay referenced
until they end, and the cancellation helper never swallows its caller's own cancellation."""

from __future__ import annotations

import asyncio
import gc
import socket
import weakref
from typing import Any

import pytest
import sqlalchemy as sa

from inboxd.app import Inboxd
from inboxd.errors import StorageError
from inboxd.store.db import Tx
from inboxd.store.sql import Statement
from inboxd.tasks import TaskSet, cancel_and_wait
from tests.conftest import Clock


async def test_cancel_and_wait_lets_the_callers_own_cancellation_through() -> None:
    release = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.shield(release.wait())  # a clean-up that takes its time
            raise

    task = asyncio.get_running_loop().create_task(slow_to_stop())
    await asyncio.sleep(0)
    caller = asyncio.get_running_loop().create_task(cancel_and_wait([task]))
    await asyncio.sleep(0.01)
    caller.cancel()
    await asyncio.sleep(0.01)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.wait([task])
    assert task.cancelled()


async def test_cancel_and_wait_raises_a_tasks_own_failure() -> None:
    async def broken_cleanup() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("clean-up failed") from None

    task = asyncio.get_running_loop().create_task(broken_cleanup())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="clean-up failed"):
        await cancel_and_wait([task])


async def test_a_spawned_task_is_kept_until_it_ends() -> None:
    # The loop keeps only weak references to tasks: one nobody holds, waiting on an event only it
    # can reach, is collected part-way (a delivery that would never answer its client).
    tasks = TaskSet()
    done = asyncio.Event()

    async def waits_on_its_own_event() -> None:
        await asyncio.Event().wait()

    async def finishes() -> None:
        await asyncio.sleep(0.01)
        done.set()

    ref = weakref.ref(tasks.spawn(waits_on_its_own_event()))
    tasks.spawn(finishes())
    await asyncio.sleep(0)
    gc.collect()
    assert ref() is not None and len(tasks) == 2
    await done.wait()
    await asyncio.sleep(0)
    assert len(tasks) == 1  # a finished task is let go
    await tasks.cancel()
    assert len(tasks) == 0


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


async def test_stop_closes_every_part_when_one_step_fails(make_settings: Any, clock: Clock) -> None:
    server = Inboxd(make_settings(), clock=clock)
    await server.start()
    http_port, smtp_port = server.http_port, server.smtp_port
    db = server._db
    assert db is not None

    async def failing_resource() -> None:
        raise RuntimeError("this part failed to close")

    # A part that fails to close, stopped first (the stack unwinds in reverse).
    server._stack.push_async_callback(failing_resource)
    with pytest.raises(RuntimeError, match="failed to close"):
        await server.stop()
    assert _refused(http_port)
    assert _refused(smtp_port)

    one = Statement(lambda: sa.select(sa.literal(1)))

    async def touch(tx: Tx) -> None:
        await tx.execute(one)

    with pytest.raises(StorageError):  # the database closed too
        await asyncio.wait_for(db.write(touch), 5)
    await server.stop()  # a second stop has nothing left to do


async def test_a_failed_start_closes_what_had_started(make_settings: Any, clock: Clock) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        server = Inboxd(make_settings(smtp_port=taken.getsockname()[1]), clock=clock)
        with pytest.raises(OSError):
            await server.start()
        db = server._db
        assert db is None  # closed and let go
    finally:
        taken.close()
