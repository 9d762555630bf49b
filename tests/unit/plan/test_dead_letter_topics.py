"""A view's dead-letter topic: never compacted, whatever the output's mode, under either topic
backend, and kept as long as `spec.deadLetters.retention` says (7 days unless set); a new
retention changes the topic and nothing else.

A dead letter may have no key, and a compacted topic refuses a record without one: a dead-letter
topic that took an upsert view's compacted config made its runner fail on its first bad record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.unit.plan.test_view_plan import log, planned, view

from distributary.api.log import Log
from distributary.api.view import DerivedView
from distributary.backends.strimzi import StrimziTopics
from distributary.kube.resources import Kube
from distributary.plan.kafka_topics.topics import (
    AlterConfigs,
    CreateTopic,
    DesiredTopic,
    ObservedTopic,
    kafka_topic_manifest,
    plan_topic,
)
from distributary.plan.revisions.classify import Classification, classify_view_change
from distributary.plan.views.view_plan import ViewPlan

DLQ = "distributary.shop.counts.dlq"
WEEK_MS = str(7 * 24 * 3600 * 1000)
UPSERT = {"mode": "upsert", "key": ["user"]}
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
- name: test
  user: {token: not-a-secret}
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
"""


def counts(output: dict[str, Any], **spec: Any) -> ViewPlan:
    grouped = output["mode"] == "upsert"  # an append view's aggregate needs a watermark
    sql = "SELECT user, count(*) AS n FROM src GROUP BY user" if grouped else "SELECT * FROM src"
    body = view("counts", "clicks", sql)
    body["spec"]["output"] = output
    body["spec"].update(spec)
    result: ViewPlan = planned([log("clicks")], [body], "counts")
    return result


def topics(plan: ViewPlan) -> dict[str, DesiredTopic]:
    return {topic.name: topic for topic in plan.topics}


def output_log(plan: ViewPlan) -> Log:
    assert plan.output_log is not None
    return Log.model_validate(plan.output_log)


@pytest.mark.parametrize(
    "output", [UPSERT, {"mode": "append"}, {**UPSERT, "retention": {"time": "30d"}}]
)
def test_the_dead_letter_topic_is_never_compacted_and_kept_a_week_by_default(
    output: dict[str, Any],
) -> None:
    plan = counts(output)
    letters = topics(plan)[DLQ]
    assert dict(letters.configs) == {"cleanup.policy": "delete", "retention.ms": WEEK_MS}
    assert (letters.partitions, letters.replicas) == (2, None)  # as many as the output has


def test_the_upsert_output_topic_stays_compacted_beside_it() -> None:
    plan = counts({**UPSERT, "partitions": 4, "replicas": 3})
    assert topics(plan)["counts.r1"].configs == {"cleanup.policy": "compact"}
    assert (topics(plan)[DLQ].partitions, topics(plan)[DLQ].replicas) == (4, 3)


def test_the_dead_letter_retention_is_the_views_to_set() -> None:
    plan = counts(UPSERT, deadLetters={"retention": "36h"})
    assert topics(plan)[DLQ].configs == {
        "cleanup.policy": "delete",
        "retention.ms": str(36 * 3600 * 1000),
    }


def strimzi(tmp_path: Path) -> StrimziTopics:
    """The strimzi backend's renderer; nothing is asked of the (absent) API server."""
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    return StrimziTopics(Kube(tmp_path / "kubeconfig"), "events", "kafka")


@pytest.mark.parametrize("output", [UPSERT, {"mode": "append"}])
def test_the_strimzi_kafka_topic_of_the_dead_letters_has_their_own_config(
    output: dict[str, Any], tmp_path: Path
) -> None:
    plan = counts(output, deadLetters={"retention": "2d"})
    backend = strimzi(tmp_path)
    owner = {"apiVersion": "distributary.dev/v1alpha1", "kind": "Log", "name": "counts"}
    made = {
        topic.name: backend.manifest(output_log(plan), topic, owner, "kafka.strimzi.io/v1")
        for topic in plan.topics
    }
    assert made[DLQ]["spec"] == {
        "topicName": DLQ,
        "partitions": 2,
        "config": {"cleanup.policy": "delete", "retention.ms": str(2 * 24 * 3600 * 1000)},
    }
    assert made[DLQ]["metadata"]["annotations"]["distributary.dev/log"] == "shop/counts"
    compacted = {"cleanup.policy": "compact"} if output["mode"] == "upsert" else {}
    assert made["counts.r1"]["spec"]["config"] == compacted


def test_a_kafka_topic_given_a_desired_topic_renders_it_not_the_logs_settings() -> None:
    counts_log = Log.model_validate(
        {"metadata": {"name": "counts", "namespace": "shop"}, "spec": {"compaction": True}}
    )
    desired = DesiredTopic(DLQ, 1, None, {"cleanup.policy": "delete", "retention.ms": "60000"})
    manifest = kafka_topic_manifest(
        counts_log, cluster="events", namespace="kafka", desired=desired
    )
    assert manifest["spec"]["config"] == {"cleanup.policy": "delete", "retention.ms": "60000"}
    with pytest.raises(ValueError, match="give one"):
        kafka_topic_manifest(
            counts_log, cluster="events", namespace="kafka", topic="other", desired=desired
        )


def test_the_direct_backend_creates_it_with_those_configs() -> None:
    letters = topics(counts(UPSERT))[DLQ]
    (create,) = plan_topic(letters, None).actions
    assert create == CreateTopic(
        DLQ, 2, None, {"cleanup.policy": "delete", "retention.ms": WEEK_MS}
    )


def test_a_dead_letter_topic_made_compacted_before_is_repaired() -> None:
    letters = topics(counts(UPSERT))[DLQ]
    before = ObservedTopic(DLQ, 2, 1, {"cleanup.policy": "compact"})
    (alter,) = plan_topic(letters, before).actions
    assert alter == AlterConfigs(set={"cleanup.policy": "delete", "retention.ms": WEEK_MS})


@pytest.mark.parametrize("strategy", ["Reprocess", "InPlace", "Auto"])
def test_a_new_retention_changes_only_the_topic(strategy: str) -> None:
    old = view("counts", "clicks", "SELECT * FROM src")
    old["spec"]["upgrade"] = {"strategy": strategy}
    new = {**old, "spec": {**old["spec"], "deadLetters": {"retention": "30d"}}}
    inputs = {"src": Log.model_validate(log("clicks"))}
    result = classify_view_change(
        DerivedView.model_validate(old), DerivedView.model_validate(new), inputs, inputs
    )
    assert result == Classification(
        "Ignore", ("deadLetters.retention changed: the dead-letter topic takes it now",)
    )
