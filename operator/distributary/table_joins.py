"""A stream joined with a table: each event once, with the row its key has when the view reads it.

ksqlDB's stream-table join, kept exact on Spark: the table's rows are held in the view's state,
keyed by the join key (`runner/jvm/JoinRows.java`), and a batch's records of a key are
applied in time order, table changes before events of the same instant; an event is joined with
the rows its key has then, and never written again when the table changes afterwards. The join
is on the table's key columns, so each event meets at most one row. Here the query is taken
apart: the equalities of ON (or USING), and the SELECT list and WHERE over the two rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlglot import exp

from distributary.sql import DIALECT
from distributary.table_queries import (
    DELETED,
    GENERATORS,
    TableQueryError,
    cached_reading,
    column_side,
    on_equalities,
    short_sql,
    side_of,
    single_join,
    unqualified,
)

STREAM_ROW, TABLE_ROW = "_dtry_s", "_dtry_t"  # the join's output: the event, the table's row


@dataclass(frozen=True)
class TableJoin:
    """A stream joined with a table, each event written once with the table's row current when
    the view reads it (`runner/jvm/JoinRows.java`). `stream_keys[i]` (over the stream's
    columns) meets `table_keys[i]` (one of the table's columns); `left`: an event without a row
    is written with the table's columns null. `items` are the output's expressions and `where`
    the condition, over the structs `STREAM_ROW` and `TABLE_ROW`."""

    stream: str
    table: str
    stream_keys: tuple[str, ...]
    table_keys: tuple[str, ...]
    left: bool
    items: tuple[str, ...]
    where: str | None


def stream_table_join(
    sql: str,
    stream: str,
    table: str,
    columns: Mapping[str, Sequence[str] | None],
    key: Sequence[str] | None,
) -> TableJoin:
    """`sql` read as stream `stream` joined with table `table` (keyed by `key`, None: not known
    yet); `columns` holds each alias's columns. Raises `TableQueryError` for what is not kept
    exact."""
    return _read(
        sql,
        stream,
        table,
        tuple(
            (alias, tuple(names) if names is not None else None) for alias, names in columns.items()
        ),
        tuple(key) if key is not None else None,
    )


@cached_reading
def _read(
    sql: str,
    stream: str,
    table: str,
    columns: tuple[tuple[str, tuple[str, ...] | None], ...],
    key: tuple[str, ...] | None,
) -> TableJoin:
    return _JoinReader(sql, stream, table, dict(columns), key).read()


class _JoinReader:
    """Takes a stream-table join apart (see `stream_table_join`)."""

    def __init__(
        self,
        sql: str,
        stream: str,
        table: str,
        columns: Mapping[str, tuple[str, ...] | None],
        key: tuple[str, ...] | None,
    ) -> None:
        self.sql, self.stream, self.table, self.key = sql, stream, table, key
        self.fix = (
            f"read {table!r} as a stream of changes (read: changes) to join every version of "
            "its rows"
        )
        named = {alias.lower(): names for alias, names in columns.items()}
        stream_columns, table_columns = named.get(stream.lower()), named.get(table.lower())
        if stream_columns is None or table_columns is None:
            missing = stream if stream_columns is None else table
            raise TableQueryError(
                f"joins {stream!r} with table {table!r}, but the columns of {missing!r} are not "
                "declared: declare its Log's spec.schema"
            )
        self.columns = {STREAM_ROW: stream_columns, TABLE_ROW: table_columns}
        self.refs: dict[str, str] = {}  # a name the query gives a side -> STREAM_ROW or TABLE_ROW
        self.using: set[str] = set()  # JOIN ... USING's columns: one column each, the stream's

    def read(self) -> TableJoin:
        select = self._select()
        join = select.args["joins"][0]
        left = self._sides(select.args["from_"].this, join)
        pairs = self._condition(join)
        self._check_key(pairs)
        where = select.args.get("where")
        # The output's names are Spark's own for the query (`runner/table_joins`): no alias here.
        items = [self._over_rows(e.unalias()) for e in self._expanded(select.expressions)]
        return TableJoin(
            stream=self.stream,
            table=self.table,
            stream_keys=tuple(unqualified(s) for s, _ in pairs),
            table_keys=tuple(t for _, t in pairs),
            left=left,
            items=tuple(e.sql(dialect=DIALECT) for e in items),
            where=self._over_rows(where.this).sql(dialect=DIALECT) if where is not None else None,
        )

    def _select(self) -> exp.Select:
        query, _, _ = single_join(
            self.sql,
            f"joins {self.stream!r} with table {self.table!r} in more than one SELECT: write "
            f"one SELECT ... FROM {self.stream} JOIN {self.table} ON ..., or {self.fix}",
            f"reads table {self.table!r} with a stream in other than one JOIN of the two: "
            f"write SELECT ... FROM {self.stream} JOIN {self.table} ON ..., or {self.fix}",
        )
        for kinds, what in (
            ((exp.AggFunc,), "an aggregate"),
            ((exp.Window,), "a window function (OVER)"),
            ((exp.Subquery, exp.Exists), "a subquery"),
            ((exp.Lateral,), "a LATERAL VIEW"),
            (GENERATORS, "a generator (explode, inline)"),
        ):
            node = query.find(*kinds)
            if node is not None:
                raise TableQueryError(
                    f"uses {what}, {short_sql(node)}, in a join of stream {self.stream!r} with "
                    f"table {self.table!r}: such a join enriches each event once; aggregate its "
                    f"output in a downstream view, or {self.fix}"
                )
        for part in ("group", "having", "distinct", "order", "limit", "offset"):
            if query.args.get(part) is not None:
                raise TableQueryError(
                    f"uses {part.upper()} in a join of stream {self.stream!r} with table "
                    f"{self.table!r}: such a join enriches each event once; do that in a "
                    f"downstream view, or {self.fix}"
                )
        return query

    def _sides(self, first: exp.Table, join: exp.Join) -> bool:
        """Which side is which (the names the query gives them); whether it is a left join."""
        second = join.this
        for node in (first, second):
            side = {self.stream.lower(): STREAM_ROW, self.table.lower(): TABLE_ROW}.get(
                node.name.lower()
            )
            if side is None:
                raise TableQueryError(f"reads {node.name!r}, which is neither input joined here")
            self.refs[node.alias_or_name.lower()] = side
        if len(set(self.refs.values())) != 2:
            raise TableQueryError(
                f"joins {self.stream!r} with itself or {self.table!r} with itself: join the "
                "stream with the table"
            )
        side = (join.args.get("side") or "").upper()
        kind = (join.args.get("kind") or "").upper()
        stream_first = self.refs[first.alias_or_name.lower()] == STREAM_ROW
        outer_of_stream = (side == "LEFT" and stream_first) or (
            side == "RIGHT" and not stream_first
        )
        if kind in ("CROSS", "SEMI", "ANTI") or side == "FULL" or (side and not outer_of_stream):
            raise TableQueryError(
                f"joins stream {self.stream!r} with table {self.table!r} as a "
                f"{' '.join(filter(None, (side, kind))) or 'CROSS'} JOIN: each event is written "
                f"once, with its row (JOIN) or without (LEFT JOIN, the stream on the left); "
                f"use one of those, or {self.fix}"
            )
        return bool(side)

    def _condition(self, join: exp.Join) -> list[tuple[exp.Expr, str]]:
        """The ON (or USING) equalities as (stream expression, table column) pairs."""
        using = join.args.get("using")
        if using:
            self.using = {i.name.lower() for i in using}
            return [(exp.column(i.name), i.name) for i in using]
        pairs, refused = on_equalities(join, self._side_of, STREAM_ROW, TABLE_ROW)
        if refused is None:
            refused = next((b for _, b in pairs if not isinstance(b, exp.Column)), None)
        if refused is not None:
            raise TableQueryError(
                f"joins stream {self.stream!r} with table {self.table!r} on "
                f"{short_sql(refused)}: each condition of "
                "ON must be an equality of a stream expression and a column of the table; filter "
                f"in WHERE instead, or {self.fix}"
            )
        return [(a, b.name) for a, b in pairs]

    def _check_key(self, pairs: list[tuple[exp.Expr, str]]) -> None:
        """The table's row of an event is found by the table's key: ON must give all of it."""
        if self.key is None:
            return  # known once the Source's database is read
        joined = {column.lower() for _, column in pairs}
        if not self.key or joined != {k.lower() for k in self.key}:
            declared = ", ".join(self.key) if self.key else "not declared"
            raise TableQueryError(
                f"joins table {self.table!r} on {', '.join(c for _, c in pairs)}, not on its key "
                f"({declared}): an event finds the row of its key; join on the table's key "
                f"columns (declare them in the Log's spec.key), or {self.fix}"
            )

    def _side_of(self, node: exp.Expr) -> str | None:
        return side_of(node, self._column_side)

    def _column_side(self, column: exp.Column) -> str:
        # USING's column unqualified is the stream's value: the table's equals it, or is null.
        return column_side(column, self.refs, self.columns, self.using, STREAM_ROW)

    def _expanded(self, items: Sequence[exp.Expr]) -> list[exp.Expr]:
        expanded: list[exp.Expr] = []
        for item in items:
            star = item if isinstance(item, exp.Star) else None
            if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
                side = self.refs.get(item.table.lower())
                names = [(side, c) for c in self.columns[side]] if side else []
            elif star is not None:  # as Spark expands it: USING's columns once, first
                names = [
                    (STREAM_ROW, c) for c in self.columns[STREAM_ROW] if c.lower() in self.using
                ]
                names += [
                    (s, c)
                    for s in (STREAM_ROW, TABLE_ROW)
                    for c in self.columns[s]
                    if c.lower() not in self.using
                ]
            else:
                expanded.append(item.copy())
                continue
            expanded.extend(
                exp.alias_(exp.column(c, table=s, quoted=True), c, quoted=True)
                for s, c in names
                if c.lower() != DELETED
            )
        return expanded

    def _over_rows(self, node: exp.Expr) -> exp.Expr:
        """`node` with each column read from its side's struct."""

        def swap(part: exp.Expr) -> exp.Expr:
            if isinstance(part, exp.Column) and not isinstance(part.this, exp.Star):
                if part.table in (STREAM_ROW, TABLE_ROW):
                    return part
                side = self._column_side(part)
                return exp.column(part.name, table=side, quoted=True)
            return part

        return node.copy().transform(swap)
