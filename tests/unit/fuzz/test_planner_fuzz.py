"""The operator's pure planners over 1,000 mutated examples: every document either parses or is a
`ResourceError`, and what parses is planned as the operator plans it (a Log's topic and status, a
view's and a job's lineage, graph and plan, `distributary plan`'s whole pipeline) without any
exception but Distributary's own, and with every problem one line.

A mutated document is planned beside the others as the API server would hold them: in a
namespace, with a uid, and with each view's output Log as its child (labelled, serving revision
1). A view is planned new and as an edit of the example's own view running as revision 1, so the
change classifier sees every mutation too. A failure names the seed and the mutation, so it can be
replayed on its own (`mutations.py`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from tests.unit.fuzz.mutations import examples, mutations
from tests.unit.fuzz.test_validate_fuzz import raised

from distributary.api import DerivedView, Log, ResourceError, StreamJob, parse_body, parse_resource
from distributary.errors import DistributaryError
from distributary.graph import Pipeline
from distributary.plan.jobs.job_plan import plan_job
from distributary.plan.kafka_topics.topics import (
    ObservedTopic,
    desired_topic,
    kafka_topic_manifest,
    plan_topic,
)
from distributary.plan.logs.log_status import LogReconcile, log_status, record_problems
from distributary.plan.pipelines.pipeline import PlanSettings, job_revision_hash, plan_pipeline
from distributary.plan.views.view_plan import (
    VIEW_LABEL,
    namespace_pipeline,
    plan_view,
    planning_bodies,
    reprocessing_outputs,
)

NS = "shop"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
PLACES = {"checkpoint_root": "s3a://bucket/ck", "bootstrap_servers": "kafka:9092"}


def test_the_examples_before_mutation_plan_without_problems() -> None:
    for files in examples().values():
        documents = [d for docs in files.values() for d in docs]
        assert _planned(documents, _running(documents)) == [], documents


def test_the_planners_take_every_mutation_without_an_unexpected_exception() -> None:
    running = {
        name: _running([d for docs in files.values() for d in docs])
        for name, files in examples().items()
    }
    failures: list[str] = []
    for mutation in mutations():
        try:
            wrong = _planned(list(mutation.documents), running[mutation.example])
        except Exception as exc:
            wrong = [raised(exc)]
        failures.extend(f"{mutation.replay()}: {w}" for w in wrong)
    assert not failures, f"{len(failures)} failure(s):\n" + "\n".join(failures[:10])


def _stored(document: Any) -> dict[str, Any] | None:
    """The document as the API server hands it over (namespace and uid set), or None when it
    has no metadata mapping (the API server would not store it)."""
    if not isinstance(document, dict) or not isinstance(document.get("metadata"), dict):
        return None
    body = copy.deepcopy(document)
    meta = body["metadata"]
    meta.setdefault("namespace", NS)
    meta.setdefault("uid", f"uid-{str(meta.get('name'))[:40]}")
    meta.setdefault("generation", 2)
    return body


def _running(documents: list[Any]) -> dict[str, Any]:
    """Each view and job of the unmutated example, running as revision 1: its spec and status."""
    bodies = [b for b in map(_stored, documents) if b is not None]
    logs = [b for b in bodies if b["kind"] == "Log"] + _children(bodies)
    writers = [b for b in bodies if b["kind"] in ("DerivedView", "StreamJob")]
    pipeline, children, _ = namespace_pipeline(logs, writers)
    found: dict[str, Any] = {}
    for body in writers:
        resource = parse_resource(body)
        if isinstance(resource, DerivedView):
            plan = plan_view(pipeline, children, resource, None, **PLACES)
            row = {"revision": 1, "specHash": plan.spec_hash, "phase": "Serving"}
            status = {"servingRevision": 1, "revisions": [row], "observedGeneration": 1}
        else:
            assert isinstance(resource, StreamJob)
            status = {"revision": 1, "specHash": job_revision_hash(resource.spec)}
        found[resource.metadata.name] = (resource, status)
    return found


def _children(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each view's output Log as the API server holds it once revision 1 serves."""
    found = []
    for body in bodies:
        if body.get("kind") != "DerivedView":
            continue
        spec = body.get("spec") if isinstance(body.get("spec"), Mapping) else {}
        output = spec.get("output") if isinstance(spec.get("output"), Mapping) else {}
        name = str(output.get("log") or body["metadata"].get("name"))
        found.append(
            {
                "apiVersion": "distributary.dev/v1alpha1",
                "kind": "Log",
                "metadata": {"name": name, "namespace": NS, "labels": {VIEW_LABEL: "v"}},
                "spec": {"partitions": 3},
                "status": {"topicName": f"{name}.r1", "partitions": 3},
            }
        )
    return found


def _planned(documents: list[Any], running: Mapping[str, Any]) -> list[str]:
    """Plan the documents as the operator would; what went wrong, one line each."""
    wrong: list[str] = []
    bodies = [b for b in map(_stored, documents) if b is not None]
    parsed: list[tuple[dict[str, Any], Any]] = []
    for body in bodies:
        resource = _checked(
            wrong, "parse_resource", lambda b=body: parse_resource(b), allowed=ResourceError
        )
        if isinstance(resource, Log | DerivedView | StreamJob):
            parsed.append((body, resource))
    logs = [b for b, r in parsed if isinstance(r, Log)]
    writers = [b for b, r in parsed if not isinstance(r, Log)]
    for _, resource in parsed:
        if isinstance(resource, Log):
            _checked(wrong, "the Log's topic", lambda r=resource: _plan_log(r))
    index = logs + _children(writers)
    for body, resource in parsed:
        if not isinstance(resource, Log):
            step = f"planning {resource.kind} {resource.metadata.name[:40]!r}"
            _checked(wrong, step, lambda b=body: _plan_writer(b, index, writers, running))
    pipeline = _checked(wrong, "Pipeline.build", lambda: Pipeline.build(r for _, r in parsed))
    if isinstance(pipeline, Pipeline) and pipeline.ok:
        for backend in ("strimzi", "direct"):
            settings = PlanSettings(backend=backend)  # type: ignore[arg-type]
            _checked(wrong, "plan_pipeline", lambda s=settings: plan_pipeline(pipeline, s))
    return wrong


def _checked(
    wrong: list[str],
    step: str,
    call: Callable[[], Any],
    allowed: type[DistributaryError] = DistributaryError,
) -> Any:
    """`call()`, noting in `wrong` an exception that is not `allowed` (one of Distributary's
    own; parsing: a ResourceError) and a message that is blank or spans lines."""
    try:
        result = call()
    except allowed as exc:
        if "\n" in str(exc) or not str(exc).strip():
            wrong.append(f"{step}: {type(exc).__name__} not in one line: {str(exc)[:300]!r}")
        return exc
    except Exception as exc:
        wrong.append(f"{step}: {raised(exc)}")
        return exc
    for message in _messages(result):
        if "\n" in message or not message.strip():
            wrong.append(f"{step}: a message not in one line: {message[:300]!r}")
    return result


def _messages(result: Any) -> list[str]:
    """The messages a plan holds: its problems' and its waiting work's."""
    if isinstance(result, list):
        return [m for item in result for m in _messages(item)]
    found = [p.message for p in getattr(result, "problems", ()) if hasattr(p, "message")]
    found += [w.message for w in getattr(result, "waiting", ())]
    return found + ([result] if isinstance(result, str) else [])


def _plan_log(log: Log) -> list[str]:
    """A declared Log as the Log controller takes it: its record checks, its topic planned new
    and against a topic that differs, its status and its Strimzi manifest."""
    problems = record_problems(log)
    desired = desired_topic(log)
    observed = ObservedTopic(desired.name, 3, 1, {"retention.ms": "1"})
    for plan in (
        plan_topic(desired, None),
        plan_topic(desired, observed, managed_configs=frozenset({"retention.ms"})),
    ):
        result = LogReconcile(2, desired.name, plan=plan, partitions=3, invalid=problems)
        log_status(result, None, NOW)
        for refusal in plan.refusals:
            if "\n" in refusal.message:
                return [refusal.message]
    kafka_topic_manifest(log, cluster="kafka", namespace=NS, topic=desired.name)
    return [problems] if problems else []


def _plan_writer(
    body: dict[str, Any],
    index: list[dict[str, Any]],
    writers: list[dict[str, Any]],
    running: Mapping[str, Any],
) -> list[Any]:
    """A view or job as its controller takes it: parsed from its body, its lineage and graph,
    planned new, and planned as an edit of the example's resource of the same name."""
    logs, lineage = planning_bodies(index, writers, body)
    pipeline, children, invalid = namespace_pipeline(logs, lineage)
    reprocessing_outputs(lineage)
    plans: list[Any] = list(invalid.values())
    name = body["metadata"]["name"]
    old, status = running.get(name, (None, None))
    if body["kind"] == "DerivedView":
        view = parse_body(body, DerivedView)
        if isinstance(view, str):
            return [view]
        edited = old if isinstance(old, DerivedView) else None
        plans.append(plan_view(pipeline, children, view, None, **PLACES))
        plans.append(
            plan_view(pipeline, children, view, status, generation=2, edited_from=edited, **PLACES)
        )
    else:
        job = parse_body(body, StreamJob)
        if isinstance(job, str):
            return [job]
        previous = status if isinstance(old, StreamJob) else None
        former = old if isinstance(old, StreamJob) else None
        plans.append(plan_job(pipeline, children, job, None, **PLACES))
        plans.append(plan_job(pipeline, children, job, previous, old=former, **PLACES))
    return [m for plan in plans for m in _messages(plan)]
