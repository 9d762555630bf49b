"""Spark SQL as Distributary reads it: parsing, canonical text, record schemas, the functions a
query calls, query analysis.

Everything here runs without Spark: sqlglot's Spark dialect parses queries and DDL, so
`distributary validate` and the planners can reason about a view's SQL on any machine. Spark stays
the judge at run time; these checks catch what a person would otherwise learn from a failed job.

`analyze_query` resolves a query against the schemas of its input tables with sqlglot's optimizer
(qualify, then annotate_types) and checks what the optimizer leaves unchecked. Types are reported
only where the inference agrees with Spark: where sqlglot is known to widen or guess (decimals,
conditionals, generator columns), the type is left unknown rather than invented. Spark's time
window functions are not known to sqlglot; they are typed as the struct Spark gives them.

A record schema is held to what Spark reads without surprise: every column typed, and no two
columns, nor two fields of one struct at any depth, whose names differ only in case (Spark
compares names without regard to case, so they would be one). The functions that run code of a
query's author's choosing (`UNSAFE_FUNCTIONS`) are listed here, where queries are parsed; whether
a view may call them is the operator's setting, checked by the graph.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from sqlglot import Token, TokenType, exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.schema import MappingSchema

from distributary.errors import DistributaryError

DIALECT = "spark"


class SqlError(DistributaryError, ValueError):
    """SQL or DDL that Distributary cannot accept, with a message for people.

    `table` is the input alias the problem is about, when it is about one (a missing column).
    """

    def __init__(self, message: str, *, table: str | None = None) -> None:
        super().__init__(message)
        self.table = table


@dataclass(frozen=True)
class Column:
    """One column of a record schema: its name and its Spark SQL type."""

    name: str
    type: str


def _first_error(exc: SqlglotError) -> str:
    if isinstance(exc, ParseError) and exc.errors:
        first = exc.errors[0]
        line, col = first.get("line"), first.get("col")
        where = f" (line {line}, column {col})" if line is not None else ""
        return f"{first.get('description', str(exc))}{where}"
    return str(exc).splitlines()[0]


def _tokens(sql: str) -> list[Token]:
    # sqlglot reads WINDOW right after GROUP BY as the WINDOW clause; followed by '(' it is
    # Spark's time window function, so it is passed on as a plain name.
    tokens = Dialect.get_or_raise(DIALECT).tokenize(sql)
    for token, following in itertools.pairwise(tokens):
        if token.token_type is TokenType.WINDOW and following.token_type is TokenType.L_PAREN:
            token.token_type = TokenType.VAR
    return tokens


# Parentheses (a subquery's and a call's included) and CASE expressions may nest this deep: the
# parser and the optimizer recurse, about fifteen frames a level, within Python's default limit.
MAX_NESTING = 32
_TOO_DEEP = (
    f"nests parentheses, subqueries or CASE expressions more than {MAX_NESTING} levels deep, "
    f"the most Distributary reads: name the inner parts in a WITH clause or flatten the expression"
)
_TOO_LONG = (
    "chains operators (such as NOT NOT ... or a || b || ...) too deeply for Distributary to "
    "read: shorten the chain, or split it over columns of a WITH clause"
)


def _check_nesting(tokens: Sequence[Token]) -> None:
    depth = 0
    for token in tokens:
        if token.token_type in (TokenType.L_PAREN, TokenType.CASE):
            depth += 1
            if depth > MAX_NESTING:
                raise SqlError(f"{_TOO_DEEP} (line {token.line}, column {token.col})")
        elif token.token_type in (TokenType.R_PAREN, TokenType.END):
            depth = max(0, depth - 1)


def parse_query(sql: str) -> exp.Query:
    """Parse one Spark SQL query, or raise `SqlError` saying where it breaks (and for a query
    nested deeper than `MAX_NESTING`, or too deep for the parser in another way)."""
    try:
        tokens = _tokens(sql)
        _check_nesting(tokens)
        parser = Dialect.get_or_raise(DIALECT).parser()
        statements = [s for s in parser.parse(tokens, sql) if s is not None]
    except SqlglotError as exc:
        raise SqlError(f"does not parse as Spark SQL: {_first_error(exc)}") from None
    except RecursionError:  # a chain such as NOT NOT ... nests without parentheses
        raise SqlError(_TOO_LONG) from None
    if len(statements) != 1:
        raise SqlError(f"holds {len(statements)} statements: write exactly one query")
    statement = statements[0]
    if isinstance(statement, exp.Condition | exp.Alias):  # `SELEC x` reads as `SELEC AS x`
        raise SqlError("is not a query: write one SELECT ... FROM ... query")
    if not isinstance(statement, exp.Query):
        raise SqlError(f"is a {statement.key.upper()} statement: write one SELECT query")
    return statement


@functools.lru_cache(maxsize=4096)  # a view's revision hash is taken on every reconcile
def canonical_sql(sql: str) -> str:
    """The query in one normal form: comments, spacing and keyword case do not change it."""
    query = parse_query(sql)
    try:
        return query.sql(dialect=DIALECT, comments=False, normalize=False, pretty=False)
    except RecursionError:
        raise SqlError(_TOO_LONG) from None


def parse_ddl(ddl: str) -> list[Column]:
    """Columns of a Spark DDL schema such as `user STRING, ts TIMESTAMP`, or raise `SqlError`."""
    return list(_parsed_ddl(ddl))


_DDL_PREFIX = "CREATE TABLE t ("


def _ddl_error(exc: SqlglotError) -> str:
    """The parser's first complaint, with its column counted in the DDL as written."""
    if isinstance(exc, ParseError) and exc.errors:
        first = exc.errors[0]
        line, col = first.get("line"), first.get("col")
        if line == 1 and isinstance(col, int):
            col = max(1, col - len(_DDL_PREFIX))
        where = f" (line {line}, column {col})" if line is not None else ""
        return f"{first.get('description', str(exc))}{where}"
    return _first_error(exc)


# A schema's types nest in parentheses and angle brackets (STRUCT<a: ARRAY<INT>>); the parser
# recurses on each level as it does on a query's parentheses, so the same limit holds.
_DDL_TOO_DEEP = (
    f"nests parentheses or types (STRUCT<...>, ARRAY<...>, MAP<...>) more than {MAX_NESTING} "
    "levels deep, the most Distributary reads: flatten the schema"
)


def _check_ddl_nesting(tokens: Sequence[Token]) -> None:
    depth = 0
    for token in tokens[len(_DDL_PREFIX.split()) :]:  # the prefix's own parenthesis is not counted
        if token.token_type in (TokenType.L_PAREN, TokenType.LT):
            depth += 1
            if depth > MAX_NESTING:
                col = token.col - len(_DDL_PREFIX) if token.line == 1 else token.col
                raise SqlError(f"{_DDL_TOO_DEEP} (line {token.line}, column {max(1, col)})")
        elif token.token_type in (TokenType.R_PAREN, TokenType.GT):
            depth = max(0, depth - 1)


@functools.lru_cache(maxsize=4096)  # a namespace's graph parses every Log's schema each build
def _parsed_ddl(ddl: str) -> tuple[Column, ...]:
    text = f"{_DDL_PREFIX}{ddl})"
    try:
        tokens = Dialect.get_or_raise(DIALECT).tokenize(text)
        _check_ddl_nesting(tokens)
        statements = Dialect.get_or_raise(DIALECT).parser().parse(tokens, text)
    except SqlglotError as exc:
        raise SqlError(f"is not a Spark DDL schema: {_ddl_error(exc)}") from None
    except RecursionError:  # nesting the count above does not see
        raise SqlError(_DDL_TOO_DEEP) from None
    table = statements[0] if len(statements) == 1 else None  # `a INT); SELECT 1 (` is two
    schema = table.this if isinstance(table, exp.Create) else None
    if not isinstance(schema, exp.Schema):
        raise SqlError("is not a Spark DDL schema: write columns as 'name TYPE, name TYPE'")
    columns: list[Column] = []
    for definition in schema.expressions:
        if not isinstance(definition, exp.ColumnDef) or definition.kind is None:
            raise SqlError(
                f"is not a Spark DDL schema: {definition.sql(dialect=DIALECT)!r} has no type"
            )
        columns.append(Column(definition.name, definition.kind.sql(dialect=DIALECT)))
        _check_fields(definition.name, definition.kind)
    _check_names([c.name for c in columns], "column", "")
    if not columns:
        raise SqlError("has no columns")
    return tuple(columns)


def _check_names(names: Sequence[str], what: str, where: str) -> None:
    """Refuse two names that Spark, comparing without regard to case, reads as one."""
    seen: dict[str, str] = {}
    for name in names:
        first = seen.get(name.lower())
        if first is None:
            seen[name.lower()] = name
            continue
        if first == name:
            raise SqlError(f"names {what} {name!r} twice{where}: rename or remove one")
        raise SqlError(
            f"names {what} {first!r} and {name!r}{where}: Spark compares names without regard "
            f"to case, so they are one {what}; rename or remove one"
        )


def _check_fields(path: str, kind: exp.DataType) -> None:
    """Refuse duplicate field names in the structs nested anywhere in a column's type."""
    if kind.this == exp.DataType.Type.STRUCT:
        fields = [f for f in kind.expressions if isinstance(f, exp.ColumnDef)]
        _check_names([f.name for f in fields], "field", f" in {path!r}")
        for field in fields:
            if isinstance(field.kind, exp.DataType):
                _check_fields(f"{path}.{field.name}", field.kind)
        return
    parts = [e for e in kind.expressions if isinstance(e, exp.DataType)]
    suffixes = ("[]",) if kind.this == exp.DataType.Type.ARRAY else ("{key}", "{value}")
    for part, suffix in zip(parts, suffixes, strict=False):
        _check_fields(f"{path}{suffix}", part)


def to_ddl(columns: list[Column]) -> str:
    """A Spark DDL schema string from columns (the inverse of `parse_ddl`)."""
    return ", ".join(f"{_quote(c.name)} {c.type}" for c in columns)


def _quote(name: str) -> str:
    # Keywords are quoted too: `select INT` does not parse, `end` only in some positions.
    plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None
    tokens = Dialect.get_or_raise(DIALECT).tokenize(name) if plain else []
    if len(tokens) == 1 and tokens[0].token_type is TokenType.VAR:
        return name
    return "`" + name.replace("`", "``") + "`"


# Functions that run code ---------------------------------------------------------------------

# Spark SQL built-ins that run code of the author's choosing inside Spark, with the driver's and
# executors' rights (their service account, the Secrets they mount): a view may call them only
# where the operator's settings allow it. `transform` is the script transformation
# `SELECT TRANSFORM(...) USING 'command'`, not the higher-order function over arrays.
UNSAFE_FUNCTIONS: dict[str, str] = {
    "reflect": "calls any Java method",
    "java_method": "calls any Java method",
    "try_reflect": "calls any Java method",
    "transform": "runs any program (SELECT TRANSFORM ... USING 'command')",
}
ALLOW_FUNCTIONS_FLAG = "--allow-sql-functions"
ALLOW_FUNCTIONS_ENV = "DISTRIBUTARY_ALLOW_SQL_FUNCTIONS"


def allowed_functions(text: str | Sequence[str]) -> frozenset[str]:
    """The unsafe functions a setting such as `reflect,java_method` allows (any case, comma or
    space separated); raises `ValueError` for a name that is not one of `UNSAFE_FUNCTIONS`."""
    items = text.replace(",", " ").split() if isinstance(text, str) else text
    names = frozenset(name.strip().lower() for name in items if name.strip())
    unknown = sorted(names - UNSAFE_FUNCTIONS.keys())
    if unknown:
        raise ValueError(
            f"{', '.join(unknown)}: not a function Distributary refuses; the settings allow "
            f"only {', '.join(UNSAFE_FUNCTIONS)}"
        )
    return names


@functools.lru_cache(maxsize=4096)
def functions_called(sql: str) -> frozenset[str]:
    """The names of the functions a query calls, lower-cased (as Spark resolves them, without
    regard to case); a script transformation counts as `transform`. Raises `SqlError` for SQL
    that does not parse."""
    names: set[str] = set()
    for node in parse_query(sql).walk():
        if isinstance(node, exp.QueryTransform):
            names.add("transform")
        elif isinstance(node, exp.Anonymous):
            names.add(node.name.lower())
        elif isinstance(node, exp.Func) and not isinstance(node, exp.Transform):
            names.add(node.sql_name().lower())  # the array function TRANSFORM runs no program
    return frozenset(names)


def unsafe_calls(sql: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    """The functions of `UNSAFE_FUNCTIONS` that a query calls and `allowed` does not allow, in
    that table's order; none for SQL that does not parse (its analysis says why)."""
    try:
        called = functions_called(sql)
    except SqlError:
        return []
    return [name for name in UNSAFE_FUNCTIONS if name in called and name not in allowed]


# Query analysis ------------------------------------------------------------------------------

_TIME_WINDOWS = frozenset({"window", "session_window"})
_TIME_WINDOW_MARK = "distributary_time_window"
# Nodes whose type does not depend on how their operands were typed.
_TYPE_FIXING = (exp.Cast, exp.Predicate, exp.Connector, exp.Not, exp.Count)
# Nodes that pass a DECIMAL through unchanged; anywhere else Spark's precision rules apply.
_DECIMAL_KEEPING = (
    exp.Alias,
    exp.Column,
    exp.Dot,
    exp.Paren,
    exp.Min,
    exp.Max,
    exp.First,
    exp.Last,
    exp.Cast,
)
_INT_MAX = 2**31 - 1
_LISTED_COLUMNS = 20


@dataclass(frozen=True)
class OutputColumn:
    """One column a query outputs: its name, and its Spark type where it is known."""

    name: str
    type: str | None


@dataclass(frozen=True)
class QueryAnalysis:
    """What a query reads (input aliases, in order of appearance) and what it outputs.

    `complete` is False when `SELECT *` over a table of unknown schema hides some output columns.
    """

    tables: tuple[str, ...]
    columns: tuple[OutputColumn, ...]
    complete: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        """The output column names, in order."""
        return tuple(column.name for column in self.columns)

    def outputs(self, name: str) -> bool:
        """Whether the query outputs a column of this name (compared as Spark does, case-blind)."""
        return name.lower() in {column.lower() for column in self.names}

    def record_schema(self, unknown_as: str | None = None) -> list[Column] | None:
        """The output as record columns, or None when a column is not known, or a type is not
        known and `unknown_as` gives none to use instead."""
        if not self.complete:
            return None
        types = [(c.name, c.type or unknown_as) for c in self.columns]
        columns = [Column(name, kind) for name, kind in types if kind is not None]
        return columns if len(columns) == len(self.columns) and columns else None


def analyze_query(sql: str, tables: Mapping[str, Sequence[Column]]) -> QueryAnalysis:
    """Resolve a query against its input tables: the aliases it reads and its typed output.

    `tables` maps each alias the query may read to its columns; an alias with no columns has an
    unknown schema, so its columns are not checked. Raises `SqlError` for SQL that does not parse,
    a table that is not an alias, a column its table does not have, an output column without a
    name, and two output columns with one name.

    The answer depends on nothing else, so it is kept: the operator checks a view in its
    namespace's graph on every reconcile, and analysing its SQL is most of that work.
    """
    found = _analyzed(sql, tuple((alias, tuple(columns)) for alias, columns in tables.items()))
    if isinstance(found, SqlError):
        raise SqlError(str(found), table=found.table)
    return found


@functools.lru_cache(maxsize=4096)
def _analyzed(
    sql: str, tables: tuple[tuple[str, tuple[Column, ...]], ...]
) -> QueryAnalysis | SqlError:
    try:
        return _analyze(sql, dict(tables))
    except SqlError as exc:
        return exc
    except RecursionError:
        return SqlError(_TOO_LONG)


def _analyze(sql: str, tables: Mapping[str, Sequence[Column]]) -> QueryAnalysis:
    query = parse_query(sql)
    inputs = _Inputs(tables)
    _check_output_names(query)
    read = _read_tables(query, inputs)
    tree: exp.Expr = _name_values_columns(_type_time_windows(query.copy()))
    _check_qualified_columns(tree, inputs)
    schema = inputs.schema()
    try:
        tree = qualify(
            tree,
            dialect=DIALECT,
            schema=schema,
            quote_identifiers=False,
            validate_qualify_columns=False,
        )
    except SqlglotError as exc:
        raise SqlError(f"cannot be resolved: {_first_error(exc)}") from None
    _check_unresolved_columns(tree, inputs)
    tree = _annotate(tree, schema)
    columns, complete = _outputs(tree, _spellings(query, tables))
    names = [column.name.lower() for column in columns]
    for column in columns:
        if names.count(column.name.lower()) > 1:
            raise SqlError(
                f"outputs two columns named {column.name!r}: rename one with `AS other_name`"
            )
    return QueryAnalysis(tuple(read), tuple(columns), complete)


def _name_values_columns(tree: exp.Expr) -> exp.Expr:
    """Name the columns of an inline table (`VALUES (1, 2)`) as Spark does, `col1`, `col2`...,
    where the query names none: sqlglot would call them otherwise, and a query that reads them
    by Spark's names would look like one reading columns that do not exist."""
    for values in list(tree.find_all(exp.Values)):
        alias = values.args.get("alias")
        if alias is not None and alias.columns:
            continue
        rows = values.expressions
        width = len(rows[0].expressions) if rows and isinstance(rows[0], exp.Tuple) else 1
        columns = [exp.to_identifier(f"col{i}") for i in range(1, width + 1)]
        name = alias.this if alias is not None else exp.to_identifier("values")
        values.set("alias", exp.TableAlias(this=name, columns=columns))
    return tree


class _Inputs:
    """The tables a query may read, looked up as Spark does: without regard to case."""

    def __init__(self, tables: Mapping[str, Sequence[Column]]) -> None:
        self.aliases = {alias.lower(): alias for alias in tables}
        self.columns = {
            alias.lower(): [c.name for c in cols] for alias, cols in tables.items() if cols
        }
        self._types: dict[str, object] = {
            alias.lower(): {c.name: c.type for c in cols} for alias, cols in tables.items() if cols
        }

    def alias(self, table: exp.Table) -> str | None:
        if table.args.get("db") or table.args.get("catalog"):
            return None
        return self.aliases.get(table.name.lower())

    def schema(self) -> MappingSchema:
        return MappingSchema(self._types, dialect=DIALECT)


def _scopes(tree: exp.Expr) -> list[Scope]:
    try:
        return traverse_scope(tree)
    except SqlglotError as exc:
        raise SqlError(f"cannot be resolved: {_first_error(exc)}") from None


def _leftmost_select(query: exp.Expr) -> exp.Select | None:
    while isinstance(query, exp.SetOperation | exp.Subquery):
        query = query.this
    return query if isinstance(query, exp.Select) else None


def _is_time_window(node: exp.Expr) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.lower() in _TIME_WINDOWS


def _check_output_names(query: exp.Query) -> None:
    select = _leftmost_select(query)
    for position, item in enumerate(select.expressions if select else [], start=1):
        if isinstance(item, exp.Alias | exp.Column | exp.Dot | exp.Star) or _is_time_window(item):
            continue
        raise SqlError(
            f"output column {position} ({item.sql(dialect=DIALECT)}) has no name: "
            "add `AS name` after it"
        )


def _read_tables(query: exp.Query, inputs: _Inputs) -> list[str]:
    tables = {
        id(source)
        for scope in _scopes(query)
        for source in scope.sources.values()
        if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier)
    }
    read: list[str] = []
    found = (t for t in query.find_all(exp.Table) if id(t) in tables)
    for table in sorted(found, key=lambda t: t.this.meta.get("start", 0)):
        alias = inputs.alias(table)
        if alias is None:
            name = table.sql(dialect=DIALECT)
            raise SqlError(
                f"reads table {name!r}, which is not an input alias: use one of "
                f"{', '.join(inputs.aliases.values()) or '(none)'}, or add an input "
                f"with alias {table.name!r}"
            )
        if alias not in read:
            read.append(alias)
    return read


def _window_cast(call: exp.Expr) -> exp.Cast:
    cast = exp.Cast(this=call.copy(), to=_window_type("TIMESTAMP"))
    cast.meta[_TIME_WINDOW_MARK] = True
    return cast


def _window_type(time_type: str) -> exp.DataType:
    return exp.DataType.build(f"STRUCT<start: {time_type}, `end`: {time_type}>", dialect=DIALECT)


def _type_time_windows(tree: exp.Query) -> exp.Query:
    """Give window() and session_window() the struct type Spark gives them.

    Spark names the grouping struct after the function, so `window.start` and a bare `window`
    refer to it; those references become field accesses on the typed call.
    """
    for select in list(tree.find_all(exp.Select)):
        calls = [
            c
            for c in select.find_all(exp.Anonymous)
            if _is_time_window(c) and c.find_ancestor(exp.Select) is select
        ]
        if not calls:
            continue
        sources = _source_names(select)
        for column in list(select.find_all(exp.Column)):
            first = column.parts[0].name
            if (
                first.lower() == calls[0].name.lower()
                and first.lower() not in sources
                and column.find_ancestor(exp.Select) is select
            ):
                _replace_window_reference(column, calls[0])
        for call in calls:
            in_projection = call.parent is select and call.arg_key == "expressions"
            name = call.name.lower()
            call.replace(
                exp.alias_(_window_cast(call), name) if in_projection else _window_cast(call)
            )
    return tree


def _source_names(select: exp.Select) -> set[str]:
    joins = select.args.get("joins") or []
    return {
        node.this.alias_or_name.lower()
        for node in [select.args.get("from_"), *joins]
        if node is not None and isinstance(node.this, exp.Expr)
    }


def _replace_window_reference(column: exp.Column, call: exp.Expr) -> None:
    replacement: exp.Expr = _window_cast(call)
    for part in column.parts[1:]:
        replacement = exp.Dot(this=replacement, expression=part.copy())
    if (
        column.parent is not None
        and column.arg_key == "expressions"
        and isinstance(column.parent, exp.Select)
    ):
        replacement = exp.alias_(replacement, column.parts[-1].name)
    column.replace(replacement)


def _source_columns(source: exp.Table | Scope, inputs: _Inputs) -> list[str] | None:
    if isinstance(source, exp.Table):
        return inputs.columns.get(source.name.lower())
    select = _leftmost_select(source.expression)
    if select is None or any(item.is_star for item in select.expressions):
        return None
    names = [item.alias_or_name for item in select.expressions]
    return names if all(names) else None


def _describe(name: str, source: exp.Table | Scope, inputs: _Inputs) -> str:
    if isinstance(source, exp.Table):
        return f"table {inputs.aliases.get(source.name.lower(), source.name)!r}"
    return f"{'CTE' if source.is_cte else 'subquery'} {name!r}"


def _missing(name: str, lacking: str, available: Sequence[str], table: str | None) -> SqlError:
    lowered = {column.lower(): column for column in available}
    near = difflib.get_close_matches(name.lower(), list(lowered), n=1)
    hint = f" (did you mean {lowered[near[0]]!r}?)" if near else ""
    listed = ", ".join(available[:_LISTED_COLUMNS]) + (
        ", ..." if len(available) > _LISTED_COLUMNS else ""
    )
    return SqlError(f"uses column {name!r}, which {lacking}{hint}; columns: {listed}", table=table)


def _lookup(scope: Scope, name: str) -> tuple[str, exp.Table | Scope] | None:
    for source_name, source in scope.sources.items():
        if source_name.lower() == name.lower():
            return source_name, source
    return None


def _check_qualified_columns(tree: exp.Expr, inputs: _Inputs) -> None:
    for scope in _scopes(tree):
        for column in scope.columns:
            parts = column.parts
            found = _lookup(scope, parts[0].name) if len(parts) > 1 else None
            if found is None:
                continue
            available = _source_columns(found[1], inputs)
            name = parts[1].name
            if available is not None and name.lower() not in {a.lower() for a in available}:
                table = inputs.alias(found[1]) if isinstance(found[1], exp.Table) else None
                lacking = f"{_describe(found[0], found[1], inputs)} does not have"
                raise _missing(name, lacking, available, table)


def _sees_unknown(scope: Scope | None, inputs: _Inputs) -> bool:
    while scope is not None:
        for source in scope.sources.values():
            if _source_columns(source, inputs) is None and not (
                isinstance(source, Scope) and source.is_udtf
            ):
                return True
        scope = scope.parent
    return False


def _check_unresolved_columns(tree: exp.Expr, inputs: _Inputs) -> None:
    for scope in _scopes(tree):
        if not isinstance(scope.expression, exp.Select) or _sees_unknown(scope, inputs):
            continue
        for column in scope.unqualified_columns:
            raise _unresolved(column.name, scope, inputs)
        if not scope.is_correlated_subquery and not scope.pivots:
            for column in scope.external_columns:
                names = ", ".join(scope.sources) or "(none)"
                raise SqlError(
                    f"uses {column.sql(dialect=DIALECT)!r}, but {column.table!r} is "
                    f"neither a table nor a column there: use one of {names}"
                )


def _unresolved(name: str, scope: Scope, inputs: _Inputs) -> SqlError:
    sources = list(scope.sources.items())
    if len(sources) == 1:
        source_name, source = sources[0]
        table = inputs.alias(source) if isinstance(source, exp.Table) else None
        available = _source_columns(source, inputs) or []
        lacking = f"{_describe(source_name, source, inputs)} does not have"
        return _missing(name, lacking, available, table)
    having = [
        _describe(n, s, inputs)
        for n, s in sources
        if name.lower() in {c.lower() for c in _source_columns(s, inputs) or []}
    ]
    if len(having) > 1:
        return SqlError(
            f"uses column {name!r}, which {' and '.join(having)} both have: qualify it "
            f"({', '.join(f'{n}.{name}' for n, _ in sources)})"
        )
    available = [c for _, source in sources for c in _source_columns(source, inputs) or []]
    lacking = "none of " + ", ".join(_describe(n, s, inputs) for n, s in sources) + " has"
    return _missing(name, lacking, available, None)


def _annotate(tree: exp.Expr, schema: MappingSchema) -> exp.Expr:
    tree = annotate_types(tree, schema=schema, dialect=DIALECT)
    retyped = False
    for cast in tree.find_all(exp.Cast):
        if not cast.meta.get(_TIME_WINDOW_MARK):
            continue
        arguments = cast.this.expressions
        time_type = arguments[0].type if arguments else None
        spark_type = time_type.sql(dialect=DIALECT) if time_type is not None else None
        if spark_type == "TIMESTAMP":
            continue
        ntz = spark_type == "TIMESTAMP_NTZ"
        cast.set("to", _window_type("TIMESTAMP_NTZ") if ntz else exp.DataType.build("unknown"))
        retyped = True
    return annotate_types(tree, schema=schema, dialect=DIALECT) if retyped else tree


def _branches(query: exp.Expr) -> Iterator[exp.Select]:
    if isinstance(query, exp.SetOperation):
        yield from _branches(query.this)
        yield from _branches(query.expression)
    elif isinstance(query, exp.Subquery):
        yield from _branches(query.this)
    elif isinstance(query, exp.Select):
        yield query


def _outputs(tree: exp.Expr, spellings: Mapping[str, str]) -> tuple[list[OutputColumn], bool]:
    branches = list(_branches(tree))
    if not branches:
        return [], False
    generated = {lateral.alias_or_name.lower() for lateral in tree.find_all(exp.Lateral)}
    columns: list[OutputColumn] = []
    complete = True
    for position, item in enumerate(branches[0].expressions):
        if item.is_star:
            complete = False
            continue
        types = {
            _spark_type(branch.expressions[position], spellings, generated)
            for branch in branches
            if position < len(branch.expressions)
        }
        name = spellings.get(item.alias_or_name.lower(), item.alias_or_name)
        columns.append(OutputColumn(name, types.pop() if len(types) == 1 else None))
    return columns, complete


def _spark_type(item: exp.Expr, spellings: Mapping[str, str], generated: set[str]) -> str | None:
    dtype = item.type
    if dtype is None or not _trusted(item, generated):
        return None
    if any(
        node.this in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL)
        for node in dtype.find_all(exp.DataType)
    ):
        return None
    dtype = dtype.copy()
    for identifier in dtype.find_all(exp.Identifier):
        identifier.set("this", spellings.get(identifier.name.lower(), identifier.name))
    return dtype.sql(dialect=DIALECT)


def _trusted(item: exp.Expr, generated: set[str]) -> bool:
    """Whether sqlglot types this expression as Spark does (see the module docstring)."""
    for node in item.walk(prune=lambda n: n is not item and isinstance(n, _TYPE_FIXING)):
        if isinstance(node, exp.Literal) and node.is_number:
            text = node.this.lower()
            if "." in text and "e" not in text:
                return False  # Spark reads 1.5 as a DECIMAL, sqlglot as a DOUBLE
            if text.isdigit() and int(text) > _INT_MAX:
                return False  # Spark reads it as a BIGINT
        elif isinstance(node, exp.Coalesce | exp.If | exp.Case):
            # sqlglot widens these (coalesce(i, i) is a BIGINT to it); Spark keeps a shared type
            if not isinstance(node.parent, exp.Case) and _branches_differ(node):
                return False
        elif _guessed(node, generated):
            return False
    return True


def _guessed(node: exp.Expr, generated: set[str]) -> bool:
    if isinstance(node, exp.Column) and node.table.lower() in generated:
        return True  # a generator's column (LATERAL VIEW explode): sqlglot types the input
    decimal = node.type is not None and node.type.is_type("decimal")
    return decimal and not isinstance(node, _DECIMAL_KEEPING)


def _branches_differ(node: exp.Expr) -> bool:
    if isinstance(node, exp.Coalesce):
        branches = [node.this, *node.expressions]
    elif isinstance(node, exp.If):
        branches = [node.args.get("true"), node.args.get("false")]
    else:
        branches = [when.args.get("true") for when in node.args.get("ifs") or []]
        branches.append(node.args.get("default"))
    own = node.type.sql(dialect=DIALECT) if node.type is not None else None
    types = {
        b.type.sql(dialect=DIALECT) if b.type is not None else None
        for b in branches
        if b is not None and not (b.type is not None and b.type.is_type("null"))
    }
    return types != {own}


def _spellings(query: exp.Expr, tables: Mapping[str, Sequence[Column]]) -> dict[str, str]:
    """Names as people wrote them: sqlglot lowercases identifiers, Spark keeps their case."""
    spelled: dict[str, str] = {}
    for identifier in query.find_all(exp.Identifier):
        spelled.setdefault(identifier.name.lower(), identifier.name)
    for columns in tables.values():
        for column in columns:
            spelled.setdefault(column.name.lower(), column.name)
            try:
                fields = exp.DataType.build(column.type, dialect=DIALECT).find_all(exp.Identifier)
            except SqlglotError:
                continue
            for field in fields:
                spelled.setdefault(field.name.lower(), field.name)
    return spelled
