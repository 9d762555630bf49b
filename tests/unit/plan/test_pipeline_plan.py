"""The plan of a whole pipeline: revision topics, readers following them, jobs, backends."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api import parse_resource
from distributary.graph import Pipeline, Ref
from distributary.plan.pipelines.pipeline import PlanSettings, job_revision_hash, plan_pipeline

GV = "distributary.dev/v1alpha1"


def doc(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": GV, "kind": kind, "metadata": {"name": name}, "spec": spec}


CLICKS = doc("Log", "clicks", {"partitions": 4, "schema": "user_id STRING, url STRING"})
URLS = doc(
    "DerivedView",
    "urls",
    {
        "inputs": [{"log": "clicks", "alias": "c"}],
        "sql": "SELECT user_id, url FROM c WHERE url IS NOT NULL",
    },
)
COUNTS = doc(
    "DerivedView",
    "counts",
    {
        "inputs": [{"log": "urls", "alias": "u"}],
        "sql": "SELECT user_id, count(*) AS n FROM u GROUP BY user_id",
        "output": {"mode": "upsert", "key": ["user_id"], "partitions": 2},
    },
)
SINK = doc("Log", "alerts", {"partitions": 1})
JOB = doc(
    "StreamJob",
    "alerter",
    {
        "image": "shop/alerter:1",
        "mainApplicationFile": "local:///app/job.py",
        "inputs": [{"log": "counts"}],
        "outputs": [{"log": "alerts"}],
    },
)


def pipeline(*documents: dict[str, Any]) -> Pipeline:
    built = Pipeline.build(parse_resource(d) for d in documents)
    assert built.ok, [str(p) for p in built.problems]
    return built


def test_each_view_writes_revision_one_of_its_own_topic() -> None:
    plan = plan_pipeline(pipeline(CLICKS, URLS, COUNTS))
    names = [t.topic.name for t in plan.topics]
    assert names == ["clicks", "urls.r1", "counts.r1"]
    counts = next(t for t in plan.topics if t.topic.name == "counts.r1")
    assert counts.derived_from == Ref("DerivedView", "default", "counts")
    assert counts.revision == 1
    assert counts.topic.partitions == 2
    assert counts.topic.configs["cleanup.policy"] == "compact"


def test_a_view_reading_a_view_reads_its_serving_revision_topic() -> None:
    plan = plan_pipeline(pipeline(CLICKS, URLS, COUNTS))
    counts = next(v for v in plan.views if v.view.name == "counts")
    assert [i.topic for i in counts.runner.inputs] == ["urls.r1"]
    assert counts.runner.output is not None
    assert counts.runner.output.topic == "counts.r1"
    assert counts.application["metadata"]["name"] == "counts-r1"


def test_each_derived_log_becomes_a_child_log_manifest() -> None:
    plan = plan_pipeline(pipeline(CLICKS, URLS, COUNTS))
    children = {m["metadata"]["name"]: m for m in plan.child_logs}
    assert set(children) == {"urls", "counts"}
    assert children["counts"]["spec"]["compaction"] is True
    assert children["counts"]["metadata"]["labels"]["distributary.dev/view"] == "counts"


def test_a_stream_job_gets_an_application_with_its_topics() -> None:
    plan = plan_pipeline(pipeline(CLICKS, URLS, COUNTS, SINK, JOB))
    (job,) = plan.jobs
    assert job.spec_hash == job_revision_hash(parse_resource(JOB).spec)  # type: ignore[union-attr]
    env = job.application["spec"]["driver"]["envVars"]
    assert env["DISTRIBUTARY_OUTPUT_ALERTS_TOPIC"] == "alerts"
    assert env["DISTRIBUTARY_CONSUMER_GROUP"] == "distributary.default.alerter.r1"


@pytest.mark.parametrize(("backend", "expected"), [("strimzi", 3), ("direct", 0)])
def test_kafka_topics_are_emitted_only_for_the_strimzi_backend(backend: str, expected: int) -> None:
    settings = PlanSettings(backend="strimzi" if backend == "strimzi" else "direct")
    plan = plan_pipeline(pipeline(CLICKS, URLS, COUNTS), settings)
    assert len(plan.kafka_topics) == expected
    assert len([m for m in plan.manifests() if m["kind"] == "KafkaTopic"]) == expected


def test_a_job_hash_changes_with_its_code_but_not_with_its_resources() -> None:
    job = parse_resource(JOB)
    changed = parse_resource({**JOB, "spec": {**JOB["spec"], "arguments": ["--fast"]}})
    resized = parse_resource({**JOB, "spec": {**JOB["spec"], "spark": {"trigger": "1s"}}})
    base = job_revision_hash(job.spec)  # type: ignore[union-attr]
    assert job_revision_hash(changed.spec) != base  # type: ignore[union-attr]
    assert job_revision_hash(resized.spec) == base  # type: ignore[union-attr]
