"""Revisions of a view, and how a spec change is carried out: ignore, restart, reprocess or refuse.

A view's revision is the hash of what determines its output and nothing else, so that tuning
resources or retention never recomputes a view, while a new query, key or input schema always does.
The classifier follows Spark Structured Streaming's "Recovery Semantics after Changes in a Streaming
Query" (programming guide, APIs on DataFrames and Datasets): a restart from the same checkpoint is
only offered for changes Spark documents as allowed, and it errs towards refusing, because a wrong
"allowed" corrupts state while a wrong "not allowed" only costs a reprocess. The rules are quoted
where they are applied. The stateful-part analysis reads the sqlglot AST of `sql.parse_query`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, astuple, dataclass, field, fields
from typing import Literal, get_args

from pydantic import BaseModel
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from distributary.api.common import Change, duration_ms
from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.api.view import DerivedView
from distributary.sql import DIALECT, canonical_sql, parse_ddl, parse_query, to_ddl
from distributary.table_queries import CHANGES, TABLE, input_read

# From the weakest to the strongest: with several differences, the strongest wins.
ChangeKind = Literal["Ignore", "RestartInPlace", "Reprocess", "Forbidden"]
_STRENGTH = {kind: rank for rank, kind in enumerate(get_args(ChangeKind))}
_REPROCESS_HINT = "set upgrade.strategy to Reprocess or Auto to recompute the view"
_KEPT = "restart in place (the checkpoint is kept)"
_FRESH = "start again from the inputs on a fresh checkpoint"
_FRESH_ONLY = "it applies only when a fresh checkpoint is made"


@dataclass(frozen=True)
class InputDefinition:
    """One input as it shapes the output: its alias, log, topic read, record format and
    watermark (its event-time column, lower case, and delay)."""

    alias: str
    log: str
    topic: str
    schema: str | None
    format: str
    watermark_column: str | None = None
    watermark_delay_ms: int | None = None
    read: str = CHANGES  # `table_queries.input_read`

    @property
    def watermark(self) -> str | None:
        """The watermark for people, e.g. `ts, 30s`; None when the input declares none."""
        if self.watermark_column is None or self.watermark_delay_ms is None:
            return None
        return f"{self.watermark_column}, {_duration(self.watermark_delay_ms)}"


@dataclass(frozen=True)
class ViewDefinition:
    """What determines a view's output: inputs (ordered by alias), canonical SQL, mode and key."""

    inputs: tuple[InputDefinition, ...]
    sql: str
    mode: str
    key: tuple[str, ...]

    def canonical_json(self) -> str:
        """The definition as canonical JSON: sorted keys, no spaces; what `revision_hash` hashes.

        An input without a watermark has no watermark keys, and one read as a stream no read
        key, so views that declare neither keep the revision hash they had before watermarks and
        tables existed. A view over a compacted Log made before tables were read as tables gets a
        new hash, so its rows are computed anew by a revision of their own."""
        data = asdict(self)
        for item in data["inputs"]:
            for name in ("watermark_column", "watermark_delay_ms"):
                if item[name] is None:
                    del item[name]
            if item["read"] == CHANGES:
                del item["read"]
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Classification:
    """How a spec change is carried out, with one line per difference for people."""

    kind: ChangeKind
    reasons: tuple[str, ...] = ()


def _input_topic(log: Log) -> str:
    # A view's output Log reports its serving revision's topic in status: reading a new upstream
    # revision is a new input, so downstream views reprocess in turn.
    if log.status is not None and log.status.topic_name:
        return log.status.topic_name
    return log.topic


def view_definition(view: DerivedView, inputs: Mapping[str, Log]) -> ViewDefinition:
    """The definition of `view`, given its input Logs by alias.

    Raises `ValueError` when an alias has no Log, and `SqlError` when the SQL or a schema does not
    parse (the pipeline graph reports both first).
    """
    items: list[InputDefinition] = []
    for item in view.spec.inputs:
        log = inputs.get(item.alias)
        if log is None:
            raise ValueError(
                f"DerivedView/{view.metadata.name}: inputs alias {item.alias!r} "
                f"(log {item.log!r}) has no Log to read its topic and schema from"
            )
        schema, watermark = log.spec.record_schema, item.watermark
        items.append(
            InputDefinition(
                alias=item.alias,
                log=item.log,
                topic=_input_topic(log),
                schema=to_ddl(parse_ddl(schema)) if schema is not None else None,
                format=log.spec.format,
                watermark_column=watermark.column.lower() if watermark else None,
                watermark_delay_ms=duration_ms(watermark.delay) if watermark else None,
                read=input_read(item.read, log.spec.compaction),
            )
        )
    items.sort(key=lambda i: (i.alias.lower(), i.alias))
    output = view.spec.output
    return ViewDefinition(
        inputs=tuple(items),
        sql=canonical_sql(view.spec.sql),
        mode=output.mode,
        key=tuple(output.key or ()),
    )


def revision_hash(definition: ViewDefinition) -> str:
    """The revision hash: the first 12 hex digits of the SHA-256 of the canonical JSON."""
    return hashlib.sha256(definition.canonical_json().encode()).hexdigest()[:12]


# --- The stateful parts of a query -------------------------------------------------------------

# Spark aggregates sqlglot leaves as anonymous functions.
_ANONYMOUS_AGGREGATE_NAMES = (
    "every some std try_sum try_avg histogram_numeric count_min_sketch hll_sketch_agg "
    "hll_union_agg theta_sketch_agg bitmap_construct_agg bitmap_or_agg kll_sketch_agg_bigint "
    "kll_sketch_agg_double kll_sketch_agg_float"
)
_ANONYMOUS_AGGREGATES = frozenset(_ANONYMOUS_AGGREGATE_NAMES.split())
_TIME_WINDOWS = frozenset({"window", "session_window"})


@dataclass(frozen=True)
class StatefulParts:
    """The operations of a query whose state Spark keeps in the checkpoint, in a normal form."""

    aggregates: tuple[str, ...] = field(default=(), metadata={"label": "aggregates"})
    grouping: tuple[str, ...] = field(default=(), metadata={"label": "GROUP BY keys"})
    time_windows: tuple[str, ...] = field(default=(), metadata={"label": "time windows"})
    joins: tuple[str, ...] = field(default=(), metadata={"label": "joins"})
    deduplication: tuple[str, ...] = field(default=(), metadata={"label": "DISTINCT or UNION"})
    window_functions: tuple[str, ...] = field(default=(), metadata={"label": "OVER windows"})
    limits: tuple[str, ...] = field(default=(), metadata={"label": "LIMIT clauses"})

    @property
    def stateless(self) -> bool:
        """True when the query keeps no state between micro-batches."""
        return not any(astuple(self))


def _render(node: exp.Expr, *, qualified: bool = False) -> str:
    copy = node.copy()
    if not qualified:  # `pv.user` and `user` name the same column of a single-input query
        for column in copy.find_all(exp.Column):
            column.set("table", None)
    return copy.sql(dialect=DIALECT, comments=False)


def _nodes(query: exp.Expr, *types: type[exp.Expr]) -> list[exp.Expr]:
    """Nodes of the given types in the order they are written (depth first)."""
    return list(query.find_all(*types, bfs=False))


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _is_aggregate(node: exp.Expr) -> bool:
    named = isinstance(node, exp.Anonymous) and node.name in _ANONYMOUS_AGGREGATES
    return (isinstance(node, exp.AggFunc) or named) and node.find_ancestor(exp.Window) is None


def _grouping(query: exp.Expr) -> tuple[tuple[str, ...], tuple[str, ...]]:
    keys: list[str] = []
    windows: list[str] = []
    for group in _nodes(query, exp.Group):
        for key in (e.unnest() for e in group.expressions):
            is_window = isinstance(key, exp.Anonymous) and key.name in _TIME_WINDOWS
            (windows if is_window else keys).append(_render(key))
        for extra in ("grouping_sets", "cube", "rollup"):
            if group.args.get(extra):
                keys.append(f"{extra.upper()} {_render(group)}")
        if group.args.get("all"):
            keys.append("ALL")
    return _unique(keys), _unique(windows)


def _deduplication(query: exp.Expr) -> tuple[str, ...]:
    found = [
        "DISTINCT " + ", ".join(_render(e) for e in select.expressions)
        for select in _nodes(query, exp.Select)
        if select.args.get("distinct")
    ]
    found += [
        f"{type(op).__name__.upper()} ({', '.join(op.named_selects)})"
        for op in query.find_all(exp.SetOperation, bfs=False)
        if op.args.get("distinct")
    ]
    return _unique(found)


def _normalized(sql: str) -> exp.Expr:
    # Spark resolves identifiers case-insensitively, quoted or not.
    query = normalize_identifiers(parse_query(sql), dialect=DIALECT)
    for call in _nodes(query, exp.Anonymous):
        call.set("this", call.name.lower())
    return query


@functools.lru_cache(maxsize=512)
def stateful_parts(sql: str) -> StatefulParts:
    """The stateful operations of a Spark SQL query (raises `SqlError` when it does not parse).

    These are the operations the guide lists under "Changes in stateful operations": streaming
    aggregation (aggregates, GROUP BY keys, time windows), streaming deduplication (DISTINCT, set
    operations without ALL), stream-stream joins; plus window functions and LIMIT, which Spark
    also runs with state.

    A pure function of the text, kept for the last 512 queries: every round of a reconcile asks
    it again for each view (`distributary run` reconciles every second).
    """
    query = _normalized(sql)
    grouping, time_windows = _grouping(query)
    return StatefulParts(
        aggregates=_unique(
            _render(n) for n in _nodes(query, exp.AggFunc, exp.Anonymous) if _is_aggregate(n)
        ),
        grouping=grouping,
        time_windows=time_windows,
        joins=_unique(_render(j, qualified=True) for j in _nodes(query, exp.Join)),
        deduplication=_deduplication(query),
        window_functions=_unique(_render(w) for w in _nodes(query, exp.Window)),
        limits=_unique(_render(limit) for limit in _nodes(query, exp.Limit)),
    )


def _referenced_columns(sql: str) -> set[str] | None:
    """Column names the query reads, or None when it reads all of them (`*`, not `COUNT(*)`)."""
    query = _normalized(sql)
    if any(star.find_ancestor(exp.Func) is None for star in _nodes(query, exp.Star)):
        return None
    return {column.name for column in _nodes(query, exp.Column)}


def _show(items: Iterable[str], limit: int = 80) -> str:
    text = ", ".join(items) or "none"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- What Spark's checkpoint refuses -----------------------------------------------------------


def _changed_columns(old: str | None, new: str | None) -> set[str] | None:
    """Columns removed or retyped between two schemas; None when either schema is undeclared."""
    if old is None or new is None:
        return None
    before = {c.name.lower(): c.type for c in parse_ddl(old)}
    after = {c.name.lower(): c.type for c in parse_ddl(new)}
    return {name for name, kind in before.items() if after.get(name) != kind}


def _source_blockers(old: ViewDefinition, new: ViewDefinition) -> list[str]:
    # "Changes in the number or type (i.e. different source) of input sources: This is not
    # allowed." and "Changes to subscribed topics/files are generally not allowed as the results
    # are unpredictable."
    before = sorted(i.topic for i in old.inputs)
    after = sorted(i.topic for i in new.inputs)
    if before == after:
        return []
    return [
        f"inputs: the topics read changed ({_show(before)} -> {_show(after)}): Spark's "
        "checkpoint does not accept a change in the number or the topics of its sources"
    ]


def _table_blockers(old: ViewDefinition, new: ViewDefinition) -> list[str]:
    """A table's rows live in the state the query made of them (`runner/tables.py`): a change of
    how an input is read, or of a query over a table, rebuilds them."""
    found = []
    reads = {i.alias.lower(): i.read for i in old.inputs}
    for item in new.inputs:
        before = reads.get(item.alias.lower(), item.read)
        if before != item.read:
            found.append(
                f"inputs: {item.alias} is read as {_read_name(item.read)} instead of "
                f"{_read_name(before)}: its rows are computed anew"
            )
    tables = [i.alias for i in new.inputs if i.read == TABLE]
    if not found and tables and old.sql != new.sql:
        which = f"table {tables[0]}" if len(tables) == 1 else f"tables {' and '.join(tables)}"
        found.append(
            f"sql changed over {which}: the view keeps the table's rows as the query needs "
            "them, so a new query reads the table anew"
        )
    return found


def _read_name(read: str) -> str:
    return "a table" if read == TABLE else "a stream of changes"


def _output_blockers(old: ViewDefinition, new: ViewDefinition) -> list[str]:
    found = []
    if old.mode != new.mode:
        found.append(
            f"output.mode changed from {old.mode} to {new.mode}: restarting in place "
            "would mix rows of both modes in one output topic"
        )
    if old.key != new.key:
        found.append(
            f"output.key changed from [{', '.join(old.key)}] to [{', '.join(new.key)}]: "
            "restarting in place would mix keys of both shapes in one output topic"
        )
    return found


def _state_blockers(old: StatefulParts, new: StatefulParts) -> list[str]:
    # "Any changes (that is, additions, deletions, or schema modifications) to the stateful
    # operations of a streaming query are not allowed between restarts." Aggregation: "Any change
    # in number or type of grouping keys or aggregates is not allowed." Deduplication: "Any change
    # in number or type of deduplicating columns is not allowed." Stream-stream join: "Changes in
    # the schema or equi-joining columns are not allowed. Changes in join type (outer or inner)
    # are not allowed." A change that keeps the types (a wider time window, another aggregate
    # argument) may pass Spark's schema check, but the restored state would mean something else.
    found = []
    for part in fields(StatefulParts):
        before, after = getattr(old, part.name), getattr(new, part.name)
        if before != after:
            found.append(
                f"sql: the {part.metadata['label']} changed ({_show(before)} -> {_show(after)}): "
                "Spark cannot restore its state from the checkpoint"
            )
    return found


def _schema_blockers(old: ViewDefinition, new: ViewDefinition) -> list[str]:
    # The state holds grouping keys, aggregation buffers and joined rows typed after the input
    # columns; a column the query reads that is removed or retyped changes the state's schema.
    referenced = _referenced_columns(new.sql)
    before = {i.alias: i for i in old.inputs}
    found = []
    for item in new.inputs:
        previous = before.get(item.alias)
        if previous is None or (previous.schema, previous.format) == (item.schema, item.format):
            continue
        changed = _changed_columns(previous.schema, item.schema)
        if referenced is None or changed is None or previous.format != item.format:
            what = "the record schema"  # `*`, an undeclared schema or a new format: all of it
        elif changed & referenced:
            what = f"column {_show(sorted(changed & referenced))}"
        else:
            continue  # only columns the query does not read were added, removed or retyped
        found.append(
            f"inputs[{item.alias}]: {what} of log {item.log} changed while the query "
            "keeps state: Spark cannot restore state whose schema changed"
        )
    return found


# --- Watermarks --------------------------------------------------------------------------------
#
# Spark keeps one watermark per query and writes it into the offset log of every batch
# (`batchWatermarkMs`); a restart restores it, and it never moves back. Aggregations drop the state
# of windows it has passed (in append mode, writing them once) and drop records older than it;
# a query without state ignores it.

WatermarkChange = Literal["added", "removed", "column", "delay"]


def _duration(ms: int) -> str:
    units = (("w", 604_800_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))
    return next((f"{ms // size}{unit}" for unit, size in units if ms and ms % size == 0), f"{ms}ms")


def _watermark_changes(
    old: ViewDefinition, new: ViewDefinition
) -> list[tuple[WatermarkChange, str, str]]:
    """Each watermark change of an input kept by alias: (what, the old column, a line)."""
    found: list[tuple[WatermarkChange, str, str]] = []
    before, after = {i.alias: i for i in old.inputs}, {i.alias: i for i in new.inputs}
    for alias in sorted(before.keys() & after.keys()):
        was, now, field_name = before[alias], after[alias], f"inputs[{alias}].watermark"
        column = was.watermark_column or ""
        if was.watermark == now.watermark:
            continue
        if was.watermark is None:
            found.append(("added", column, f"{field_name} was added ({now.watermark})"))
        elif now.watermark is None:
            found.append(("removed", column, f"{field_name} was removed (was {was.watermark})"))
        else:
            if was.watermark_column != now.watermark_column:
                change = f"changed from {column} to {now.watermark_column}"
                found.append(("column", column, f"{field_name}.column {change}"))
            if was.watermark_delay_ms != now.watermark_delay_ms:
                delays = [
                    _duration(d or 0) for d in (was.watermark_delay_ms, now.watermark_delay_ms)
                ]
                change = f"changed from {delays[0]} to {delays[1]}"
                found.append(("delay", column, f"{field_name}.delay {change}"))
    return found


def _watermark_blockers(old: ViewDefinition, new: ViewDefinition) -> list[str]:
    found = []
    for what, column, line in _watermark_changes(old, new):
        if what == "removed":
            found.append(
                f"{line} while the query keeps state: the state of windows it had passed is "
                "gone, so their late records would count from nothing again"
            )
        elif what == "column":
            found.append(
                f"{line} while the query keeps state: the watermark Spark restores from the "
                f"checkpoint was measured on {column}"
            )
    return found


def _in_place_notes(old: ViewDefinition, new: ViewDefinition) -> dict[str, str]:
    """What restarting in place means for each watermark change Spark's checkpoint accepts."""
    if stateful_parts(old.sql).stateless and stateful_parts(new.sql).stateless:
        note = "the query keeps no state, so the watermark drops nothing; restart in place"
        return {line: note for _, _, line in _watermark_changes(old, new)}
    notes = {
        "added": "Spark's checkpoint accepts it; restart in place: from now on the state of "
        "windows the watermark passes is dropped, and so are records older than it",
        "delay": "Spark's checkpoint accepts it; restart in place: the watermark it restores "
        "never moves back, so windows already written stay as they are",
    }
    return {line: notes[what] for what, _, line in _watermark_changes(old, new) if what in notes}


def in_place_blockers(old: ViewDefinition, new: ViewDefinition) -> list[str]:
    """Why Spark's checkpoint of `old` cannot run `new`; empty when a restart in place is safe."""
    old_parts, new_parts = stateful_parts(old.sql), stateful_parts(new.sql)
    found = _source_blockers(old, new) + _table_blockers(old, new) + _output_blockers(old, new)
    found += _state_blockers(old_parts, new_parts)
    if not found and not new_parts.stateless:
        found += _schema_blockers(old, new) + _watermark_blockers(old, new)
    return found


# --- Classifying a view's change ---------------------------------------------------------------

Finding = tuple[ChangeKind, str]


def _changed_fields(old: BaseModel, new: BaseModel) -> list[str]:
    """Top-level fields (camelCase) whose values differ between two models of one type."""
    before = old.model_dump(by_alias=True, mode="json")
    after = new.model_dump(by_alias=True, mode="json")
    return [name for name in before if before[name] != after.get(name)]


def _definition_differences(old: ViewDefinition, new: ViewDefinition) -> list[str]:
    found = []
    before, after = {i.alias: i for i in old.inputs}, {i.alias: i for i in new.inputs}
    for alias in sorted(before.keys() - after.keys()):
        found.append(f"inputs: {alias} (log {before[alias].log}) was removed")
    for alias in sorted(after.keys() - before.keys()):
        found.append(f"inputs: {alias} (log {after[alias].log}) was added")
    for alias in sorted(before.keys() & after.keys()):
        was, now = before[alias], after[alias]
        if was.log != now.log:
            found.append(f"inputs[{alias}].log changed from {was.log} to {now.log}")
        elif was.topic != now.topic:
            found.append(
                f"inputs[{alias}]: log {now.log} now serves topic {now.topic} (was {was.topic})"
            )
        if was.log == now.log and (was.schema, was.format) != (now.schema, now.format):
            found.append(f"inputs[{alias}]: the schema of log {now.log} changed")
        if was.read != now.read:
            found.append(f"inputs[{alias}].read changed from {was.read} to {now.read}")
    found += [line for _, _, line in _watermark_changes(old, new)]
    if old.sql != new.sql:
        found.append("sql changed")
    if old.mode != new.mode:
        found.append(f"output.mode changed from {old.mode} to {new.mode}")
    if old.key != new.key:
        found.append(f"output.key changed from [{', '.join(old.key)}] to [{', '.join(new.key)}]")
    return found


def _definition_findings(
    old: DerivedView, new: DerivedView, old_inputs: Mapping[str, Log], new_inputs: Mapping[str, Log]
) -> list[Finding]:
    before, after = view_definition(old, old_inputs), view_definition(new, new_inputs)
    if revision_hash(before) == revision_hash(after):
        return []
    differences = _definition_differences(before, after)
    strategy = new.spec.upgrade.strategy
    if strategy == "Reprocess":
        return [
            ("Reprocess", f"{d}: a new revision recomputes the output from the start of the inputs")
            for d in differences
        ]
    blockers = in_place_blockers(before, after)
    if not blockers:
        notes = _in_place_notes(before, after)
        accepted = "Spark's checkpoint accepts it; restart in place"
        return [("RestartInPlace", f"{d}: {notes.get(d, accepted)}") for d in differences]
    if strategy == "InPlace":
        return [("Forbidden", f"{b}; {_REPROCESS_HINT}") for b in blockers]
    return [("Reprocess", f"{b}; reprocess from the start of the inputs instead") for b in blockers]


def _setting_findings(old: DerivedView, new: DerivedView) -> list[Finding]:
    found: list[Finding] = []
    if old.output_log != new.output_log:
        rename = f"output.log changed from {old.output_log} to {new.output_log}"
        found.append(("Forbidden", f"{rename}: it is immutable; create a new view for a new log"))
    for name in _changed_fields(old.spec.upgrade, new.spec.upgrade):
        found.append(("Ignore", f"upgrade.{name} changed: it applies to the next output change"))
    for name in _changed_fields(old.spec.output, new.spec.output):
        if name in ("partitions", "replicas", "retention", "deletionPolicy"):
            found.append(("Ignore", f"output.{name} changed: the output Log applies it"))
    for name in _changed_fields(old.spec.dead_letters, new.spec.dead_letters):
        found.append(("Ignore", f"deadLetters.{name} changed: the dead-letter topic takes it now"))
    if old.spec.suspend != new.spec.suspend:
        found.append(("Ignore", _suspend_reason(new.spec.suspend)))
    # "Addition/deletion/modification of rate limits is allowed" (maxOffsetsPerTrigger); the
    # trigger, resources and configuration are not part of the checkpoint.
    for name in _changed_fields(old.spec.spark, new.spec.spark):
        found.append(("RestartInPlace", f"spark.{name} changed: {_KEPT}"))
    positions = {i.alias: (i.log, i.starting_position) for i in old.spec.inputs}
    for item in new.spec.inputs:
        log, position = positions.get(item.alias, (None, None))
        if log == item.log and position != item.starting_position:
            found.append(
                ("Ignore", f"inputs[{item.alias}].startingPosition changed: {_FRESH_ONLY}")
            )
    return found


def _suspend_reason(suspend: bool) -> str:
    """Why suspending or resuming recomputes nothing."""
    if suspend:
        return "suspend set: the application stops where it is, its position and checkpoint kept"
    return "suspend unset: the application starts again where it stopped, from its checkpoint"


def _strongest(found: list[Finding]) -> Classification:
    if not found:
        return Classification("Ignore")
    ordered = sorted(found, key=lambda f: -_STRENGTH[f[0]])  # stable: strongest reasons first
    return Classification(ordered[0][0], tuple(reason for _, reason in ordered))


def classify_view_change(
    old: DerivedView, new: DerivedView, old_inputs: Mapping[str, Log], new_inputs: Mapping[str, Log]
) -> Classification:
    """Classify the change from `old` to `new` (input Logs by alias, as each spec saw them).

    The strongest kind wins (Forbidden > Reprocess > RestartInPlace > Ignore) and every
    difference is listed, strongest first. No difference at all: Ignore with no reasons.
    """
    found = _setting_findings(old, new) + _definition_findings(old, new, old_inputs, new_inputs)
    return _strongest(found)


# --- Classifying a job's change ----------------------------------------------------------------


def classify_job_change(old: StreamJob, new: StreamJob) -> Classification:
    """Classify the change from `old` to `new` under the new spec's upgrade strategy.

    The operator cannot read the job's code, so code and settings follow the strategy; a change of
    sources cannot be restored from a checkpoint ("Changes in the number or type of input sources:
    This is not allowed"), while "Changes to output topic are allowed" for the Kafka sink.
    """
    in_place = new.spec.upgrade.strategy == "InPlace"
    code_kind: ChangeKind = "RestartInPlace" if in_place else "Reprocess"
    consequence = _KEPT if in_place else _FRESH
    found: list[Finding] = []
    for name in _changed_fields(old.spec, new.spec):
        if name in ("image", "mainApplicationFile", "arguments", "env"):
            found.append((code_kind, f"{name} changed: {consequence}"))
        elif name == "upgrade":
            found.append(("Ignore", "upgrade.strategy changed: it applies to the next change"))
        elif name == "suspend":
            found.append(("Ignore", _suspend_reason(new.spec.suspend)))
    for name in _changed_fields(old.spec.spark, new.spec.spark):
        found.append((code_kind, f"spark.{name} changed: {consequence}"))
    found += _job_log_findings(old, new, in_place)
    return _strongest(found)


def _job_log_findings(old: StreamJob, new: StreamJob, in_place: bool) -> list[Finding]:
    found: list[Finding] = []
    before = {i.log: i.starting_position for i in old.spec.inputs}
    after = {i.log: i.starting_position for i in new.spec.inputs}
    if before.keys() != after.keys():
        change = f"inputs changed ({_show(sorted(before))} -> {_show(sorted(after))})"
        refused = "Spark cannot restore a checkpoint whose sources changed; set upgrade.strategy"
        found.append(
            ("Forbidden", f"{change}: {refused} to Reprocess to start on a fresh checkpoint")
            if in_place
            else ("Reprocess", f"{change}: {_FRESH}")
        )
    for log in sorted(before.keys() & after.keys()):
        if before[log] != after[log]:
            found.append(("Ignore", f"inputs[{log}].startingPosition changed: {_FRESH_ONLY}"))
    outputs = sorted(o.log for o in old.spec.outputs), sorted(o.log for o in new.spec.outputs)
    if outputs[0] != outputs[1]:
        change = f"outputs changed ({_show(outputs[0])} -> {_show(outputs[1])})"
        found.append(("RestartInPlace", f"{change}: {_KEPT}"))
    return found


def change_status(classification: Classification, generation: int) -> Change:
    """The `status.lastChange` that records `classification` for `generation`."""
    reasons = list(classification.reasons)
    return Change(generation=generation, classification=classification.kind, reasons=reasons)
