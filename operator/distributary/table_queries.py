"""What a view computes over a table input, and how it is kept exact as the table changes.

A compacted, keyed Log is a table: each record replaces its key's row, a tombstone (or a
captured delete's `__deleted` marker) deletes it. Spark reads every record as a new row, so a
query over a table is not handed to Spark as written. It is taken apart here into what Spark can
run per record and what the runner keeps in its state (`runner/tables.py`):

- **rows** (selection and projection): the query's SELECT list is evaluated per record, with its
  WHERE condition as a flag. The runner keeps each key's last output row and writes the row
  when it changes, a tombstone when the row is deleted or stops matching.
- **groups** (GROUP BY with COUNT, SUM, AVG, MIN, MAX, COUNT(DISTINCT), HAVING; or one global
  group): per record, the group's columns and each aggregate's argument (`pre_sql`). The runner
  keeps each key's last contribution and turns a change into the old contribution taken back and
  the new one added; per group it keeps counts and exact sums, and for MIN, MAX and
  COUNT(DISTINCT) the count of each value, so a deleted value gives way to the next one. The
  SELECT list and HAVING are then evaluated over each changed group (`post`); a group left
  without rows, or failing HAVING, is deleted from the output.

Everything else over a table is refused, naming the construct and the fix: nothing over a table is
computed as if it were a stream unless the input says `read: changes`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from sqlglot import exp

from distributary.errors import DistributaryError
from distributary.sql import DIALECT, parse_query

TABLE, CHANGES = "table", "changes"
# The columns the runner gives a table's rows besides the record's (`runner/tables.py`): the
# record key's text, whether the record deletes its key's row, and where it was read.
KEY, DELETE, PARTITION, OFFSET = "_dtry_key", "_dtry_delete", "_dtry_partition", "_dtry_offset"
INTERNAL = (KEY, DELETE, PARTITION, OFFSET)
DELETED = "__deleted"  # a captured delete's marker, and an upsert output's tombstone flag
MATCH = "_dtry_match"  # the pre-projection's WHERE flag
GONE = "_dtry_gone"  # a group left without rows
GROUPS_VIEW = "_dtry_groups"  # what the post-projection reads
Function = Literal["count", "count_distinct", "sum", "avg", "min", "max"]
_FUNCTIONS: dict[type[exp.Expr], Function] = {
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
}
GENERATORS = (exp.Explode, exp.Posexplode, exp.Inline, exp.Unnest)
_KEEP_SHORT = "GROUP BY with COUNT, SUM, AVG, MIN, MAX, COUNT(DISTINCT x) and HAVING"
_KEEP = "only COUNT, SUM, AVG, MIN, MAX and COUNT(DISTINCT x), with HAVING, are kept exact"


def input_read(declared: str | None, compaction: bool) -> str:
    """How a view reads an input: as it says, else as a table when the Log is compacted (its
    records are keyed then: Kafka takes no record without a key into a compacted topic)."""
    if declared is not None:
        return declared
    return TABLE if compaction else CHANGES


class TableQueryError(DistributaryError, ValueError):
    """A query over a table that cannot be kept exact; the message names the construct and the
    fix (the caller adds the field)."""


Read = TypeVar("Read")


def cached_reading(read: Callable[..., Read]) -> Callable[..., Read]:
    """`read` (of hashable arguments) with its answers kept, its refusals (`TableQueryError`)
    too, each raised again as a new error: the operator checks its namespace's graph, and so
    reads the same queries, on every reconcile."""

    @functools.lru_cache(maxsize=1024)
    def kept(*args: Any) -> Read | TableQueryError:
        try:
            return read(*args)
        except TableQueryError as exc:
            return exc

    @functools.wraps(read)
    def reading(*args: Any) -> Read:
        found = kept(*args)
        if isinstance(found, TableQueryError):
            raise TableQueryError(str(found))
        return found

    return reading


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of a grouping query: `column` in the groups frame, computed by `function`
    over the pre-projection's column `argument` (None: COUNT(*))."""

    column: str
    function: Function
    argument: str | None


@dataclass(frozen=True)
class TableQuery:
    """A query over table `table`, taken apart. `pre_sql` reads the table's rows under its alias.
    Rows: its columns are the output, with the `MATCH` flag. Groups: `groups` and the aggregates'
    arguments, with `MATCH`; `post` are the output's expressions (one per output column, in order)
    over `GROUPS_VIEW`, and `having` the condition a group must meet (None: every group)."""

    table: str
    pre_sql: str
    groups: tuple[str, ...] = ()
    aggregates: tuple[Aggregate, ...] = ()
    post: tuple[str, ...] = ()
    having: str | None = None
    global_group: bool = False

    @property
    def grouping(self) -> bool:
        """Whether the query aggregates (groups), rather than selecting rows."""
        return bool(self.post)

    @property
    def arguments(self) -> tuple[str, ...]:
        """The pre-projection's argument columns, in order."""
        return tuple(a.argument for a in self.aggregates if a.argument is not None)


def table_query(
    sql: str,
    table: str,
    key: Sequence[str] | None,
    output_key: Sequence[str],
    columns: Sequence[str] | None = None,
) -> TableQuery:
    """`sql` (already accepted by `sql.analyze_query`), reading input alias `table` as a table
    keyed by columns `key` (empty: not declared; None: not known yet, as a Source's table before
    its database is read, and not checked) with record columns `columns` (None: unknown),
    written as an upsert table keyed by `output_key`; raises `TableQueryError` for what cannot be
    kept exact."""
    return _taken_apart(
        sql,
        table,
        tuple(key) if key is not None else None,
        tuple(output_key),
        tuple(columns) if columns is not None else None,
    )


@cached_reading
def _taken_apart(
    sql: str,
    table: str,
    key: tuple[str, ...] | None,
    output_key: tuple[str, ...],
    columns: tuple[str, ...] | None,
) -> TableQuery:
    query = parse_query(sql)
    select = _single_select(query, table)
    where = select.args.get("where")
    condition = where.this.copy() if where is not None else exp.true()
    match = exp.alias_(exp.Coalesce(this=exp.paren(condition), expressions=[exp.false()]), MATCH)
    source = select.args["from_"].this.copy()
    internal = [exp.column(name) for name in INTERNAL]
    aggregates = [a for a in select.find_all(exp.AggFunc) if _owned(a, select)]
    group = select.args.get("group")
    having = select.args.get("having")
    if not aggregates and group is None and having is None:
        _check_row_key(select, table, key, output_key)
        # A captured delete's marker is the runner's to write: a row it keeps is never deleted.
        items = [
            item
            for item in _expanded(select.expressions, table, columns)
            if _output_name(item).lower() != DELETED
        ]
        pre = exp.select(*internal, *items, match).from_(source)
        return TableQuery(table=table, pre_sql=pre.sql(dialect=DIALECT))
    return _grouping(select, table, source, [*internal, match], output_key)


def _single_select(query: exp.Query, table: str) -> exp.Select:
    """The query's one SELECT over the table alone, or why it is refused."""
    fix = f"or read it as a stream of changes (spec.inputs: read: changes for {table!r})"
    if query.args.get("with_") is not None or query.args.get("with") is not None:
        raise TableQueryError(f"uses WITH over table {table!r}: write the query without it, {fix}")
    if not isinstance(query, exp.Select):
        raise TableQueryError(
            f"combines queries ({query.key.upper()}) over table {table!r}: write one SELECT, {fix}"
        )
    source = query.args.get("from_")
    if query.args.get("joins") or not (
        source is not None
        and isinstance(source.this, exp.Table)
        and source.this.name.lower() == table.lower()
    ):
        raise TableQueryError(
            f"reads table {table!r} in a join or a subquery, which is not kept exact yet: read "
            f"{table!r} alone in the FROM clause, {fix}"
        )
    refused: tuple[tuple[tuple[type[exp.Expr], ...], str], ...] = (
        ((exp.Window,), "a window function (OVER)"),
        ((exp.Subquery, exp.Exists), "a subquery"),
        ((exp.Filter,), "an aggregate FILTER clause"),
        ((exp.Lateral,), "a LATERAL VIEW"),
        (GENERATORS, "a generator (explode, inline)"),
    )
    for kinds, what in refused:
        node = query.find(*kinds)
        if node is not None:
            raise TableQueryError(
                f"uses {what}, {short_sql(node)}, over table {table!r}: over a table, selected and "
                f"projected rows are kept exact, and {_KEEP_SHORT}; rewrite it without, {fix}"
            )
    if query.args.get("distinct") is not None:
        raise TableQueryError(
            f"uses SELECT DISTINCT over table {table!r}: write GROUP BY the selected columns "
            "instead (a group per distinct row, kept exact)"
        )
    for part, clause in (("order", "ORDER BY"), ("limit", "LIMIT"), ("offset", "OFFSET")):
        if query.args.get(part) is not None:
            raise TableQueryError(
                f"uses {clause} over table {table!r}: the output is a table, kept whole and in "
                f"no order; remove the {clause} clause"
            )
    return query


def _expanded(
    items: Sequence[exp.Expr], table: str, columns: tuple[str, ...] | None
) -> list[exp.Expr]:
    """The SELECT list with `*` as the table's columns (not a captured delete's marker)."""
    expanded: list[exp.Expr] = []
    for item in items:
        if not isinstance(item, exp.Star):
            expanded.append(item.copy())
        elif columns is None:
            raise TableQueryError(
                f"selects * from table {table!r}, whose columns are not declared: declare the "
                "Log's spec.schema, or name the columns"
            )
        else:
            expanded.extend(exp.column(c, quoted=True) for c in columns if c.lower() != DELETED)
    return expanded


def _owned(node: exp.Expr, select: exp.Select) -> bool:
    return node.find_ancestor(exp.Select) is select


def short_sql(node: exp.Expr) -> str:
    text = node.sql(dialect=DIALECT)
    return text if len(text) <= 80 else f"{text[:77]}..."


def column_side(
    column: exp.Column,
    refs: Mapping[str, str],
    columns: Mapping[str, Sequence[str]],
    using: Collection[str] = (),
    using_side: str | None = None,
) -> str:
    """The side of a join (a key of `columns`, each side's column names) that `column` reads: by
    its qualifier (`refs`: each name the query gives a side, lowercase), `using_side` for an
    unqualified column of JOIN ... USING (`using`, lowercase), else the one side that has it."""
    if column.table:
        side = refs.get(column.table.lower())
        if side is None:
            raise TableQueryError(f"names {column.sql(dialect=DIALECT)}, of no input here")
        return side
    if using_side is not None and column.name.lower() in using:
        return using_side
    having = [s for s, names in columns.items() if column.name.lower() in _lowered(names)]
    if len(having) != 1:
        raise TableQueryError(
            f"names column {column.name!r}, which "
            f"{'both inputs have' if having else 'neither input has'}: qualify it"
        )
    return having[0]


def single_join(sql: str, several: str, other: str) -> tuple[exp.Select, exp.Table, exp.Join]:
    """The query's one SELECT ... FROM a JOIN b of two inputs: the SELECT, its FROM table and
    its JOIN; else `TableQueryError`, saying `several` (more than one SELECT, or WITH) or `other`
    (not one JOIN of two inputs)."""
    query = parse_query(sql)
    if not isinstance(query, exp.Select) or query.args.get("with_") is not None:
        raise TableQueryError(several)
    joins = query.args.get("joins") or []
    source = query.args.get("from_")
    first = source.this if source is not None else None
    if (
        len(joins) != 1
        or not isinstance(first, exp.Table)
        or not isinstance(joins[0].this, exp.Table)
    ):
        raise TableQueryError(other)
    return query, first, joins[0]


def side_of(node: exp.Expr, side: Callable[[exp.Column], str]) -> str | None:
    """The one side every column of `node` reads (None: none, or both)."""
    sides = {side(c) for c in node.find_all(exp.Column)}
    return sides.pop() if len(sides) == 1 else None


def on_equalities(
    join: exp.Join, side: Callable[[exp.Expr], str | None], first: str, second: str
) -> tuple[list[tuple[exp.Expr, exp.Expr]], exp.Expr | None]:
    """ON's conditions as (`first` side's expression, `second`'s) pairs, and the first condition
    that is not such an equality (or None); no ON at all gives no pairs and None."""
    on = join.args.get("on")
    parts = list(on.flatten()) if isinstance(on, exp.And) else [on] if on is not None else []
    pairs: list[tuple[exp.Expr, exp.Expr]] = []
    for part in parts:
        if not isinstance(part, exp.EQ):
            return pairs, part
        ends = {side(part.this): part.this, side(part.expression): part.expression}
        if set(ends) != {first, second}:
            return pairs, part
        pairs.append((ends[first], ends[second]))
    return pairs, None


def unqualified(node: exp.Expr) -> str:
    """An expression of one side over that side's own columns (their qualifiers dropped)."""
    plain = node.copy().transform(
        lambda part: exp.column(part.name, quoted=True) if isinstance(part, exp.Column) else part
    )
    return plain.sql(dialect=DIALECT)


def _lowered(names: Sequence[str]) -> set[str]:
    return {name.lower() for name in names}


def _output_name(item: exp.Expr) -> str:
    return item.alias_or_name


def _check_row_key(
    select: exp.Select, table: str, key: tuple[str, ...] | None, output_key: tuple[str, ...]
) -> None:
    """Selected rows are the table's rows: the output key must hold the table's key columns as
    they are, or two rows could share an output key and a delete of one would lose the other."""
    if key is None:
        return  # known once the Source's database is read: checked then
    if not key:
        raise TableQueryError(
            f"selects rows of table {table!r}, whose key columns are not declared: declare them "
            "(the Log's spec.key, or the Source table's key) so that the output is keyed by them"
        )
    star = any(isinstance(item, exp.Star) for item in select.expressions)
    plain: dict[str, str] = {}  # output name -> the table column it is, as it is
    for item in select.expressions:
        value = item.this if isinstance(item, exp.Alias) else item
        if isinstance(value, exp.Column):
            plain[_output_name(item).lower()] = value.name.lower()
    holds = {plain.get(name.lower(), name.lower() if star else "") for name in output_key}
    missing = [column for column in key if column.lower() not in holds]
    if missing:
        raise TableQueryError(
            f"selects rows of table {table!r}, keyed by {', '.join(key)}, but spec.output.key "
            f"does not hold {', '.join(missing)} as selected: select the table's key columns and "
            "put them in spec.output.key, so each output row is one row of the table"
        )


def _grouping(
    select: exp.Select,
    table: str,
    source: exp.Expr,
    carried: list[exp.Expr],
    output_key: tuple[str, ...],
) -> TableQuery:
    items = list(select.expressions)
    if any(isinstance(item, exp.Star) for item in items):
        raise TableQueryError(
            f"selects * while grouping table {table!r}: name the grouped columns and aggregates"
        )
    group = select.args.get("group")
    group_exprs = [_grouped(e, items) for e in (group.expressions if group is not None else [])]
    if group is not None and any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets")):
        raise TableQueryError(
            f"groups table {table!r} by GROUPING SETS, ROLLUP or CUBE: group by plain columns, "
            "one view per grouping"
        )
    texts: dict[str, str] = {}  # a grouped expression's text -> its column
    pre: list[exp.Expr] = []
    for expression in group_exprs:
        if _text_of(expression) not in texts:
            texts[_text_of(expression)] = name = f"_dtry_g{len(texts)}"
            pre.append(exp.alias_(expression.copy(), name))
    aggregates: dict[str, Aggregate] = {}
    global_group = not group_exprs
    if global_group:
        pre.append(exp.alias_(exp.Literal.number(0), "_dtry_g0"))
    having_node = select.args.get("having")
    for node in [*items, _aliases_resolved(having_node.this, items) if having_node else None]:
        if node is None:
            continue
        for call in node.find_all(exp.AggFunc):
            text = _text_of(call)
            if text in aggregates:
                continue
            function, argument = _aggregate(call, table)
            column = f"_dtry_a{len(aggregates)}"
            argument_column = None
            if argument is not None:
                argument_column = f"_dtry_x{len(aggregates)}"
                pre.append(exp.alias_(argument.copy(), argument_column))
            aggregates[text] = Aggregate(column, function, argument_column)

    def over_groups(node: exp.Expr) -> exp.Expr:
        def swap(part: exp.Expr) -> exp.Expr:
            if isinstance(part, exp.AggFunc):
                return exp.column(aggregates[_text_of(part)].column)
            name = texts.get(_text_of(part))
            return exp.column(name) if name is not None else part

        swapped = node.copy().transform(swap)
        for column in swapped.find_all(exp.Column):
            if not column.name.startswith(("_dtry_g", "_dtry_a")):
                raise TableQueryError(
                    f"uses column {column.sql(dialect=DIALECT)} outside GROUP BY and outside an "
                    f"aggregate while grouping table {table!r}: group by it or aggregate it"
                )
        return swapped

    post = tuple(
        over_groups(item.this if isinstance(item, exp.Alias) else item).sql(dialect=DIALECT)
        for item in items
    )
    having = select.args.get("having")
    if having is not None:
        having = _aliases_resolved(having.this, items)
    _check_group_key(items, post, len(texts), output_key, table)
    pre_sql = exp.select(*carried[:-1], *pre, carried[-1]).from_(source).sql(dialect=DIALECT)
    return TableQuery(
        table=table,
        pre_sql=pre_sql,
        groups=tuple(texts.values()) or ("_dtry_g0",),
        aggregates=tuple(aggregates.values()),
        post=post,
        having=over_groups(having).sql(dialect=DIALECT) if having is not None else None,
        global_group=global_group,
    )


def _text_of(node: exp.Expr) -> str:
    """An expression's text for matching a SELECT item with a GROUP BY item: columns unqualified,
    case folded (Spark resolves names case-blind)."""
    plain = node.copy().transform(
        lambda part: exp.column(part.name) if isinstance(part, exp.Column) else part
    )
    return plain.sql(dialect=DIALECT, normalize=True).lower()


def _aliases_resolved(condition: exp.Expr, items: Sequence[exp.Expr]) -> exp.Expr:
    """HAVING's condition with the SELECT list's aliases it names (HAVING n > 1) replaced by
    what they stand for, as Spark resolves them."""
    named = {item.alias.lower(): item.this for item in items if isinstance(item, exp.Alias)}

    def resolve(part: exp.Expr) -> exp.Expr:
        if isinstance(part, exp.Column) and not part.table and part.name.lower() in named:
            found: exp.Expr = named[part.name.lower()].copy()
            return found
        return part

    return condition.copy().transform(resolve)


def _grouped(expression: exp.Expr, items: Sequence[exp.Expr]) -> exp.Expr:
    """A GROUP BY item as an expression: an ordinal (GROUP BY 2) is the SELECT item it names."""
    if isinstance(expression, exp.Literal) and not expression.is_string:
        position = int(expression.this)
        if 1 <= position <= len(items):
            item = items[position - 1]
            return item.this if isinstance(item, exp.Alias) else item
    return expression


def _aggregate(call: exp.Expr, table: str) -> tuple[Function, exp.Expr | None]:
    """What a call computes, over which argument; refused unless kept exact."""
    argument = call.this
    if isinstance(call, exp.Count):
        if isinstance(argument, exp.Star) or argument is None:
            return "count", None
        if isinstance(argument, exp.Distinct):
            values = argument.expressions
            if len(values) != 1:
                raise TableQueryError(
                    f"uses {short_sql(call)} over table {table!r}: COUNT(DISTINCT ...) is kept "
                    "exact over one expression; count a struct(...) of the columns instead"
                )
            return "count_distinct", values[0]
        return "count", argument
    function = _FUNCTIONS.get(type(call))
    if function is None or isinstance(argument, exp.Distinct):
        raise TableQueryError(
            f"uses {short_sql(call)} over table {table!r}: {_KEEP} (the old row's part taken back "
            "when it changes); compute it in a downstream view, or read the input as a stream "
            f"of changes (read: changes for {table!r})"
        )
    return function, argument


def _check_group_key(
    items: Sequence[exp.Expr],
    post: Sequence[str],
    groups: int,
    output_key: Sequence[str],
    table: str,
) -> None:
    """Each output row is one group: the output key must hold every grouped expression (or,
    without GROUP BY, may be constants), or two groups could share an output key."""
    names = {_output_name(item).lower(): text for item, text in zip(items, post, strict=True)}
    covered = set()
    for name in output_key:
        text = names.get(name.lower())
        if text is None:
            continue  # the graph reports a key the query does not output
        parsed = parse_query(f"SELECT {text}").expressions[0]
        if isinstance(parsed, exp.Column) and parsed.name.startswith("_dtry_g"):
            covered.add(parsed.name)
        elif not isinstance(parsed, exp.Literal):
            raise TableQueryError(
                f"keys its output by {name!r}, which is computed from the groups of table "
                f"{table!r} ({text}) rather than grouped by: key the output by the GROUP BY "
                "columns, as selected"
            )
    missing = groups - len(covered)
    if missing:
        raise TableQueryError(
            f"groups table {table!r} by {groups} expression(s) but spec.output.key holds "
            f"{len(covered)} of them: select every GROUP BY expression as a column and put them "
            "all in spec.output.key, so each output row is one group"
        )
