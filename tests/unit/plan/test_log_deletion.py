"""What deleting a Log deletes: nothing under Retain; under Delete its topic, and for a view's
output Log every revision's topic and the view's dead-letter topic."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api.log import Log
from distributary.api.names import is_label_value
from distributary.api.view import DerivedView
from distributary.plan.applications.runner_spec import dead_letter_topic
from distributary.plan.logs.log_deletion import deleted_topics, serving_revision
from distributary.plan.views.view_plan import (
    SERVING_ANNOTATION,
    VIEW_LABEL,
    namespace_pipeline,
    plan_view,
)

NS = "shop"


def primary(name: str = "clicks", **spec: Any) -> Log:
    return Log.model_validate(
        {
            "apiVersion": "distributary.dev/v1alpha1",
            "kind": "Log",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"partitions": 2, "schema": "user STRING, n INT", **spec},
        }
    )


def view_body(policy: str, output_log: str | None = None) -> dict[str, Any]:
    output: dict[str, Any] = {"mode": "append", "deletionPolicy": policy}
    if output_log:
        output["log"] = output_log
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "big", "namespace": NS, "uid": "uid-big"},
        "spec": {
            "inputs": [{"log": "clicks", "alias": "src"}],
            "sql": "SELECT user, n FROM src WHERE n > 1",
            "output": output,
        },
    }


def view_output(policy: str, output_log: str | None = None) -> tuple[Log, Any]:
    """The child Log a new view's plan applies (serving revision 1), and the plan."""
    clicks = primary().model_dump(by_alias=True, exclude_none=True)
    body = view_body(policy, output_log)
    pipeline, children, _ = namespace_pipeline([clicks], [body])
    plan = plan_view(
        pipeline,
        children,
        DerivedView.model_validate(body),
        None,
        checkpoint_root="s3a://bucket/ck",
        bootstrap_servers="kafka:9092",
    )
    assert plan.output_log is not None
    return Log.model_validate(plan.output_log), plan


def annotated(log: Log, annotations: dict[str, str]) -> Log:
    """`log` with other annotations (as the view writes them at a later revision)."""
    metadata = log.metadata.model_copy(update={"annotations": annotations})
    return log.model_copy(update={"metadata": metadata})


def test_retain_keeps_every_topic() -> None:
    assert deleted_topics(primary(), "clicks") == ()
    child, _ = view_output("Retain")
    assert deleted_topics(annotated(child, {SERVING_ANNOTATION: "3"}), "big.r3") == ()


def test_a_primary_logs_delete_removes_its_own_topic_only() -> None:
    assert deleted_topics(primary(deletionPolicy="Delete"), "clicks") == ("clicks",)
    log = primary(deletionPolicy="Delete", topicName="shop.clicks")
    assert deleted_topics(log, None) == ("shop.clicks",)  # never reconciled: the spec's topic


def test_a_views_output_removes_every_topic_the_views_plan_made() -> None:
    child, plan = view_output("Delete")
    assert child.metadata.annotations[SERVING_ANNOTATION] == "1"
    made = {topic.name for topic in plan.topics}
    assert made == {"big.r1", "distributary.shop.big.dlq"}
    assert deleted_topics(child, "big.r1") == ("big.r1", "distributary.shop.big.dlq")


def test_every_revision_up_to_the_serving_one_goes_with_the_dead_letters() -> None:
    child, _ = view_output("Delete", output_log="big-out")
    assert child.metadata.labels[VIEW_LABEL] == "big"
    child = annotated(child, {SERVING_ANNOTATION: "3"})  # after two cutovers
    assert deleted_topics(child, "big-out.r3") == (
        "big-out.r1",
        "big-out.r2",
        "big-out.r3",
        "distributary.shop.big.dlq",  # named after the view, not its output Log
    )


@pytest.mark.parametrize(
    ("annotation", "status_topic", "serving"),
    [
        ("2", "big.r2", 2),
        ("2", "big.r4", 4),  # status written after the last apply: the larger wins
        ("5", "big.r4", 5),
        (None, "big.r3", 3),
        ("x", None, 0),
        (None, "big.rx", 0),
        (None, "other.r7", 0),
    ],
)
def test_the_serving_revision_is_the_larger_of_annotation_and_status(
    annotation: str | None, status_topic: str | None, serving: int
) -> None:
    child, _ = view_output("Delete")
    annotations = {} if annotation is None else {SERVING_ANNOTATION: annotation}
    assert serving_revision(annotated(child, annotations), status_topic) == serving


def test_a_view_output_that_says_nothing_of_its_revision_still_loses_revision_one() -> None:
    child, _ = view_output("Delete")
    bare = annotated(child, {})
    assert deleted_topics(bare, None) == ("big.r1", "distributary.shop.big.dlq")
    # A status naming the unsuffixed topic (made before the view annotated its Log) counts too.
    assert deleted_topics(bare, "big") == ("big.r1", "big", "distributary.shop.big.dlq")


def test_a_revision_still_catching_up_goes_too() -> None:
    child, _ = view_output("Delete")
    annotations = {**child.metadata.annotations, "distributary.dev/latest-revision": "2"}
    catching = child.model_copy(
        update={"metadata": child.metadata.model_copy(update={"annotations": annotations})}
    )
    assert deleted_topics(catching, "big.r1") == (
        "big.r1",
        "big.r2",
        "distributary.shop.big.dlq",
    )


@pytest.mark.parametrize("length", [64, 200, 253])
def test_a_long_view_names_output_is_labelled_within_63_and_loses_the_right_dead_letters(
    length: int,
) -> None:
    name = "b" * length
    clicks = primary().model_dump(by_alias=True, exclude_none=True)
    body = view_body("Delete", output_log="out")
    body["metadata"]["name"] = name
    pipeline, children, _ = namespace_pipeline([clicks], [body])
    plan = plan_view(
        pipeline,
        children,
        DerivedView.model_validate(body),
        None,
        checkpoint_root="s3a://bucket/ck",
        bootstrap_servers="kafka:9092",
    )
    assert plan.output_log is not None
    child = Log.model_validate(plan.output_log)
    label = child.metadata.labels[VIEW_LABEL]
    assert len(label) <= 63
    assert is_label_value(label)
    assert child.metadata.annotations[VIEW_LABEL] == name
    assert deleted_topics(child, "out.r1") == ("out.r1", dead_letter_topic(NS, name))
