"""`distributary run` runs no pods: it names each view and job whose `spec.spark.pods` it leaves
aside, and nothing else."""

from __future__ import annotations

from distributary.api import parse_resource
from distributary.graph import Pipeline
from distributary.local.run import pod_settings_left_aside

LOG = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "clicks"},
    "spec": {"partitions": 1, "schema": "user STRING, n INT"},
}


def view(name: str, spark: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": name},
        "spec": {
            "inputs": [{"log": "clicks", "alias": "src"}],
            "sql": "SELECT user FROM src",
            "spark": spark,
        },
    }


def test_views_with_pod_settings_are_named_and_the_others_are_not() -> None:
    pods = {"pods": {"nodeSelector": {"pool": "spark"}}}
    resources = [LOG, view("placed", pods), view("plain", {"trigger": "1s"})]
    pipeline = Pipeline.build([parse_resource(r) for r in resources])
    assert pod_settings_left_aside(pipeline) == [
        "view placed: spec.spark.pods is for its pods on a cluster; distributary run has none "
        "and leaves it aside"
    ]


def test_pod_resources_are_named_with_the_pod_settings() -> None:
    spark = {
        "pods": {"nodeSelector": {"pool": "spark"}},
        "driver": {"cpuRequest": "500m"},
        "executor": {"memoryOverhead": "512m", "cpuLimit": "2"},
    }
    resources = [LOG, view("sized", spark), view("requested", {"driver": {"cpuRequest": "1"}})]
    pipeline = Pipeline.build([parse_resource(r) for r in resources])
    assert pod_settings_left_aside(pipeline) == [
        "view requested: spec.spark.driver.cpuRequest is for its pods on a cluster; distributary "
        "run has none and leaves it aside",
        "view sized: spec.spark.pods, spec.spark.driver.cpuRequest, spec.spark.executor.cpuLimit, "
        "spec.spark.executor.memoryOverhead are for its pods on a cluster; distributary run has "
        "none and leaves them aside",
    ]
