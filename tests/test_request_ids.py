"""Fresh request ids look exactly as `uuid.uuid4().hex` did, and do not repeat, across the
batches of random bytes they are cut from and in a forked child."""

from __future__ import annotations

import os
import uuid

from inboxd.api.observe import RequestIds, incoming_id


def test_fresh_ids_are_random_uuid4_hex() -> None:
    ids = RequestIds()
    made = [ids.fresh() for _ in range(3 * RequestIds._BATCH // 16 + 5)]  # past three refills
    assert len(set(made)) == len(made)
    for text in made:
        parsed = uuid.UUID(hex=text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122 and parsed.hex == text


def test_a_plausible_client_id_is_kept_else_a_fresh_one() -> None:
    ids = RequestIds()
    assert incoming_id({"headers": [(b"x-request-id", b"req-1.a_b")]}, ids) == "req-1.a_b"
    for bad in (b"", b"a b", b"x" * 65, "é".encode()):
        fresh = incoming_id({"headers": [(b"x-request-id", bad)]}, ids)
        assert uuid.UUID(hex=fresh).version == 4


def test_a_forked_child_cuts_its_own() -> None:
    ids = RequestIds()
    ids.fresh()  # the parent's batch is read
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, ids.fresh().encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 32 and child != ids.fresh()
