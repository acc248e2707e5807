"""Queries on `mailbox_faults`: one row per mailbox with faults, its rules as JSON."""

from __future__ import annotations

import msgspec

from inboxd.model import FaultSet, Rule
from inboxd.store.db import Tx
from inboxd.store.sql import Statement, name_statements, param, sa, schema, values_of

_decode_rules = msgspec.json.Decoder(list[Rule]).decode


def _of_mailbox() -> sa.ColumnElement[bool]:
    return schema.mailbox_faults.c.mailbox_id == param(schema.mailbox_faults.c.mailbox_id)


DELETE = Statement(lambda: sa.delete(schema.mailbox_faults).where(_of_mailbox()))
INSERT = Statement(lambda: sa.insert(schema.mailbox_faults).values(values_of(schema.mailbox_faults)))
GET = Statement(lambda: sa.select(schema.mailbox_faults.c.version, schema.mailbox_faults.c.rules).where(_of_mailbox()))


def fault_set(mailbox_id: str, version: str, rules_json: str | bytes) -> FaultSet:
    """The stored form → a `FaultSet` (the recipient query and the sandbox's lookup both build one)."""
    rules = tuple(_decode_rules(rules_json))
    return FaultSet(mailbox_id=mailbox_id, version=version, rules=rules, stages=frozenset(r.stage for r in rules))


async def put(tx: Tx, *, mailbox_id: str, version: str, rules: str, now: float) -> None:
    await tx.execute(DELETE, mailbox_id=mailbox_id)
    await tx.execute(INSERT, mailbox_id=mailbox_id, version=version, rules=rules, created_at=now)


async def get(tx: Tx, *, mailbox_id: str) -> FaultSet | None:
    row = await tx.fetchrow(GET, mailbox_id=mailbox_id)
    return None if row is None else fault_set(mailbox_id, row["version"], row["rules"])


async def delete(tx: Tx, *, mailbox_id: str) -> None:
    await tx.execute(DELETE, mailbox_id=mailbox_id)


name_statements(__name__, globals())
