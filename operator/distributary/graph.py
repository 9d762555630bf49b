"""The pipeline graph: logs, the views and jobs that read and write them, and what is wrong with it.

Loading and checking never stop at the first mistake: every file, document and resource is taken as
far as it goes, and each mistake becomes a `SpecProblem` naming the resource, the field and the fix,
so `distributary validate` reports them all at once. A view's output is a derived `Log` built here,
so whoever reads it (a later view, the planners, the graph drawing) sees a log like any other. Views
are checked in topological order because a view reading another view's output needs that output's
schema, which only exists once the upstream query has been analysed.
"""

from __future__ import annotations

import difflib
import heapq
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from distributary.api import (
    DerivedView,
    Log,
    Resource,
    ResourceError,
    Sink,
    Source,
    StreamJob,
    label_part,
    parse_resource,
)
from distributary.api.admission import narrowed, place, schema_problems
from distributary.api.documents import BeyondLimits, yaml_documents
from distributary.api.names import topic_names
from distributary.api.source import SourceTable
from distributary.event_time import event_time_problems, log_columns
from distributary.joined_tables import joined_tables
from distributary.query_rules import query_problems
from distributary.sql import (
    ALLOW_FUNCTIONS_ENV,
    ALLOW_FUNCTIONS_FLAG,
    UNSAFE_FUNCTIONS,
    QueryAnalysis,
    SqlError,
    analyze_query,
    parse_ddl,
    to_ddl,
    unsafe_calls,
)
from distributary.table_joins import stream_table_join
from distributary.table_queries import TABLE, TableQueryError, input_read, table_query

_KIND_RANK = {"Log": 0, "Source": 1, "DerivedView": 2, "StreamJob": 3, "Sink": 4}
_FIELD_MESSAGE = re.compile(r"^([A-Za-z][\w.\[\]-]*): (.*)$", re.DOTALL)


@dataclass(frozen=True, order=True)
class Ref:
    """A resource's identity in a pipeline: its kind, namespace and name."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @classmethod
    def of(cls, resource: Resource | Ref) -> Ref:
        """The reference of a resource (a `Ref` is returned as it is)."""
        if isinstance(resource, Ref):
            return resource
        return cls(resource.kind, resource.metadata.namespace, resource.metadata.name)

    @classmethod
    def log(cls, name: str, namespace: str = "default") -> Ref:
        """The reference of the Log with this name."""
        return cls("Log", namespace, name)

    def _rank(self) -> tuple[str, int, str]:
        return self.namespace, _KIND_RANK.get(self.kind, 9), self.name


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a pipeline: where it is, what is wrong and what to do."""

    resource: str
    field: str
    message: str
    source: str | None = None

    def __str__(self) -> str:
        where = " ".join(part for part in (self.resource, self.field) if part)
        text = f"{where}: {self.message}" if where else self.message
        text = f"{self.source}: {text}" if self.source else text
        return " ".join(text.split())


@dataclass(frozen=True)
class Declared:
    """A resource read from a file, with the file it came from."""

    resource: Resource
    source: str | None = None


@dataclass(frozen=True)
class Loaded:
    """What `load` found: resources, problems, and documents of other APIs it skipped."""

    resources: tuple[Declared, ...]
    problems: tuple[SpecProblem, ...]
    skipped: int


def load(paths: Iterable[str | os.PathLike[str]]) -> Loaded:
    """Read resources from YAML files and folders (searched recursively for *.yaml and *.yml).

    Each document is placed and checked as the API server would (`api.admission`) before its model
    parses it; documents of other APIs are counted as skipped.
    """
    resources: list[Declared] = []
    problems: list[SpecProblem] = []
    skipped = 0
    for path in _files(paths, problems):
        for number, document in _documents(path, problems):
            placement = place(document)
            if not placement.ours:
                skipped += 1
                continue
            label = _label(document, number)
            if placement.problem is not None:
                problems.append(_spec_problem(label, placement.problem, str(path)))
                continue
            found = _admitted(document, label, str(path))
            if isinstance(found, list):
                problems.extend(found)
            else:
                resources.append(Declared(found, str(path)))
    return Loaded(tuple(resources), tuple(problems), skipped)


def _admitted(document: dict[str, Any], label: str, source: str) -> Resource | list[SpecProblem]:
    """The resource in a placed document, or every problem the schema and the model find in it
    (the schema's first: it is the API server's word; the model adds what it alone checks)."""
    found = [_spec_problem(label, text, source) for text in schema_problems(document)]
    try:
        resource = parse_resource(document)
    except ResourceError as exc:
        named = {p.field for p in found}
        for text in exc.problems:
            problem = _spec_problem(label, text, source)
            field, message = narrowed(str(document["kind"]), problem.field, problem.message)
            if field not in named:
                found.append(SpecProblem(label, field, message, source))
        return found
    return found or resource


def _label(document: dict[str, Any], number: int) -> str:
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    kind, name = document.get("kind"), metadata.get("name")
    shown_kind, shown_name = label_part(kind or "?"), label_part(name or "?")
    if not kind or not name:
        return f"document {number} ({shown_kind}/{shown_name})"
    return f"{shown_kind}/{label_part(metadata.get('namespace') or 'default')}/{shown_name}"


def _spec_problem(label: str, text: str, source: str) -> SpecProblem:
    match = _FIELD_MESSAGE.match(text)
    path, message = (match.group(1), match.group(2)) if match else ("", text)
    return SpecProblem(label, path, message, source)


def _files(paths: Iterable[str | os.PathLike[str]], problems: list[SpecProblem]) -> list[Path]:
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            files.extend(
                sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml"))
            )
        elif path.is_file():
            files.append(path)
        else:
            problems.append(
                SpecProblem("", "", "no such file or folder: check the path", str(path))
            )
    return files


def _documents(path: Path, problems: list[SpecProblem]) -> list[tuple[int, dict[str, Any]]]:
    documents: list[tuple[int, dict[str, Any]]] = []
    try:
        for number, document, duplicates in yaml_documents(path.read_text("utf-8")):
            label = _label(document, number) if isinstance(document, dict) else f"document {number}"
            problems.extend(SpecProblem(label, f, m, str(path)) for f, m in duplicates)
            if isinstance(document, dict):
                documents.append((number, document))
            elif document is not None:
                problems.append(
                    SpecProblem(
                        "",
                        "",
                        f"document {number} is not a mapping: write a "
                        "resource with apiVersion, kind, metadata and spec",
                        str(path),
                    )
                )
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        lead = "" if isinstance(exc, BeyondLimits) else "is not valid YAML: "
        problems.append(SpecProblem("", "", f"{lead}{what}{where}", str(path)))
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(SpecProblem("", "", f"cannot be read: {exc}", str(path)))
    return documents


def load_pipeline(
    paths: Iterable[str | os.PathLike[str]], *, allowed_functions: frozenset[str] = frozenset()
) -> Pipeline:
    """Load files and folders and build their pipeline; loading problems come first. Views
    may call the unsafe SQL functions in `allowed_functions` (see `Pipeline.build`)."""
    loaded = load(paths)
    pipeline = Pipeline.build(loaded.resources, allowed_functions=allowed_functions)
    declared = sorted(
        pipeline.problems + starting_offset_problems(pipeline), key=lambda p: p.resource
    )
    pipeline.problems = loaded.problems + tuple(declared)
    pipeline.skipped = loaded.skipped
    return pipeline


def starting_offset_problems(pipeline: Pipeline) -> tuple[SpecProblem, ...]:
    """Each view's or job's input whose startingPosition.offsets names a partition its Log
    does not declare (or, for a view's output, derive): Spark refuses it when the query starts.
    Checked on files, whose Logs are created with the partitions they declare (a Log's
    partitions can be raised, never lowered); in a cluster the operator checks the topic
    itself, which the API server's Log may not say all of (`plan.applications.position_refusals`).
    """
    problems: list[SpecProblem] = []
    for ref in pipeline.order:
        if ref in pipeline.views:
            inputs = [
                (i.alias, i.log, i.starting_position) for i in pipeline.views[ref].spec.inputs
            ]
        elif ref in pipeline.jobs:
            inputs = [(i.log, i.log, i.starting_position) for i in pipeline.jobs[ref].spec.inputs]
        else:
            continue
        for index, (alias, name, position) in enumerate(inputs):
            log = pipeline.logs.get(Ref.log(name, ref.namespace))
            if log is None or not position.offsets:
                continue
            count = log.spec.partitions
            beyond = sorted(int(p) for p in position.offsets if int(p) >= count)
            if not beyond:
                continue
            named = ", ".join(map(str, beyond[:5])) + (" ..." if len(beyond) > 5 else "")
            has = f"{count} partitions (0 to {count - 1})" if count > 1 else "1 partition (0)"
            message = (
                f"input {alias} names partition{'s' if len(beyond) > 1 else ''} {named}, but "
                f"Log {name!r} has {has}: name only its partitions, or raise its "
                f"spec.partitions to {beyond[-1] + 1}"
            )
            field = f"spec.inputs[{index}].startingPosition.offsets"
            problems.append(SpecProblem(str(ref), field, message, pipeline.source(ref)))
    return tuple(problems)


@dataclass
class Pipeline:
    """Logs, views and jobs, the edges between them, their order, and what is wrong.

    Logs include each view's derived output log and each Source's table Logs. Edges run from a
    log to each view or job that reads it, and from a Source, view or job to each log it writes.
    """

    logs: dict[Ref, Log] = field(default_factory=dict)
    views: dict[Ref, DerivedView] = field(default_factory=dict)
    jobs: dict[Ref, StreamJob] = field(default_factory=dict)
    captures: dict[Ref, Source] = field(default_factory=dict)  # Sources (change data capture)
    sinks: dict[Ref, Sink] = field(default_factory=dict)
    # The Sources as their files declare them, where `captures` holds them with their tables'
    # columns as the databases had them (`local.sources.resolve_sources`); else empty.
    declared_captures: dict[Ref, Source] = field(default_factory=dict)
    problems: tuple[SpecProblem, ...] = ()
    order: tuple[Ref, ...] = ()
    edges: tuple[tuple[Ref, Ref], ...] = ()
    skipped: int = 0
    allowed_functions: frozenset[str] = frozenset()
    _sources: dict[Ref, str | None] = field(default_factory=dict)
    _writers: dict[Ref, Ref] = field(default_factory=dict)
    _inputs: dict[Ref, dict[str, Log]] = field(default_factory=dict)
    _analyses: dict[Ref, QueryAnalysis] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        resources: Iterable[Resource | Declared],
        *,
        allowed_functions: frozenset[str] = frozenset(),
    ) -> Pipeline:
        """Resolve references within each namespace, derive view outputs, and check everything.
        A view's SQL may call those of `sql.UNSAFE_FUNCTIONS` that `allowed_functions` names
        (the operator's setting), and no other: by default, none."""
        return _Builder(resources, allowed_functions).pipeline

    def declared(self) -> list[Declared]:
        """The resources as they were read, with their files (the Logs views and Sources
        derive left out)."""
        found: list[Declared] = []
        resources: list[tuple[Ref, Resource]] = [
            *self.logs.items(),
            *self.captures.items(),
            *self.views.items(),
            *self.jobs.items(),
            *self.sinks.items(),
        ]
        for ref, resource in resources:
            if ref.kind == "Log" and self.writer(ref) in (*self.views, *self.captures):
                continue
            found.append(Declared(resource, self._sources.get(ref)))
        return found

    def rebuilt(self, replaced: Mapping[Ref, Resource]) -> Pipeline:
        """The pipeline again with some of its resources replaced (e.g. Sources whose tables'
        columns were read from their databases), checked anew, loading problems kept."""
        resources = [
            Declared(replaced.get(Ref.of(d.resource), d.resource), d.source)
            for d in self.declared()
        ]
        again = Pipeline.build(resources, allowed_functions=self.allowed_functions)
        loading = tuple(p for p in self.problems if not p.resource)
        again.problems = loading + again.problems
        again.skipped = self.skipped
        again.declared_captures = dict(self.declared_captures)
        return again

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    def resource(self, ref: Ref | Resource) -> Resource:
        """The resource (a derived log included) with this reference; KeyError when none."""
        ref = Ref.of(ref)
        found: Resource | None = self.logs.get(ref) or self.views.get(ref) or self.jobs.get(ref)
        found = found or self.captures.get(ref) or self.sinks.get(ref)
        if found is None:
            raise KeyError(str(ref))
        return found

    def source(self, ref: Ref | Resource) -> str | None:
        """The file a resource was read from (a derived log: its view's file)."""
        ref = Ref.of(ref)
        return self._sources.get(ref, self._sources.get(self._writers.get(ref, ref)))

    def writer(self, log: Ref | Resource) -> Ref | None:
        """The view or job that writes a log; None for a primary log that no job writes."""
        return self._writers.get(Ref.of(log))

    def is_derived(self, log: Ref | Resource) -> bool:
        """Whether the log is a view's output rather than a declared Log."""
        return self.writer(log) in self.views

    def is_captured(self, log: Ref | Resource) -> bool:
        """Whether the log is a Source's table Log."""
        return self.writer(log) in self.captures

    def table_logs(self, source: Ref | Resource) -> dict[str, Log]:
        """A Source's table Logs by table (schema.table), as derived from it."""
        ref = Ref.of(source)
        found = self.captures.get(ref)
        if found is None:
            return {}
        logs = {}
        for table in found.spec.tables:
            log = Ref.log(found.table_log(table), ref.namespace)
            if self._writers.get(log) == ref and log in self.logs:
                logs[table.name] = self.logs[log]
        return logs

    def readers(self, log: Ref | Resource) -> tuple[Ref, ...]:
        """The views and jobs that read a log, in order."""
        ref = Ref.of(log)
        return tuple(sorted((b for a, b in self.edges if a == ref), key=Ref._rank))

    def downstream(self, ref: Ref | Resource) -> frozenset[Ref]:
        """Every view, job and log reached from this one by following the edges."""
        start = Ref.of(ref)
        nexts: dict[Ref, list[Ref]] = defaultdict(list)
        for a, b in self.edges:
            nexts[a].append(b)
        seen: set[Ref] = set()
        stack = list(nexts[start])
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(nexts[node])
        return frozenset(seen - {start})

    def inputs(self, view: Ref | Resource) -> dict[str, Log]:
        """A view's input logs by alias (derived logs included); unresolved inputs are absent."""
        return dict(self._inputs.get(Ref.of(view), {}))

    def analysis(self, view: Ref | Resource) -> QueryAnalysis | None:
        """What a view's query reads and outputs; None when its SQL has a problem."""
        return self._analyses.get(Ref.of(view))

    def output(self, view: Ref | Resource) -> Log | None:
        """The Log a view writes, as derived from it; None when its output name is taken."""
        ref = Ref.of(view)
        if ref not in self.views:
            return None
        log = Ref.log(self.views[ref].output_log, ref.namespace)
        return self.logs.get(log) if self._writers.get(log) == ref else None


class _Builder:
    """Builds a `Pipeline` in passes; each pass records problems and goes on."""

    def __init__(
        self, resources: Iterable[Resource | Declared], allowed_functions: frozenset[str]
    ) -> None:
        self.pipeline = pipeline = Pipeline(allowed_functions=allowed_functions)
        self.allowed_functions = allowed_functions
        self.problems: list[SpecProblem] = []
        self.declared_logs: set[Ref] = set()
        self.edges: set[tuple[Ref, Ref]] = set()
        for item in resources:
            self._register(item if isinstance(item, Declared) else Declared(item))
        self._assign_writers()
        self._connect()
        order, cycles = _order(self._nodes(), self.edges)
        for cycle in cycles:
            self._report_cycle(cycle)
        for ref in pipeline.logs:
            self._check_log(ref)
        for ref in order:
            if ref in pipeline.views:
                self._check_view(ref)
        self._check_topics()
        for ref in sorted(pipeline.sinks):
            self._check_sink(ref)
        pipeline.order = tuple(order)
        pipeline.edges = tuple(sorted(self.edges, key=lambda e: (e[0]._rank(), e[1]._rank())))
        ranked = sorted(self.problems, key=lambda p: p.resource)
        pipeline.problems = tuple(ranked)

    def _problem(self, ref: Ref, path: str, message: str) -> None:
        self.problems.append(SpecProblem(str(ref), path, message, self.pipeline.source(ref)))

    def _register(self, item: Declared) -> None:
        ref, pipeline = Ref.of(item.resource), self.pipeline
        if ref in pipeline._sources:
            first = pipeline._sources[ref] or "an earlier document"
            self.problems.append(
                SpecProblem(
                    str(ref),
                    "metadata.name",
                    f"is declared twice (also in {first}): rename one or remove the copy",
                    item.source,
                )
            )
            return
        pipeline._sources[ref] = item.source
        resource = item.resource
        if isinstance(resource, Log):
            pipeline.logs[ref] = resource
            self.declared_logs.add(ref)
        elif isinstance(resource, DerivedView):
            pipeline.views[ref] = resource
        elif isinstance(resource, Source):
            pipeline.captures[ref] = resource
        elif isinstance(resource, Sink):
            pipeline.sinks[ref] = resource
        else:
            pipeline.jobs[ref] = resource

    def _assign_writers(self) -> None:
        writers = self.pipeline._writers
        for ref, source in sorted(self.pipeline.captures.items()):
            for index, table in enumerate(source.spec.tables):
                self._assign_table(ref, source, index, table)
        for ref, view in sorted(self.pipeline.views.items()):
            log = Ref.log(view.output_log, ref.namespace)
            if log in self.declared_logs:
                self._problem(
                    ref,
                    "spec.output.log",
                    f"names Log {log.name!r}, which is "
                    "declared as a Log too: a view creates its own output log; set "
                    "spec.output.log to another name or remove the Log",
                )
            elif log in writers:
                self._problem(
                    ref,
                    "spec.output.log",
                    f"writes Log {log.name!r}, which "
                    f"{writers[log]} writes too: a log has one writer; set "
                    "spec.output.log to another name",
                )
            else:
                writers[log] = ref
        for ref, job in sorted(self.pipeline.jobs.items()):
            for index, output in enumerate(job.spec.outputs):
                self._assign_job_output(ref, index, Ref.log(output.log, ref.namespace))

    def _assign_table(self, ref: Ref, source: Source, index: int, table: SourceTable) -> None:
        writers, log = self.pipeline._writers, Ref.log(source.table_log(table), ref.namespace)
        field = f"spec.tables[{index}].log"
        if log in self.declared_logs:
            self._problem(
                ref,
                field,
                f"names Log {log.name!r}, which is declared as a Log too: a Source creates its "
                f"tables' Logs; set {field} to another name or remove the Log",
            )
        elif log in writers:
            self._problem(
                ref,
                field,
                f"writes Log {log.name!r}, which {writers[log]} writes too: a log has one "
                f"writer; set {field} to another name",
            )
        else:
            writers[log] = ref
            self.pipeline.logs[log] = table_log(source, table)

    def _assign_job_output(self, ref: Ref, index: int, log: Ref) -> None:
        writers, path = self.pipeline._writers, f"spec.outputs[{index}].log"
        if log in writers:
            self._problem(
                ref,
                path,
                f"writes Log {log.name!r}, which {writers[log]} writes "
                "too: a log has one writer; write to a Log of the job's own",
            )
        elif log not in self.declared_logs:
            self._problem(
                ref,
                path,
                f"names no declared Log {log.name!r} in namespace "
                f"{log.namespace!r}{self._near(log)}: declare a Log for the job to "
                "write",
            )
        else:
            writers[log] = ref
        if log in self.declared_logs or log in writers:
            self.edges.add((ref, log))

    def _near(self, log: Ref) -> str:
        names = [r.name for r in self._log_names() if r.namespace == log.namespace]
        near = difflib.get_close_matches(log.name, names, n=1)
        return f" (did you mean {near[0]!r}?)" if near else ""

    def _log_names(self) -> set[Ref]:
        pipeline = self.pipeline
        return self.declared_logs | {
            log
            for log, w in pipeline._writers.items()
            if w in pipeline.views or w in pipeline.captures
        }

    def _connect(self) -> None:
        logs = self._log_names()
        for log, writer in self.pipeline._writers.items():
            self.edges.add((writer, log))
        readers: list[tuple[Ref, list[str]]] = [
            (ref, [i.log for i in view.spec.inputs]) for ref, view in self.pipeline.views.items()
        ] + [(ref, [i.log for i in job.spec.inputs]) for ref, job in self.pipeline.jobs.items()]
        readers += [(ref, [sink.spec.log]) for ref, sink in self.pipeline.sinks.items()]
        for ref, names in sorted(readers):
            for index, name in enumerate(names):
                log = Ref.log(name, ref.namespace)
                if log in logs:
                    self.edges.add((log, ref))
                    continue
                self._problem(
                    ref,
                    "spec.log" if ref.kind == "Sink" else f"spec.inputs[{index}].log",
                    f"names no Log {name!r} in "
                    f"namespace {ref.namespace!r}{self._near(log)}: declare a Log "
                    "of that name or fix the name",
                )

    def _nodes(self) -> list[Ref]:
        pipeline = self.pipeline
        return [
            *self._log_names(),
            *pipeline.captures,
            *pipeline.views,
            *pipeline.jobs,
            *pipeline.sinks,
        ]

    def _report_cycle(self, cycle: list[Ref]) -> None:
        """The cycle, on each view and job on it (starting the path from it): each of them is
        refused, or the operator would leave all but one waiting for an input that never comes."""
        for ref in sorted((r for r in cycle if r.kind != "Log"), key=Ref._rank):
            turned = cycle[cycle.index(ref) :] + cycle[: cycle.index(ref)]
            resource = self.pipeline.resource(ref)
            assert isinstance(resource, DerivedView | StreamJob)
            names = [item.log for item in resource.spec.inputs]
            index = names.index(turned[-1].name)
            path = " -> ".join(str(r) for r in [*turned, ref])
            self._problem(
                ref,
                f"spec.inputs[{index}].log",
                f"is on a cycle: {path}: a log cannot "
                "be computed from itself; remove one of these inputs",
            )

    def _check_log(self, ref: Ref) -> None:
        spec = self.pipeline.logs[ref].spec
        if spec.record_schema is None:
            return
        try:
            names = [c.name for c in parse_ddl(spec.record_schema)]
        except SqlError as exc:
            # A repeated name says its own fix; a schema that does not read gets an example.
            fix = "" if str(exc).startswith("names ") else ": write it as Spark DDL, e.g. "
            example = "'user STRING, ts TIMESTAMP'" if fix else ""
            self._problem(ref, "spec.schema", f"{exc}{fix}{example}")
            return
        lacking = "spec.schema does not have: add it to the schema or fix the key"
        for index, message in key_problems(spec.key or [], names, "spec.key", lacking):
            self._problem(ref, f"spec.key[{index}]", message)

    def _check_topics(self) -> None:
        """Two Logs whose topics Kafka would take for one: the same name, a view's revision
        topic (`<topic>.r<N>`), or names that differ only in '.' against '_' (Kafka refuses the
        second: they collide in its metrics). Checked across namespaces: a topic belongs to one
        Log in the whole Kafka cluster (`plan.kafka_topics.claims`), whatever the operator's topic
        naming (`api.names.TopicNames`) makes of each Log's name."""
        claimed: list[tuple[Ref, str, bool]] = []
        for ref, log in sorted(self.pipeline.logs.items()):
            derived = ref not in self.declared_logs
            mine = _topic_pattern(log.topic, derived)
            for other, topic, other_derived in claimed:
                theirs = _topic_pattern(topic, other_derived)
                if _same_topic(mine, topic, other_derived) or _same_topic(
                    theirs, log.topic, derived
                ):
                    self._topic_problem(ref, (other, topic), derived)
                    break
            claimed.append((ref, log.topic, derived))

    def _topic_problem(self, ref: Ref, seen: tuple[Ref, str], derived: bool) -> None:
        other, topic = seen
        writer = self.pipeline.writer(ref) if derived else None
        owner = writer if writer is not None else ref
        field = "spec.output.log" if writer is not None else "spec.topicName"
        self._problem(
            owner,
            field,
            f"gives a topic that Kafka would take for {other}'s {topic!r} (the same name, a "
            "view's <topic>.r<N>, or a name differing only in '.' against '_'): choose a "
            "topic name that differs in more than that",
        )

    def _check_view(self, ref: Ref) -> None:
        pipeline, view = self.pipeline, self.pipeline.views[ref]
        inputs = {
            i.alias: pipeline.logs[log]
            for i in view.spec.inputs
            if (log := Ref.log(i.log, ref.namespace)) in pipeline.logs
        }
        pipeline._inputs[ref] = inputs
        analysis = self._analyze(ref, view, inputs)
        for name in unsafe_calls(view.spec.sql, self.allowed_functions):
            self._problem(
                ref,
                "spec.sql",
                f"calls {name}, which {UNSAFE_FUNCTIONS[name]} inside Spark with the driver's "
                "and executors' rights: remove the call; where every view's author is trusted, "
                f"start the operator with {ALLOW_FUNCTIONS_FLAG} {name} "
                f"({ALLOW_FUNCTIONS_ENV}={name})",
            )
        tables = self._table_inputs(ref, view, inputs)
        if tables:
            self._check_table_query(ref, view, inputs, analysis, tables)
        elif analysis is not None:
            aliases = [i.alias for i in view.spec.inputs]
            for message in query_problems(view.spec.sql, aliases, view.spec.output.mode):
                self._problem(ref, "spec.sql", message)
        for path, message in event_time_problems(view, inputs, analysis is not None):
            self._problem(ref, path, message)
        output = view.spec.output
        if output.mode == "upsert" and not output.key:
            self._problem(
                ref,
                "spec.output.key",
                "is required when spec.output.mode is upsert: name the columns that identify a row",
            )
        known = analysis is not None and analysis.complete
        outputs = list(analysis.names) if analysis is not None and known else None
        lacking = (
            f"the query does not output (it outputs {', '.join(outputs or [])}): add it to the "
            "SELECT list or fix the key"
        )
        for index, message in key_problems(output.key or [], outputs, "spec.output.key", lacking):
            self._problem(ref, f"spec.output.key[{index}]", message)
        log = Ref.log(view.output_log, ref.namespace)
        if pipeline._writers.get(log) == ref:
            pipeline.logs[log] = _derive(view, list(inputs.values()), analysis)

    def _table_inputs(self, ref: Ref, view: DerivedView, inputs: Mapping[str, Log]) -> list[str]:
        """The aliases the view reads as tables (`table_queries.input_read`); a table read of a
        Log that is not one, or a watermark on a table, is a problem."""
        tables = []
        for index, item in enumerate(view.spec.inputs):
            log = inputs.get(item.alias)
            if log is None:
                continue
            read = input_read(item.read, log.spec.compaction)
            if read == TABLE and not log.spec.compaction:
                self._problem(
                    ref,
                    f"spec.inputs[{index}].read",
                    f"is table, but Log {log.metadata.name!r} is not compacted, so its records "
                    "are events, not rows: set compaction: true (and a key) on the Log, or remove "
                    "read",
                )
                continue
            if read != TABLE:
                continue
            tables.append(item.alias)
            if item.starting_position.from_ != "Earliest":
                self._problem(
                    ref,
                    f"spec.inputs[{index}].startingPosition.from",
                    f"is {item.starting_position.from_}, but {item.alias!r} is read as a table "
                    f"(Log {log.metadata.name!r} is compacted): its rows are the records from the "
                    "start of the topic, and a table read from elsewhere lacks the rows written "
                    "before; remove startingPosition, or read the input as a stream "
                    "(read: changes)",
                )
            if item.watermark is not None:
                self._problem(
                    ref,
                    f"spec.inputs[{index}].watermark",
                    f"is set, but {item.alias!r} is read as a table (Log {log.metadata.name!r} "
                    "is compacted), whose rows are replaced rather than left behind by time: "
                    "remove the watermark, or read the input as a stream (read: changes)",
                )
        return tables

    def _check_table_query(
        self,
        ref: Ref,
        view: DerivedView,
        inputs: Mapping[str, Log],
        analysis: QueryAnalysis | None,
        tables: list[str],
    ) -> None:
        """A query over a table is kept exact (`table_queries`, `table_joins`) or refused."""
        index = {item.alias: i for i, item in enumerate(view.spec.inputs)}
        table = tables[0]
        log = inputs[table]
        as_changes = f"spec.inputs[{index[table]}].read: changes"
        output = view.spec.output
        read = analysis.tables if analysis is not None else ()
        others = [alias for alias in read if alias.lower() != table.lower()]
        # A Source's table without a declared key is keyed by its primary key, read from the
        # database before the view runs: not known here.
        pending = not log.spec.key and self.pipeline.is_captured(log)
        key = None if pending else (log.spec.key or ())
        if len(others) > 1:
            self._problem(
                ref,
                "spec.sql",
                f"reads table {table!r} together with {', '.join(map(repr, others))}: a table "
                "is kept exact alone, joined with one stream, or joined with one other table: "
                "split the query into views of two inputs each, or read the table as a stream "
                f"of changes ({as_changes})",
            )
            return
        if others and others[0] in tables:
            self._check_joined_tables(ref, view, inputs, (table, others[0]))
            return
        if others:
            self._check_stream_table_join(ref, view, inputs, others[0], table, key, as_changes)
            return
        if output.mode != "upsert":
            self._problem(
                ref,
                "spec.output.mode",
                f"is append, but the query reads {table!r} as a table (Log "
                f"{log.metadata.name!r} is compacted): a query over a table is a table, kept "
                "exact as rows change; set mode: upsert with the output's key columns, or read "
                f"the input as a stream of changes ({as_changes})",
            )
            return
        if analysis is None:
            return
        columns = log_columns(log)
        try:
            table_query(
                view.spec.sql,
                table,
                key,
                output.key or [],
                [c.name for c in columns] if columns else None,
            )
        except TableQueryError as exc:
            self._problem(ref, "spec.sql", str(exc))

    def _check_joined_tables(
        self, ref: Ref, view: DerivedView, inputs: Mapping[str, Log], tables: tuple[str, str]
    ) -> None:
        """Two tables joined: the join is a table, kept exact (`joined_tables`)."""
        if view.spec.output.mode != "upsert":
            self._problem(
                ref,
                "spec.output.mode",
                f"is append, but the query joins tables {tables[0]!r} and {tables[1]!r}: a join "
                "of tables is a table, kept exact as rows change; set mode: upsert with the "
                "output's key columns, or read one of them as a stream of changes "
                "(read: changes)",
            )
            return
        columns, keys = {}, {}
        for alias in tables:
            log = inputs[alias]
            found = log_columns(log)
            if not found and self.pipeline.is_captured(log):
                return  # a Source's table: its columns are known once its database is read
            columns[alias] = [c.name for c in found] if found else None
            pending = not log.spec.key and self.pipeline.is_captured(log)
            keys[alias] = None if pending else (log.spec.key or ())
        try:
            joined_tables(view.spec.sql, tables, columns, keys, view.spec.output.key or [])
        except TableQueryError as exc:
            self._problem(ref, "spec.sql", str(exc))

    def _check_stream_table_join(
        self,
        ref: Ref,
        view: DerivedView,
        inputs: Mapping[str, Log],
        stream: str,
        table: str,
        key: Sequence[str] | None,
        as_changes: str,
    ) -> None:
        """A stream joined with a table: each event written once (`table_joins`)."""
        if view.spec.output.mode != "append":
            self._problem(
                ref,
                "spec.output.mode",
                f"is upsert, but the query joins stream {stream!r} with table {table!r}, which "
                "writes each event once, enriched with its row: set mode: append, or read the "
                f"table as a stream of changes ({as_changes})",
            )
            return
        columns = {
            alias: [c.name for c in found] if (found := log_columns(inputs.get(alias))) else None
            for alias in (stream, table)
        }
        try:
            stream_table_join(view.spec.sql, stream, table, columns, key)
        except TableQueryError as exc:
            self._problem(ref, "spec.sql", str(exc))

    def _check_sink(self, ref: Ref) -> None:
        """A Sink's table is keyed as its Log is (upsert), and made from the Log's columns."""
        sink = self.pipeline.sinks[ref]
        log = self.pipeline.logs.get(Ref.log(sink.spec.log, ref.namespace))
        if log is None:
            return
        target = sink.spec.postgres
        writer = self.pipeline.writer(log)
        captured = writer in self.pipeline.captures
        if sink.spec.redis is not None and not log.spec.key and not captured:
            self._problem(
                ref,
                "spec.log",
                f"names Log {log.metadata.name!r}, which has no key: a Redis key per record key "
                "needs one; key the Log (a view: output.mode upsert with a key)",
            )
        if target is None:
            return
        if target.mode == "upsert" and not log.spec.key and not captured:
            self._problem(
                ref,
                "spec.postgres.mode",
                f"is upsert, but Log {log.metadata.name!r} has no key: a table of the latest "
                "record per key needs one; key the Log (a view: output.mode upsert with a key), "
                "or set mode: append",
            )
        elif (
            target.key is not None
            and log.spec.key
            and [k.lower() for k in target.key] != [k.lower() for k in log.spec.key]
        ):
            self._problem(
                ref,
                "spec.postgres.key",
                f"is {list(target.key)}, but Log {log.metadata.name!r} is keyed by "
                f"{list(log.spec.key)}: a row's key is its records' key; remove "
                "spec.postgres.key or make it the Log's key",
            )

    def _analyze(
        self, ref: Ref, view: DerivedView, inputs: Mapping[str, Log]
    ) -> QueryAnalysis | None:
        tables = {i.alias: log_columns(inputs.get(i.alias)) for i in view.spec.inputs}
        try:
            analysis = analyze_query(view.spec.sql, tables)
        except SqlError as exc:
            log = inputs.get(exc.table) if exc.table else None
            declared = f" (as declared in {Ref.of(log)} spec.schema)" if log else ""
            self._problem(ref, "spec.sql", f"{exc}{declared}")
            return None
        self.pipeline._analyses[ref] = analysis
        return analysis


def _topic_pattern(topic: str, derived: bool) -> re.Pattern[str]:
    """The topics a Log takes, with '.' and '_' alike: its own, or a view's revision topics."""
    base = re.escape(topic.replace(".", "_"))
    return re.compile(f"{base}(_r[0-9]+)?" if derived else base)


def _same_topic(pattern: re.Pattern[str], topic: str, derived: bool) -> bool:
    normal = topic.replace(".", "_")
    return pattern.fullmatch(normal) is not None or (
        derived and pattern.fullmatch(f"{normal}_r1") is not None
    )


def key_problems(
    keys: Sequence[str], columns: Sequence[str] | None, field: str, lacking: str
) -> list[tuple[int, str]]:
    """What is wrong with each key column, by its index in `keys`. Names are compared as Spark
    compares them, without regard to case. A key names top-level columns of `columns`, each
    once; `columns` is None when they are not known, and then only repeats are found. `field`
    is where the key is (`spec.key`); `lacking` ends the message of a column that is missing
    ("names column 'x', which " + lacking)."""
    problems: list[tuple[int, str]] = []
    tops = {c.lower(): c for c in columns or []}
    first: dict[str, int] = {}
    for index, key in enumerate(keys):
        head = key.split(".", 1)[0].lower()
        if key.lower() in first:
            message = (
                f"names column {key!r} again ({field}[{first[key.lower()]}] names it): a key "
                "names each column once; remove one"
            )
        elif columns is None or key.lower() in tops:
            message = ""
        elif "." in key and head in tops:
            message = (
                f"names {key!r}, a field inside column {tops[head]!r}: a key names top-level "
                f"columns only; key on {tops[head]!r}, or make the field a column of its own"
            )
        else:
            message = f"names column {key!r}, which {lacking}"
        first.setdefault(key.lower(), index)
        if message:
            problems.append((index, message))
    return problems


DELETED_COLUMN = "__deleted"  # an upsert view's marker column: true writes a tombstone


def table_log(source: Source, table: SourceTable) -> Log:
    """The Log a Source's table becomes: compacted, keyed by the primary key, its columns the
    table's (unknown until read from the database when the spec does not give them), with the
    `__deleted` marker that a delete's record carries before its tombstone."""
    columns = table.record_schema
    spec: dict[str, Any] = {
        "topicName": topic_names().topic(source.metadata.namespace, source.table_log(table)),
        "partitions": table.partitions,
        "retention": table.retention,
        "compaction": True,
        "schema": with_deleted_marker(columns) if columns else None,
        "key": list(table.key) if table.key else None,
        "deletionPolicy": table.deletion_policy,
    }
    return Log.model_validate(
        {
            "metadata": {"name": source.table_log(table), "namespace": source.metadata.namespace},
            "spec": {k: v for k, v in spec.items() if v is not None},
        }
    )


def with_deleted_marker(columns: str) -> str:
    """A table's columns and the `__deleted` marker of a captured delete (true on the record
    before the tombstone, false otherwise), unless the table has a column of that name."""
    try:
        names = {c.name.lower() for c in parse_ddl(columns)}
    except SqlError:
        return columns  # reported by the Log's own check
    return columns if DELETED_COLUMN in names else f"{columns}, {DELETED_COLUMN} BOOLEAN"


def _derive(view: DerivedView, inputs: list[Log], analysis: QueryAnalysis | None) -> Log:
    """The Log a view writes: what readers of its output see."""
    output = view.spec.output
    upsert = output.mode == "upsert"
    # A column whose type is not known for certain is read downstream as STRING: Spark's from_json
    # gives any JSON value's text for it, so nothing is lost or sent to the dead-letter topic.
    columns = analysis.record_schema(unknown_as="STRING") if analysis is not None else None
    if columns is not None and upsert:
        # An upsert view's deletion marker becomes a tombstone; it is not a column of the rows.
        columns = [c for c in columns if c.name.lower() != DELETED_COLUMN] or None
    keyed = (
        upsert
        and bool(output.key)
        and all(analysis is not None and analysis.outputs(k) for k in output.key or [])
    )
    partitions = output.partitions or max((log.spec.partitions for log in inputs), default=None)
    spec: dict[str, Any] = {
        # Named as the operator names Logs' topics (`api.names.TopicNames`): the revisions'
        # topics are `<this>.r<N>`, per namespace when the naming says so.
        "topicName": topic_names().topic(view.metadata.namespace, view.output_log),
        "replicas": output.replicas,
        "retention": output.retention,
        "compaction": upsert,
        "schema": to_ddl(columns) if columns else None,
        "key": list(output.key or []) if keyed else None,
        "deletionPolicy": output.deletion_policy,
    }
    if partitions is not None:
        spec["partitions"] = partitions
    return Log.model_validate(
        {
            "metadata": {"name": view.output_log, "namespace": view.metadata.namespace},
            "spec": {k: v for k, v in spec.items() if v is not None},
        }
    )


def _order(
    nodes: Iterable[Ref], edges: Iterable[tuple[Ref, Ref]]
) -> tuple[list[Ref], list[list[Ref]]]:
    """Nodes in topological order (ties broken by namespace, kind, name), and the cycles.

    Nodes on or after a cycle come last, in name order.
    """
    nexts: dict[Ref, set[Ref]] = defaultdict(set)
    waiting: dict[Ref, int] = dict.fromkeys(nodes, 0)
    for a, b in edges:
        if b not in nexts[a]:
            nexts[a].add(b)
            waiting[b] = waiting.get(b, 0) + 1
            waiting.setdefault(a, 0)
    ready = [(ref._rank(), ref) for ref, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[Ref] = []
    while ready:
        _, ref = heapq.heappop(ready)
        order.append(ref)
        for after in nexts[ref]:
            waiting[after] -= 1
            if waiting[after] == 0:
                heapq.heappush(ready, (after._rank(), after))
    placed = set(order)
    stuck = sorted((ref for ref in waiting if ref not in placed), key=Ref._rank)
    return order + stuck, _cycles(stuck, nexts)


def _cycles(stuck: list[Ref], nexts: Mapping[Ref, set[Ref]]) -> list[list[Ref]]:
    """One path around each cycle among the stuck nodes, each found once."""
    cycles: list[list[Ref]] = []
    covered: set[Ref] = set()
    for start in stuck:
        if start in covered:
            continue
        path = _path_back(start, nexts)
        if path is not None:
            cycles.append(path)
            covered.update(path)
    return cycles


def _path_back(start: Ref, nexts: Mapping[Ref, set[Ref]]) -> list[Ref] | None:
    """The shortest path from `start` back to itself, if there is one."""
    previous: dict[Ref, Ref] = {}
    frontier = [start]
    while frontier:
        following: list[Ref] = []
        for node in frontier:
            for after in sorted(nexts.get(node, ()), key=Ref._rank):
                if after == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return path[::-1]
                if after not in previous:
                    previous[after] = node
                    following.append(after)
        frontier = following
    return None
