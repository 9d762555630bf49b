"""What Spark refuses in a view's query that parsing and resolving do not catch.

Every input of a view is a stream, so Spark runs its query under Structured Streaming's rules
(`UnsupportedOperationChecker` in Spark's catalyst): no ORDER BY outside a complete-mode
aggregation (a view never writes in complete mode), no subquery expression over a stream, no
non-time window function, no distinct aggregate, no OFFSET, no LIMIT in update mode, and the join
and set operation rules below. A view in `append` mode runs in Spark's append output mode, an
`upsert` view in update mode (`runner.query`): the rules that depend on the mode take it in.

The checks are conservative: each refuses only what Spark refuses whatever the schemas and the
settings. What turns on watermarks or on types the static analysis does not know (stream-stream
outer joins, chained aggregations, a condition that is a column of the wrong type) is left to
Spark at run time. They run after `sql.analyze_query` has accepted the query, so every table a
query reads is an input alias or a CTE.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence

from sqlglot import exp

from distributary.sql import DIALECT, parse_query

# Operators whose result is a number, a date, a string or an array: never a boolean.
_NOT_BOOLEAN = (
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.IntDiv,
    exp.Mod,
    exp.DPipe,
    exp.BitwiseAnd,
    exp.BitwiseOr,
    exp.BitwiseXor,
    exp.BitwiseLeftShift,
    exp.BitwiseRightShift,
    exp.BitwiseNot,
    exp.Neg,
)
_REWRITE_SUBQUERY = (
    "Structured Streaming runs no subquery expression over a stream (IN, EXISTS or a scalar "
    "subquery): read the input with a JOIN instead (IN and EXISTS: LEFT SEMI JOIN)"
)


def query_problems(sql: str, aliases: Sequence[str], mode: str) -> list[str]:
    """What Spark would refuse in a view's query, one message each (for `spec.sql`): `aliases`
    are the view's input aliases, every one a stream, and `mode` its output mode (`append` or
    `upsert`). The query must already have passed `sql.analyze_query`."""
    return list(_problems(sql, tuple(aliases), mode))


@functools.lru_cache(maxsize=4096)  # the operator checks its namespace's graph on every reconcile
def _problems(sql: str, aliases: tuple[str, ...], mode: str) -> tuple[str, ...]:
    query = parse_query(sql)
    streams = _Streams(query, aliases)
    problems: list[str] = []
    if not streams(query):
        problems.append(
            "reads none of its inputs: Spark runs only a query that reads a stream; read one "
            f"of {', '.join(aliases) or '(none: declare spec.inputs)'} in its FROM clause"
        )
    problems.extend(_condition_problems(query))
    problems.extend(_subquery_problems(query, streams))
    for select in query.find_all(exp.Select):
        problems.extend(_select_problems(select, streams, mode))
    for operation in query.find_all(exp.SetOperation):
        problems.extend(_set_operation_problems(operation, streams, mode))
    return tuple(dict.fromkeys(problems))


class _Streams:
    """Whether a part of a query reads a stream: an input alias, or a CTE that reads one."""

    def __init__(self, query: exp.Query, aliases: Sequence[str]) -> None:
        self.inputs = {alias.lower() for alias in aliases}
        self.ctes: dict[str, bool] = {}
        for cte in query.find_all(exp.CTE):
            self.ctes[cte.alias_or_name.lower()] = self(cte.this)

    def __call__(self, node: exp.Expr | None) -> bool:
        if node is None:
            return False
        for table in node.find_all(exp.Table):
            name = table.name.lower()
            if self.ctes.get(name, name in self.inputs):
                return True
        return False

    def source(self, select: exp.Select) -> bool:
        """Whether the rows a SELECT works on come from a stream (its FROM and joins)."""
        joins = select.args.get("joins") or []
        return any(self(node) for node in [select.args.get("from_"), *joins])


def _sql(node: exp.Expr) -> str:
    text = node.sql(dialect=DIALECT)
    return text if len(text) <= 60 else text[:57] + "..."


def _condition_problems(query: exp.Query) -> Iterator[str]:
    conditions: list[tuple[str, exp.Expr | None]] = []
    for where in query.find_all(exp.Where):
        conditions.append(("WHERE", where.this))
    for having in query.find_all(exp.Having):
        conditions.append(("HAVING", having.this))
    for join in query.find_all(exp.Join):
        conditions.append(("JOIN ... ON", join.args.get("on")))
    for clause, condition in conditions:
        inner = condition.unnest() if condition is not None else None
        if inner is None:
            continue
        if isinstance(inner, exp.Literal):
            what = "a string" if inner.is_string else "a number"
        elif isinstance(inner, _NOT_BOOLEAN):
            what = "a concatenation" if isinstance(inner, exp.DPipe) else "an arithmetic result"
        else:
            continue
        yield (
            f"has {clause} {_sql(inner)}, which is {what}, not true or false: Spark refuses "
            "a condition that is not boolean; write a comparison such as `column = value`"
        )


def _subquery_problems(query: exp.Query, streams: _Streams) -> Iterator[str]:
    for node in query.find_all(exp.Subquery, exp.Exists):
        parent = node.parent
        if isinstance(node, exp.Subquery) and (
            parent is None or isinstance(parent, exp.From | exp.Join | exp.SetOperation)
        ):
            continue  # a derived table or a set operation's branch: part of the plan
        if isinstance(node, exp.Subquery) and isinstance(parent, exp.Subquery | exp.CTE):
            continue
        if streams(node):
            yield f"reads an input in the subquery {_sql(node)}: {_REWRITE_SUBQUERY}"


def _owned(select: exp.Select, kind: type[exp.Expr]) -> Iterator[exp.Expr]:
    """The nodes of a kind that belong to this SELECT, not to a query nested in it."""
    for node in select.find_all(kind):
        if node.find_ancestor(exp.Select) is select:
            yield node


def _select_problems(select: exp.Select, streams: _Streams, mode: str) -> Iterator[str]:
    if not streams.source(select):
        return
    yield from _ordering_problems(select, mode)
    for window in _owned(select, exp.Window):
        if window.args.get("over"):
            yield (
                f"uses the window function {_sql(window)} on a stream: Structured Streaming runs "
                "no window function over rows (OVER ...); group by a time window with "
                "window(ts, '10 minutes') instead, or drop the OVER clause"
            )
    for distinct in _owned(select, exp.Distinct):
        if isinstance(distinct.parent, exp.AggFunc):
            yield (
                f"uses the distinct aggregate {_sql(distinct.parent)} on a stream: Structured "
                "Streaming does not run distinct aggregates; use approx_count_distinct(...) "
                "or group by the column first in an upstream view"
            )
    group = select.args.get("group")
    if group is not None and (
        group.args.get("rollup")
        or group.args.get("cube")
        or group.args.get("grouping_sets")
        or any(isinstance(e, exp.Rollup | exp.Cube | exp.GroupingSets) for e in group.expressions)
    ):
        yield (
            "groups a stream with GROUPING SETS, ROLLUP or CUBE: Structured Streaming does not "
            "run them; group by plain columns, one view per grouping"
        )
    for call in _owned(select, exp.Anonymous):
        if call.name.lower() == "monotonically_increasing_id":
            yield (
                "calls monotonically_increasing_id() on a stream, which Structured Streaming does "
                "not allow: key rows by their own columns (or the input's offset) instead"
            )
    for table in _owned(select, exp.Table):
        if table.args.get("sample") is not None and streams(table):
            yield (
                f"samples the stream {table.name!r} (TABLESAMPLE), which Structured Streaming "
                "does not allow: filter rows with a condition instead, e.g. WHERE rand() < 0.1"
            )
    yield from _join_problems(select, streams, mode)


def _ordering_problems(query: exp.Query, mode: str) -> Iterator[str]:
    if query.args.get("order") is not None or query.args.get("sort") is not None:
        yield (
            "orders a stream (ORDER BY or SORT BY): Structured Streaming sorts only an "
            "aggregation's complete result, which a view never writes; remove it (a log keeps "
            "records in the order they arrive; readers sort)"
        )
    if query.args.get("offset") is not None:
        yield (
            "skips rows with OFFSET, which Structured Streaming does not allow on a stream: "
            "remove it, or filter rows with a condition"
        )
    if query.args.get("limit") is not None and mode == "upsert":
        yield (
            "has a LIMIT, which Structured Streaming does not allow on a stream in update mode "
            "(the mode of an upsert view): remove it, or make the view spec.output.mode append"
        )


def _join_problems(select: exp.Select, streams: _Streams, mode: str) -> Iterator[str]:
    left = streams(select.args.get("from_"))
    for join in select.args.get("joins") or []:
        right = streams(join.this)
        side, kind = join.side.upper(), join.kind.upper()
        name = " ".join(part for part in (side, kind) if part) or "INNER"
        if left and right and mode == "upsert":
            yield (
                f"joins two streams ({_sql(join.this)}), which Structured Streaming does only in "
                "append mode, not in the update mode of an upsert view: make the view "
                "spec.output.mode append, or join in an upstream append view"
            )
        if kind == "ANTI" and right:
            yield (
                f"has a {name} JOIN with a stream ({_sql(join.this)}) on its right, which "
                "Structured Streaming does not allow: put a stream only on the left of an "
                "anti join"
            )
        elif left != right and _keeps_static_rows(side, kind, left, right):
            yield (
                f"has a {name} JOIN of a stream with static rows ({_sql(join.this)}), which "
                "Structured Streaming does not allow: keep the stream on the side whose rows "
                "the join keeps (the left of a LEFT join), or use an inner join"
            )
        left = left or right


def _keeps_static_rows(side: str, kind: str, left: bool, right: bool) -> bool:
    """Whether a join of a stream with static rows (a VALUES list) keeps the static side's
    rows, which Spark cannot do for rows that are still to come."""
    if side == "FULL":
        return True
    if side == "RIGHT":
        return left
    return right and ((side == "LEFT" and kind in ("", "OUTER")) or kind == "SEMI")


def _set_operation_problems(
    operation: exp.SetOperation, streams: _Streams, mode: str
) -> Iterator[str]:
    left, right = streams(operation.this), streams(operation.expression)
    if isinstance(operation, exp.Intersect) and (left or right):
        yield (
            "uses INTERSECT on a stream, which Structured Streaming does not allow: use a "
            "LEFT SEMI JOIN on the columns instead"
        )
    elif isinstance(operation, exp.Except) and right:
        yield (
            "has a stream on the right of EXCEPT, which Structured Streaming does not allow: "
            "keep the stream on the left, or use a join"
        )
    elif isinstance(operation, exp.Union) and left != right:
        yield (
            "unions a stream with static rows (a query that reads no input), which Structured "
            "Streaming does not allow: read an input in every branch of the UNION"
        )
    if left or right:
        yield from _ordering_problems(operation, mode)
