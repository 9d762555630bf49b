"""Two tables joined: the join is itself a table, kept exact as either side's rows change.

A join of tables A and B (inner, or left with A preserved) is a table whose rows are pairs of
rows: each is identified by A's row and B's row (their record keys), or by A's row alone when B
is joined on all of its key columns (each row of A meets at most one row of B then: a lookup, as
orders join their customer). `runner/joined_tables.py` keeps it in the view's state, per join
key, and writes its changes as weighted rows: a pair that stops holding (a row of either side
changed, moved to another join key, or was deleted) is taken back, the new pair added. What the
view computes over the join is then the query over one table, taken apart as `table_queries`
does for a table read alone (selection and projection, or groups with their aggregates and
HAVING): the query is rewritten over the join's rows (`JOINED`), each side's column named
`<alias>__dtry__<column>` there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlglot import exp

from distributary.sql import DIALECT
from distributary.table_queries import (
    DELETED,
    TableQuery,
    TableQueryError,
    cached_reading,
    column_side,
    on_equalities,
    short_sql,
    side_of,
    single_join,
    table_query,
    unqualified,
)

JOINED = "_dtry_joined"  # the join's rows, as the rewritten query reads them
_SEPARATOR = "__dtry__"


def flat(alias: str, column: str) -> str:
    """A side's column as the join's rows name it."""
    return f"{alias}{_SEPARATOR}{column}"


@dataclass(frozen=True)
class JoinedTables:
    """A join of table `first` with table `second` (`left`: each row of `first` kept, with
    `second`'s columns null when it meets no row). `first_keys[i]` (an expression over `first`'s
    columns) meets `second_keys[i]` (over `second`'s). `lookup`: `second` is joined on all of its
    key columns, so a row of `first` meets at most one of it, and `first`'s row alone identifies a
    pair. `query` is the view's query over the join's rows (`JOINED`, columns named by `flat`)."""

    first: str
    second: str
    first_keys: tuple[str, ...]
    second_keys: tuple[str, ...]
    left: bool
    lookup: bool
    query: TableQuery


def joined_tables(
    sql: str,
    tables: Sequence[str],
    columns: Mapping[str, Sequence[str] | None],
    keys: Mapping[str, Sequence[str] | None],
    output_key: Sequence[str],
) -> JoinedTables:
    """`sql` read as a join of the two tables `tables` (input aliases), with each alias's record
    columns `columns` and key columns `keys` (None: not known yet, as a Source's table before its
    database is read; empty: not declared), written as an upsert table keyed by `output_key`.
    Raises `TableQueryError` for what is not kept exact."""
    return _read(
        sql,
        tuple(tables),
        tuple((a, tuple(c) if c is not None else None) for a, c in columns.items()),
        tuple((a, tuple(k) if k is not None else None) for a, k in keys.items()),
        tuple(output_key),
    )


@cached_reading
def _read(
    sql: str,
    tables: tuple[str, ...],
    columns: tuple[tuple[str, tuple[str, ...] | None], ...],
    keys: tuple[tuple[str, tuple[str, ...] | None], ...],
    output_key: tuple[str, ...],
) -> JoinedTables:
    return _Reader(sql, tables, dict(columns), dict(keys)).read(output_key)


class _Reader:
    """Takes a join of two tables apart (see `joined_tables`)."""

    def __init__(
        self,
        sql: str,
        tables: tuple[str, ...],
        columns: Mapping[str, tuple[str, ...] | None],
        keys: Mapping[str, tuple[str, ...] | None],
    ) -> None:
        self.sql = sql
        self.tables = {t.lower(): t for t in tables}
        self.columns: dict[str, tuple[str, ...]] = {}
        for table in tables:
            names = next((c for a, c in columns.items() if a.lower() == table.lower()), None)
            if names is None:
                raise TableQueryError(
                    f"joins tables {' and '.join(map(repr, tables))}, but the columns of "
                    f"{table!r} are not declared: declare its Log's spec.schema"
                )
            self.columns[table] = names
        self.keys = {
            t: next((k for a, k in keys.items() if a.lower() == t.lower()), ()) for t in tables
        }
        self.fix = (
            f"or read one of {' and '.join(map(repr, tables))} as a stream of changes "
            "(read: changes)"
        )
        self.refs: dict[str, str] = {}  # a name the query gives a side -> its input alias
        self.using: set[str] = set()  # JOIN ... USING's columns, read from the preserved side

    def read(self, output_key: tuple[str, ...]) -> JoinedTables:
        select, from_table, join = single_join(
            self.sql,
            "joins two tables in more than one SELECT: write one SELECT ... FROM a JOIN b "
            f"ON ..., {self.fix}",
            "reads two tables in other than one JOIN of the two: write SELECT ... FROM a "
            f"JOIN b ON ..., {self.fix}",
        )
        first, second, left = self._sides(from_table, join)
        pairs = self._condition(join, first, second)
        first, second, pairs = self._ordered(first, second, pairs, left)
        rewritten = self._rewritten(select, first)
        key = self._joined_key(first, second, pairs)
        names = [flat(t, c) for t in (first, second) for c in self.columns[t]]
        try:
            query = table_query(rewritten, JOINED, key, output_key, names)
        except TableQueryError as exc:
            raise TableQueryError(self._readable(str(exc), first, second)) from None
        return JoinedTables(
            first=first,
            second=second,
            first_keys=tuple(unqualified(a) for a, _ in pairs),
            second_keys=tuple(unqualified(b) for _, b in pairs),
            left=left,
            lookup=self._on_key(second, [b for _, b in pairs]),
            query=query,
        )

    def _sides(self, first: exp.Table, join: exp.Join) -> tuple[str, str, bool]:
        """The two inputs in the query's order, and whether the join keeps every row of the
        first (LEFT; a RIGHT join is the same with the sides swapped)."""
        sides = []
        for node in (first, join.this):
            alias = self.tables.get(node.name.lower())
            if alias is None:
                raise TableQueryError(f"reads {node.name!r}, which is neither table joined here")
            self.refs[node.alias_or_name.lower()] = alias
            sides.append(alias)
        if sides[0] == sides[1]:
            raise TableQueryError(
                f"joins table {sides[0]!r} with itself: join two tables, {self.fix}"
            )
        side = (join.args.get("side") or "").upper()
        kind = (join.args.get("kind") or "").upper()
        if kind in ("CROSS", "SEMI", "ANTI") or side == "FULL":
            raise TableQueryError(
                f"joins tables {sides[0]!r} and {sides[1]!r} as a "
                f"{' '.join(filter(None, (side, kind))) or 'CROSS'} JOIN: a join of tables is "
                "kept exact as JOIN or LEFT JOIN (RIGHT JOIN, the sides swapped); use one of "
                f"those, {self.fix}"
            )
        if side == "RIGHT":
            return sides[1], sides[0], True
        return sides[0], sides[1], side == "LEFT"

    def _condition(
        self, join: exp.Join, first: str, second: str
    ) -> list[tuple[exp.Expr, exp.Expr]]:
        """ON's equalities (or USING's columns) as (first's expression, second's) pairs."""
        using = join.args.get("using")
        if using:
            self.using = {i.name.lower() for i in using}
            return [(exp.column(i.name), exp.column(i.name)) for i in using]
        pairs, refused = on_equalities(join, self._side_of, first, second)
        if refused is not None:
            raise TableQueryError(
                f"joins tables {first!r} and {second!r} on "
                f"{short_sql(refused)}: each condition of "
                "ON must be an equality of an expression of one table and one of the other; "
                f"filter in WHERE instead, {self.fix}"
            )
        return pairs

    def _ordered(
        self, first: str, second: str, pairs: list[tuple[exp.Expr, exp.Expr]], left: bool
    ) -> tuple[str, str, list[tuple[exp.Expr, exp.Expr]]]:
        """An inner join's sides ordered so that the second, where one is, is joined on all of
        its key (a lookup): each row of the first then meets at most one of the second."""
        if (
            not left
            and self._on_key(first, [a for a, _ in pairs])
            and not self._on_key(second, [b for _, b in pairs])
        ):
            return second, first, [(b, a) for a, b in pairs]
        return first, second, pairs

    def _on_key(self, table: str, ends: Sequence[exp.Expr]) -> bool:
        key = self.keys.get(table)
        plain = {e.name.lower() for e in ends if isinstance(e, exp.Column)}
        return bool(key) and {k.lower() for k in key or ()} <= plain

    def _joined_key(
        self, first: str, second: str, pairs: list[tuple[exp.Expr, exp.Expr]]
    ) -> tuple[str, ...] | None:
        """The join's key columns: the first's key, and the second's unless it is a lookup.
        None: a side's key is not known yet; empty: a side's is not declared."""
        first_key, second_key = self.keys.get(first), self.keys.get(second)
        if first_key is None or second_key is None:
            return None
        if not first_key:
            return ()
        own = tuple(flat(first, k) for k in first_key)
        if self._on_key(second, [b for _, b in pairs]):
            return own
        return (*own, *(flat(second, k) for k in second_key)) if second_key else ()

    def _rewritten(self, select: exp.Select, first: str) -> str:
        """The query over the join's rows: every column read as its side's flat column, `*`
        expanded, an unnamed column item named as Spark names it."""
        query = select.copy()
        query.set("joins", None)
        query.set("from_", exp.From(this=exp.to_table(JOINED)))
        items: list[exp.Expr] = []
        for item in query.expressions:
            if isinstance(item, exp.Star) or (
                isinstance(item, exp.Column) and isinstance(item.this, exp.Star)
            ):
                items.extend(self._star(item, first))
            elif isinstance(item, exp.Column):
                items.append(exp.alias_(self._over_join(item, first), item.name, quoted=True))
            else:
                items.append(self._over_join(item, first))
        query.set("expressions", items)
        for part in ("where", "group", "having"):
            node = query.args.get(part)
            if node is not None:
                query.set(part, self._over_join(node, first))
        return query.sql(dialect=DIALECT)

    def _star(self, item: exp.Expr, first: str) -> list[exp.Expr]:
        if isinstance(item, exp.Column):  # t.*
            side = self.refs.get(item.table.lower())
            if side is None:
                raise TableQueryError(f"selects {item.sql(dialect=DIALECT)}, of no input here")
            names = [(side, c) for c in self.columns[side]]
        else:  # as Spark expands it: USING's columns once, first
            names = [(first, c) for c in self.columns[first] if c.lower() in self.using]
            names += [
                (t, c)
                for t in self.refs_in_order()
                for c in self.columns[t]
                if c.lower() not in self.using
            ]
        return [
            exp.alias_(exp.column(flat(t, c), quoted=True), c, quoted=True)
            for t, c in names
            if c.lower() != DELETED
        ]

    def refs_in_order(self) -> list[str]:
        return list(dict.fromkeys(self.refs.values()))

    def _over_join(self, node: exp.Expr, first: str) -> exp.Expr:
        def swap(part: exp.Expr) -> exp.Expr:
            if isinstance(part, exp.Column) and not isinstance(part.this, exp.Star):
                side = first if part.name.lower() in self.using and not part.table else None
                return exp.column(flat(side or self._column_side(part), part.name), quoted=True)
            return part

        return node.copy().transform(swap)

    def _side_of(self, node: exp.Expr) -> str | None:
        return side_of(node, self._column_side)

    def _column_side(self, column: exp.Column) -> str:
        return column_side(column, self.refs, self.columns)

    def _readable(self, message: str, first: str, second: str) -> str:
        """A refusal of the rewritten query in the user's terms."""
        both = f"the join of tables {first!r} and {second!r}"
        message = message.replace(
            f"read: changes for {JOINED!r}", f"read: changes for {first!r} or {second!r}"
        )
        message = message.replace(f"table {JOINED!r}", both).replace(repr(JOINED), both)
        message = message.replace(f"{JOINED}.", "")
        return re.sub(rf"`?(\w+){_SEPARATOR}(\w+)`?", r"\1.\2", message)
