"""The in-process bus: one serialization per event, whatever the number of listeners."""

from __future__ import annotations

import json
import time
import uuid

from inboxd.events import LocalBus
from inboxd.model import NewMailEvent


def event(mailbox_id: str, subject: str = "Hi") -> NewMailEvent:
    """A `new_email` event for the bus tests (the Redis ones too)."""
    return NewMailEvent(
        message_id=str(uuid.uuid4()),
        mailbox_id=mailbox_id,
        user_id="u",
        address="x@inboxd.localhost",
        sender="a@example.org",
        from_="A <a@example.org>",
        subject=subject,
        preview_text="Hello",
        size=10,
        created_at=time.time(),
    )


async def test_one_frame_object_for_every_listener() -> None:
    bus = LocalBus()
    got: list[str] = []
    other: list[str] = []
    for _ in range(3):
        bus.listen("m1", lambda frame: got.append(frame))  # three distinct listeners
    bus.listen("m2", other.append)
    await bus.publish([event("m1")])
    assert len(got) == 3 and other == []
    assert got[0] is got[1] is got[2]  # serialized once, the same text handed to each
    assert json.loads(got[0])["type"] == "new_email"


async def test_unsubscribe_and_revocations() -> None:
    bus = LocalBus()
    got: list[str] = []
    gens: list[int] = []
    unsubscribe = bus.listen("m1", got.append)
    stop_revokes = bus.on_revoke("m1", gens.append)
    await bus.revoke("m1", 4)
    unsubscribe()
    stop_revokes()
    await bus.publish([event("m1")])
    await bus.revoke("m1", 5)
    assert got == [] and gens == [4]
