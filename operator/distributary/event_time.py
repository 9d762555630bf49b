"""Event time: the checks of watermarks and of aggregations that only a watermark can make final.

An append view writes each row once, so a row of an aggregation must be final when written. Spark
knows that only for a group keyed by event time that the watermark has passed, and refuses to
start any other append aggregation; these checks say so at `distributary validate` (and in the
operator, which builds the same graph), with the fix. The query's shape is read from its sqlglot
AST, as `sql` reads it, so nothing here needs Spark.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp

from distributary.api import DerivedView, Log
from distributary.sql import DIALECT, Column, SqlError, parse_ddl, parse_query

_TIME_WINDOWS = frozenset({"window", "session_window"})
# Spark's TimestampType; TIMESTAMP_NTZ has no instant, so Spark keeps no watermark on it.
_EVENT_TIME_TYPES = frozenset({"TIMESTAMP", "TIMESTAMP_LTZ"})


@dataclass(frozen=True)
class TimeKey:
    """A GROUP BY key on event time: window(ts, ...), session_window(ts, ...) or ts itself.

    `table` is the qualifier written before the column (`v` in `v.ts`), if any.
    """

    column: str
    table: str | None
    call: str | None


@dataclass(frozen=True)
class Grouping:
    """Whether a query aggregates, and its GROUP BY keys on a column (the event-time candidates).

    Spark writes an aggregation's row in append mode only once the watermark has passed one of
    these keys, so the checks of event time look for a watermarked column among them.
    """

    aggregates: bool
    time_keys: tuple[TimeKey, ...]

    @property
    def windows(self) -> tuple[TimeKey, ...]:
        """The window() and session_window() keys."""
        return tuple(key for key in self.time_keys if key.call is not None)


def grouping(sql: str) -> Grouping:
    """How `sql` aggregates (raises `SqlError` when it does not parse)."""
    query = parse_query(sql)
    aggregates = any(node.find_ancestor(exp.Window) is None for node in query.find_all(exp.AggFunc))
    keys: list[TimeKey] = []
    for group in query.find_all(exp.Group):
        aggregates = True
        select = group.parent if isinstance(group.parent, exp.Select) else None
        named = {item.alias.lower(): item.this for item in select.expressions} if select else {}
        for key in (e.unnest() for e in group.expressions):
            if isinstance(key, exp.Column) and not key.table and key.name.lower() in named:
                key = named[key.name.lower()]  # GROUP BY an output column's alias
            found = _time_key(key)
            if found is not None:
                keys.append(found)
    return Grouping(aggregates, tuple(dict.fromkeys(keys)))


def _time_key(key: exp.Expr) -> TimeKey | None:
    call = None
    if isinstance(key, exp.Anonymous) and key.name.lower() in _TIME_WINDOWS and key.expressions:
        call, key = key.name.lower(), key.expressions[0]
    if isinstance(key, exp.Column):
        return TimeKey(key.name, key.table or None, call)
    if call is not None:  # a window over an expression: no column of an input
        return TimeKey(key.sql(dialect=DIALECT), None, call)
    return None


def event_time_problems(
    view: DerivedView, inputs: Mapping[str, Log], sql_ok: bool
) -> list[tuple[str, str]]:
    """Watermarks on columns that are not TIMESTAMP columns of their input, and an append view
    that aggregates without grouping by a watermarked column: Spark refuses to start it, since
    it could never know that a row is final."""
    found: list[tuple[str, str]] = []
    for index, item in enumerate(view.spec.inputs):
        log = inputs.get(item.alias)
        if item.watermark is not None and log is not None:
            problem = _watermark_column_problem(item.watermark.column, log)
            if problem is not None:
                found.append((f"spec.inputs[{index}].watermark.column", problem))
    if sql_ok and view.spec.output.mode == "append":
        found += _unbounded_aggregation(view, inputs)
    return found


def _watermark_column_problem(column: str, log: Log) -> str | None:
    columns = log_columns(log)
    if not columns:
        return (
            f"names column {column!r}, but {_name(log)} declares no schema: declare "
            f"spec.schema on it with {column} TIMESTAMP"
        )
    typed = {c.name.lower(): c for c in columns}
    match = typed.get(column.lower())
    if match is None:
        near = difflib.get_close_matches(column.lower(), list(typed), n=1)
        hint = f" (did you mean {typed[near[0]].name!r}?)" if near else ""
        return (
            f"names column {column!r}, which {_name(log)} spec.schema does not have{hint}: "
            "name its TIMESTAMP column that holds when each event happened"
        )
    if match.type not in _EVENT_TIME_TYPES:
        return (
            f"names column {match.name!r} of type {match.type}: a watermark needs a TIMESTAMP "
            f"column; declare it as TIMESTAMP in {_name(log)} spec.schema or name another column"
        )
    return None


def _unbounded_aggregation(view: DerivedView, inputs: Mapping[str, Log]) -> list[tuple[str, str]]:
    shape = grouping(view.spec.sql)
    if not shape.aggregates:
        return []
    marks = {(i.alias.lower(), i.watermark.column.lower()) for i in view.spec.inputs if i.watermark}
    for key in shape.time_keys:
        if any((alias, key.column.lower()) in marks for alias in _owners(key, view, inputs)):
            return []
        if marks and key.call and not _owners(key, view, inputs, strict=True):
            return []  # a window over a column computed in the query: Spark judges it
    windows = shape.windows
    either = "or set spec.output.mode: upsert with a key"
    if not windows:
        column = _event_time_column(view, inputs)
        return [
            (
                "spec.sql",
                "aggregates in append mode without an event-time window, so no row would ever "
                f"be final: declare spec.inputs[].watermark {{column: {column}, delay: 30s}} and "
                f"GROUP BY window({column}, '1 minute'), {either}",
            )
        ]
    key = windows[0]
    owners = _owners(key, view, inputs)
    index = next((n for n, i in enumerate(view.spec.inputs) if i.alias.lower() in owners[:1]), None)
    path = "spec.inputs" if index is None or len(owners) > 1 else f"spec.inputs[{index}]"
    return [
        (
            f"{path}.watermark",
            f"is not declared on column {key.column!r}, which the append aggregation groups "
            f"by {key.call}({key.column}, ...), so no window would ever be final: add "
            f"watermark: {{column: {key.column}, delay: 30s}} to the input, {either}",
        )
    ]


def _owners(
    key: TimeKey, view: DerivedView, inputs: Mapping[str, Log], *, strict: bool = False
) -> list[str]:
    """The aliases (lower case) of the inputs a grouped column may come from; unless `strict`,
    every input when none declares it (a column of a subquery may be any input's)."""
    having = [
        i.alias.lower()
        for i in view.spec.inputs
        if key.column.lower() in {c.name.lower() for c in log_columns(inputs.get(i.alias))}
        and (key.table is None or key.table.lower() == i.alias.lower())
    ]
    return having if having or strict else [i.alias.lower() for i in view.spec.inputs]


def _event_time_column(view: DerivedView, inputs: Mapping[str, Log]) -> str:
    """The first TIMESTAMP column of the view's inputs, for an example in a message."""
    for item in view.spec.inputs:
        for column in log_columns(inputs.get(item.alias)):
            if column.type in _EVENT_TIME_TYPES:
                return column.name
    return "ts"


def log_columns(log: Log | None) -> list[Column]:
    """The columns of a Log's schema (none when it has none or it does not parse)."""
    if log is None or log.spec.record_schema is None:
        return []
    try:
        return parse_ddl(log.spec.record_schema)
    except SqlError:
        return []  # reported on the Log itself


def _name(log: Log) -> str:
    return f"Log/{log.metadata.namespace}/{log.metadata.name}"
