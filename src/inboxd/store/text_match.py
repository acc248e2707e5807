"""The one rule for substring matches with LIKE: the needle's `\\`, `%` and `_` are escaped with
`\\`, the escape character every LIKE of `store/` names, so a user's text never acts as a wildcard.

The pattern is data, a bound parameter made by `contains_pattern`; the test is a Core construct
(`like`, `ilike`) that names the same escape character.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.sql.elements import ColumnElement

ESCAPE = "\\"


def contains_pattern(needle: str) -> str:
    """The LIKE pattern that matches any text holding `needle` as it is."""
    escaped = needle.replace(ESCAPE, ESCAPE * 2).replace("%", ESCAPE + "%").replace("_", ESCAPE + "_")
    return f"%{escaped}%"


def like(column: ColumnElement[Any], pattern: ColumnElement[Any]) -> ColumnElement[bool]:
    """`column LIKE pattern ESCAPE '\\'`, `pattern` made by `contains_pattern`."""
    return column.like(pattern, escape=ESCAPE)


def ilike(column: ColumnElement[Any], pattern: ColumnElement[Any]) -> ColumnElement[bool]:
    """`like` folding case (PostgreSQL's ILIKE; SQLAlchemy writes `lower() LIKE lower()` elsewhere)."""
    return column.ilike(pattern, escape=ESCAPE)
