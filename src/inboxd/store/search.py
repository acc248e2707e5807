"""The message filters as SQL: a filter's `Shape` and parameters, and the FROM, WHERE and ORDER
BY of a shape. The index they read (`message_search`, the FTS5 table or the tsvector) is what
`store/search_index.py` writes.

Filters that read each row (`from`, `to`, `subject`, `unread`, `has_attachments`: substrings,
folded in Python for non-ASCII on SQLite, no index answers them) read at most the newest
`scan_rows` messages of the mailbox within `since`/`until`: `query` finds the oldest of those
once, by the list index, and bounds the read by it; a page it leaves short while older messages
exist raises `FilterTooBroad` (`check_bound`) rather than answer as if nothing more matched.

A filtered list is a `Shape` (which filters are present, how the full text is read) and its
parameters: `query` finds both, `page_parts` makes the Core FROM, WHERE and ORDER BY of a shape,
and `store/messages.py` keeps one compiled statement per shape. Where the two databases differ:
`_contains` (case folding) and `_words_match` (FTS5's MATCH, the tsvector's `@@`); the FTS5
table, `fts_table()`, exists on SQLite only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import msgspec

from inboxd.config import Settings
from inboxd.errors import FilterTooBroad, IndexBehind
from inboxd.model import MessageFilter, Term
from inboxd.store import text_match
from inboxd.store.db import Tx
from inboxd.store.sql import Shapes, Statement, name_statements, sa, schema

# Up to this many full-text matches in a mailbox, PostgreSQL sorts them; beyond, it walks the list.
FEW_MATCHES = 2000


def _fts5_query(terms: Sequence[Term]) -> str:
    return " ".join('"' + t.text.replace('"', '""') + '"' + ("*" if t.prefix else "") for t in terms)


def _tsquery(terms: Sequence[Term]) -> str:
    return " & ".join(
        "'" + t.text.replace("\\", "\\\\").replace("'", "''") + "'" + (":*" if t.prefix else "") for t in terms
    )


# The tables of the queries, by the aliases the list's SQL has always used (each made once: a
# statement's two uses of an alias must be the same object).


@cache
def listed() -> sa.sql.selectable.NamedFromClause[Any]:
    """`messages m`, the list's table (`page_parts`)."""
    return schema.messages.alias("m")


@cache
def _indexed() -> sa.sql.selectable.NamedFromClause[Any]:
    return schema.message_search.alias("s")


@cache
def _tagged() -> sa.sql.selectable.NamedFromClause[Any]:
    return schema.message_tags.alias("t")


@cache
def fts_table() -> sa.TableClause:
    """SQLite's FTS5 table (made by migration 0006; SQLAlchemy has no virtual tables): `rowid` is
    the `doc_id`, the column named after the table is the one MATCH takes."""
    return sa.table("message_fts", sa.column("rowid", sa.Integer), sa.column("message_fts"), sa.column("terms"))


@cache
def _fts() -> sa.sql.selectable.NamedFromClause[Any]:
    return fts_table().alias("f")


# How a substring filter folds case: PostgreSQL's ILIKE; SQLite's LIKE, which folds ASCII
# itself; SQLite's LIKE on `inboxd_lower` (registered on every connection, store/sqlite.py) for
# a needle beyond ASCII.
Fold = Literal["ilike", "like", "lower"]


def _fold(dialect: str, needle: str) -> Fold:
    if dialect == "postgresql":
        return "ilike"
    return "like" if needle.isascii() else "lower"


def _contains(fold: Fold, columns: Sequence[sa.ColumnElement[Any]], name: str) -> sa.ColumnElement[bool]:
    """Case-insensitive substring (the parameter `name`, a LIKE pattern of a lowercase needle)
    of any of `columns`."""
    pattern: sa.BindParameter[str] = sa.bindparam(name)
    if fold == "ilike":
        tests = [text_match.ilike(c, pattern) for c in columns]
    elif fold == "like":
        tests = [text_match.like(c, pattern) for c in columns]
    else:
        tests = [text_match.like(sa.func.inboxd_lower(c), pattern) for c in columns]
    return sa.or_(*tests)


def _words_match(dialect: str) -> sa.ColumnElement[bool]:
    """The full-text match of the parameter `words` (`_words`): FTS5's MATCH on SQLite, the
    tsvector's `@@` on PostgreSQL. The one place the two indexes differ in SQL."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import TSQUERY

        match: sa.ColumnElement[bool] = _indexed().c.terms.op("@@")(sa.cast(sa.bindparam("words"), TSQUERY))
    else:
        match = _fts().c.message_fts.op("MATCH")(sa.bindparam("words"))
    return match


def _words(dialect: str, terms: Sequence[Term]) -> str:
    """The value of the parameter `words`: a tsquery's text, or an FTS5 query."""
    return _tsquery(terms) if dialect == "postgresql" else _fts5_query(terms)


def mailbox_term(mailbox_id: str) -> str:
    """A word only the mailbox's indexed messages carry: full text starts from the mailbox's own
    matches rather than everyone's."""
    return "mbx" + mailbox_id.replace("-", "")


# FTS5 rowids per microsecond of `created_at` (`doc_id_base`).
DOC_ID_ROOM = 64


def doc_id_base(created_at: float) -> int:
    """SQLite's FTS5 rowid follows `created_at` (microseconds, room for 64 per microsecond), so
    a full-text page walks the matches newest first and stops after the page."""
    return int(created_at * 1_000_000) * DOC_ID_ROOM


@dataclass(frozen=True, slots=True)
class Shape:
    """What decides the SQL of a filtered list (its parameters aside): a key of the statements."""

    from_: Fold | None = None
    subject: Fold | None = None
    unread: bool = False
    since: bool = False
    until: bool = False
    to: bool = False
    has_attachments: bool = False
    # The row-reading filters' bound applies (`floor`).
    floor: bool = False
    # "driven": the page walks the tag's index entries; "exists": a tag test beside full text.
    tag: Literal["", "driven", "exists"] = ""
    # Full text: "fts5" (SQLite); on PostgreSQL "hits" (from the few matches, the parameter
    # `hits`) or "walk" (the mailbox newest first, testing each row).
    words: Literal["", "fts5", "hits", "walk"] = ""


@dataclass(frozen=True, slots=True)
class Query:
    """A filtered list: its shape (`page_parts` makes the SQL of it) and its parameters."""

    shape: Shape
    params: dict[str, Any]
    # `created_at` of the oldest message a row-reading filter may read; None: no bound applies.
    floor: float | None = None


def reads_rows(flt: MessageFilter) -> bool:
    """Whether `flt` tests each candidate row with what no index answers."""
    return bool(flt.from_ or flt.to or flt.subject or flt.unread is not None or flt.has_attachments is not None)


def _range(table: Any, since: bool, until: bool) -> list[sa.ColumnElement[bool]]:
    """`since`/`until` (parameters of those names) on `table`, which the list index answers."""
    where = []
    if since:
        where.append(table.c.created_at >= sa.bindparam("since"))
    if until:
        where.append(table.c.created_at < sa.bindparam("until"))
    return where


def _range_params(flt: MessageFilter) -> dict[str, float]:
    params = {}
    if flt.since is not None:
        params["since"] = flt.since
    if flt.until is not None:
        params["until"] = flt.until
    return params


def _scan_floor_statement(key: tuple[bool, bool, int]) -> Statement:
    since, until, scan_rows = key
    return Statement(
        lambda: (
            sa.select(schema.messages.c.created_at)
            .where(
                schema.messages.c.mailbox_id == sa.bindparam("mailbox"),
                schema.messages.c.deleted == 0,
                *_range(schema.messages, since, until),
            )
            .order_by(schema.messages.c.created_at.desc(), schema.messages.c.id.desc())
            .limit(1)
            .offset(scan_rows - 1)
        )
    )


def _older_statement(key: tuple[bool, bool]) -> Statement:
    since, until = key
    return Statement(
        lambda: (
            sa.select(sa.literal_column("1"))
            .select_from(schema.messages)
            .where(
                schema.messages.c.mailbox_id == sa.bindparam("mailbox"),
                schema.messages.c.deleted == 0,
                *_range(schema.messages, since, until),
                schema.messages.c.created_at < sa.bindparam("floor"),
            )
            .limit(1)
        )
    )


def _ranges() -> list[tuple[bool, bool]]:
    """Every (since, until) a filter may have."""
    return [(since, until) for since in (False, True) for until in (False, True)]


def _default_scan_rows() -> int:
    field = next(f for f in msgspec.structs.fields(Settings) if f.name == "filter_scan_rows")
    return int(field.default)


# Precompiled for the configuration's default bound; another bound compiles at its first use.
_SCAN_FLOORS: Shapes[tuple[bool, bool, int]] = Shapes(
    _scan_floor_statement, size=16, prepared=lambda: [(*r, _default_scan_rows()) for r in _ranges()]
)
_OLDER: Shapes[tuple[bool, bool]] = Shapes(_older_statement, size=4, prepared=_ranges)


async def _scan_floor(tx: Tx, mailbox_id: str, flt: MessageFilter, scan_rows: int) -> float | None:
    """`created_at` of the `scan_rows`-th newest message in the filter's time range; None when
    there are fewer (then every one may be read)."""
    if scan_rows <= 0 or not reads_rows(flt):
        return None
    statement = _SCAN_FLOORS((flt.since is not None, flt.until is not None, int(scan_rows)))
    value = await tx.fetchval(statement, mailbox=mailbox_id, **_range_params(flt))
    return None if value is None else float(value)


async def check_bound(tx: Tx, mailbox_id: str, flt: MessageFilter, q: Query, *, found: int, size: int) -> None:
    """Raise `FilterTooBroad` when the bound cut a short page: older messages were not read."""
    if q.floor is None or found >= size:
        return
    statement = _OLDER((flt.since is not None, flt.until is not None))
    older = await tx.fetchval(statement, mailbox=mailbox_id, floor=q.floor, **_range_params(flt))
    if older:
        raise FilterTooBroad(
            "The filters `from`, `to`, `subject`, `unread` and `has_attachments` read at most the newest "
            "messages of the mailbox within `since`/`until`, and older ones remain: narrow the range with "
            "`since` and `until`, or search with `q` alone."
        )


_MATCHES = Statement(
    postgresql=lambda: (
        sa.select(_indexed().c.message_id)
        .where(_words_match("postgresql"), _indexed().c.mailbox_id == sa.bindparam("mailbox"))
        .limit(FEW_MATCHES + 1)
    ),
    replan=True,
)


def _unindexed_in() -> sa.Select[Any]:
    """One live message of the mailbox the index does not hold yet, if any. Read through the
    partial `ix_messages_unindexed` (only the mail the indexer has not reached, a batch or so),
    never the mailbox's list index, which would walk every message of a large mailbox."""
    m = schema.messages
    return sa.select(m.c.id).where(m.c.indexed == 0, m.c.deleted == 0, unindexed_of_mailbox(m)).limit(1)


def unindexed_of_mailbox(table: Any) -> sa.ColumnElement[bool]:
    """`mailbox_id` = the parameter `mailbox`, written so that no index on `mailbox_id` answers
    it (`mailbox_id || ''`): the planners then read `ix_messages_unindexed`, whose rows are the
    few messages waiting for the indexer, rather than every message of the mailbox."""
    unindexable: sa.ColumnElement[Any] = table.c.mailbox_id.op("||")(sa.literal_column("''"))
    return unindexable == sa.bindparam("mailbox")


_UNINDEXED_IN = Statement(_unindexed_in)


async def require_indexed(tx: Tx, mailbox_id: str, flt: MessageFilter) -> None:
    """Raise `IndexBehind` when `flt` reads the search index and the mailbox holds mail it has
    not taken in yet: the list would silently leave that mail out. Lists on other filters read
    nothing more."""
    if flt.needs_index and await tx.fetchval(_UNINDEXED_IN, mailbox=mailbox_id) is not None:
        raise IndexBehind(mailbox_id)


async def query(tx: Tx, mailbox_id: str, flt: MessageFilter, *, scan_rows: int = 0) -> Query:
    """The shape and parameters of the list `flt` keeps (`page_parts` makes the SQL of the shape;
    the caller adds the parameters `mailbox`, `now` and its page's). A filter the search index
    answers is refused while the mailbox has mail the index lacks (`require_indexed`)."""
    if flt.needs_index:  # tested here too: a plain list makes no extra coroutine
        await require_indexed(tx, mailbox_id, flt)
    params: dict[str, Any] = {}
    from_ = subject = None
    if flt.from_:
        from_ = _fold(tx.dialect, flt.from_)
        params["from_pattern"] = text_match.contains_pattern(flt.from_)
    if flt.subject:
        subject = _fold(tx.dialect, flt.subject)
        params["subject_pattern"] = text_match.contains_pattern(flt.subject)
    if flt.unread is not None:
        params["unread"] = 0 if flt.unread else 1
    params.update(_range_params(flt))
    if flt.to:
        params["to_pattern"] = text_match.contains_pattern(flt.to)
    if flt.has_attachments is not None:
        params["has_attachments"] = 1 if flt.has_attachments else 0
    floor = await _scan_floor(tx, mailbox_id, flt, scan_rows)
    if floor is not None:
        params["floor"] = floor
    if flt.tag:
        params["tag"] = flt.tag
    tag: Literal["", "driven", "exists"] = "" if not flt.tag else "exists" if flt.terms else "driven"
    words: Literal["", "fts5", "hits", "walk"] = ""
    if flt.terms:
        terms = [Term(mailbox_term(mailbox_id)), *flt.terms]
        if tx.dialect != "postgresql":
            # FTS5 yields rowids in order, so the page is read newest first without a sort; under
            # a bound, the rowid range stops the walk at the oldest message it may read.
            words = "fts5"
            params["words"] = _words(tx.dialect, terms)
            if floor is not None:
                params["fts_floor"] = doc_id_base(floor)
        else:
            # PostgreSQL: a few matches are fetched from the GIN index and sorted; many are better
            # found by walking the mailbox newest first until a page is full. Counting the
            # mailbox's matches first decides. Both statements that take the tsquery are planned
            # for it at each call (`replan`): a generic plan knows nothing of the words and may
            # pick a sequential scan (docs/performance.md, "Search and waits").
            params["words"] = _words(tx.dialect, flt.terms)
            matches = await tx.fetch(_MATCHES, words=params["words"], mailbox=mailbox_id)
            if len(matches) <= FEW_MATCHES:
                # Driven from the matches (a parameter array: no plan can guess its length, and
                # from them any plan is a few key lookups and a small sort).
                words = "hits"
                del params["words"]
                params["hits"] = [r[0] for r in matches]
            else:
                words = "walk"
    shape = Shape(
        from_=from_,
        subject=subject,
        unread=flt.unread is not None,
        since=flt.since is not None,
        until=flt.until is not None,
        to=bool(flt.to),
        has_attachments=flt.has_attachments is not None,
        floor=floor is not None,
        tag=tag,
        words=words,
    )
    return Query(shape, params, floor)


def replans(shape: Shape) -> bool:
    """Whether a page of this shape takes the tsquery, so is planned for it at each call."""
    return shape.words == "walk"


def _conditions(shape: Shape) -> list[sa.ColumnElement[bool]]:
    """The filters' conditions on `messages m` (and `message_search s`), full text aside."""
    where: list[sa.ColumnElement[bool]] = []
    if shape.from_:
        where.append(_contains(shape.from_, (listed().c.from_header, listed().c.sender), "from_pattern"))
    if shape.subject:
        where.append(_contains(shape.subject, (listed().c.subject,), "subject_pattern"))
    if shape.unread:
        where.append(listed().c.is_read == sa.bindparam("unread"))
    where += _range(listed(), shape.since, shape.until)
    if shape.to:
        # Stored lowercase, so a plain LIKE is case-insensitive on both databases.
        where.append(text_match.like(_indexed().c.recipients, sa.bindparam("to_pattern")))
    if shape.has_attachments:
        where.append(_indexed().c.has_attachments == sa.bindparam("has_attachments"))
    if shape.floor:
        where.append(listed().c.created_at >= sa.bindparam("floor"))
    return where


def page_parts(shape: Shape) -> tuple[Any, list[sa.ColumnElement[bool]], list[sa.ColumnElement[Any]]]:
    """(FROM, WHERE conditions, ORDER BY) of a list of this shape over `messages m` (`listed()`); the
    caller adds the mailbox and liveness conditions and the page's LIMIT and OFFSET."""
    where = _conditions(shape)
    newest_first: list[sa.ColumnElement[Any]] = [listed().c.created_at.desc(), listed().c.id.desc()]

    def with_search(source: Any) -> Any:
        return (
            source.join(_indexed(), _indexed().c.message_id == listed().c.id)
            if shape.to or shape.has_attachments
            else source
        )

    if shape.tag == "driven":
        # Driven from the tag's index entries, newest first: a page reads only tagged messages.
        source = with_search(_tagged().join(listed(), listed().c.id == _tagged().c.message_id))
        where = [_tagged().c.mailbox_id == sa.bindparam("mailbox"), _tagged().c.tag == sa.bindparam("tag"), *where]
        tag_order: list[sa.ColumnElement[Any]] = [_tagged().c.created_at.desc(), _tagged().c.message_id.desc()]
        return source, where, tag_order
    if shape.tag == "exists":
        tagged: sa.Select[Any] = sa.select(sa.literal_column("1")).select_from(_tagged())
        where.append(
            tagged.where(_tagged().c.message_id == listed().c.id, _tagged().c.tag == sa.bindparam("tag")).exists()
        )
    if shape.words == "fts5":
        source = (
            _fts()
            .join(_indexed(), _indexed().c.doc_id == _fts().c.rowid)
            .join(listed(), listed().c.id == _indexed().c.message_id)
        )
        match = [_words_match("sqlite")]
        if shape.floor:
            match.append(_fts().c.rowid >= sa.bindparam("fts_floor"))
        rowids: list[sa.ColumnElement[Any]] = [_fts().c.rowid.desc()]
        return source, [*match, *where], rowids
    if shape.words == "hits":
        from sqlalchemy.dialects.postgresql import ARRAY

        hit = (
            sa.func.unnest(sa.cast(sa.bindparam("hits"), ARRAY(sa.Text))).table_valued("id").render_derived(name="hit")
        )
        return with_search(hit.join(listed(), listed().c.id == hit.c.id)), where, newest_first
    if shape.words == "walk":
        return (
            listed().join(_indexed(), _indexed().c.message_id == listed().c.id),
            [*where, _words_match("postgresql")],
            newest_first,
        )
    return with_search(listed()), where, newest_first


name_statements(__name__, globals())
