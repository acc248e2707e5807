"""A list page's first read (its items' keys: id, read mark, tags) comes from `ix_messages_list`
alone on SQLite, without a look-up of each row in the table (migration 0014): unfiltered and
within `since`/`until`, the shapes a kept page is read by."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from inboxd.store import messages, search


@pytest.mark.parametrize(
    "shape",
    [search.Shape(), search.Shape(since=True), search.Shape(until=True), search.Shape(since=True, until=True)],
    ids=["all", "since", "until", "between"],
)
def test_a_page_s_keys_are_read_from_the_covering_index(shape: search.Shape, sqlite_template: Path) -> None:
    compiled = messages._PAGES((shape, messages.PAGE_SIZE, False, True)).compiled("sqlite")
    params = {"mailbox": "m", "now": 1.0, "offset": 0, "since": 0.0, "until": 2.0}
    with sqlite3.connect(sqlite_template) as conn:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {compiled.sql}", compiled.args(params))]
    assert plan and all(
        step.startswith("SEARCH m USING COVERING INDEX ix_messages_list (mailbox_id=? AND deleted=?") for step in plan
    ), plan
    # The whole rows (addresses, subject, preview) still need the table: the index holds keys only.
    whole = messages._PAGES((shape, messages.PAGE_SIZE, False, False)).compiled("sqlite")
    with sqlite3.connect(sqlite_template) as conn:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {whole.sql}", whole.args(params))]
    assert plan and all(step.startswith("SEARCH m USING INDEX ix_messages_list") for step in plan), plan
