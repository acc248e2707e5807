"""Queries on `mailbox_faults`: one row per mailbox with faults, its rules as JSON."""

from __future__ import annotations

import msgspec

from inboxd.model import FaultSet, Rule
from inboxd.store.db import Tx

_decode_rules = msgspec.json.Decoder(list[Rule]).decode


def fault_set(mailbox_id: str, version: str, rules_json: str | bytes) -> FaultSet:
    """The stored form → a `FaultSet` (the recipient query and the sandbox's lookup both build one)."""
    rules = tuple(_decode_rules(rules_json))
    return FaultSet(mailbox_id=mailbox_id, version=version, rules=rules, stages=frozenset(r.stage for r in rules))


async def put(tx: Tx, *, mailbox_id: str, version: str, rules: str, now: float) -> None:
    await tx.execute("DELETE FROM mailbox_faults WHERE mailbox_id = ?", mailbox_id)
    await tx.execute(
        "INSERT INTO mailbox_faults (mailbox_id, version, rules, created_at) VALUES (?, ?, ?, ?)",
        mailbox_id,
        version,
        rules,
        now,
    )


async def get(tx: Tx, *, mailbox_id: str) -> FaultSet | None:
    row = await tx.fetchrow("SELECT version, rules FROM mailbox_faults WHERE mailbox_id = ?", mailbox_id)
    return None if row is None else fault_set(mailbox_id, row["version"], row["rules"])


async def delete(tx: Tx, *, mailbox_id: str) -> None:
    await tx.execute("DELETE FROM mailbox_faults WHERE mailbox_id = ?", mailbox_id)
