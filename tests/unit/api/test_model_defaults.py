"""Defaults of the three kinds, and the camelCase form they take in YAML."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api import DerivedView, Log, StreamJob, parse_resource
from distributary.api.common import GROUP_VERSION


def _doc(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": GROUP_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def _view_spec(**extra: Any) -> dict[str, Any]:
    return {"inputs": [{"log": "clicks", "alias": "c"}], "sql": "SELECT * FROM c", **extra}


def test_a_log_with_no_spec_takes_every_default() -> None:
    log = parse_resource({"apiVersion": GROUP_VERSION, "kind": "Log", "metadata": {"name": "a"}})
    assert isinstance(log, Log)
    spec = log.spec
    assert (spec.partitions, spec.replicas, spec.retention, spec.compaction) == (
        3,
        None,
        None,
        False,
    )
    assert (spec.format, spec.record_schema, spec.key) == ("json", None, None)
    assert spec.deletion_policy == "Retain"
    assert spec.config == {}
    assert log.metadata.namespace == "default"


def test_a_logs_topic_is_its_name_unless_topic_name_is_set() -> None:
    plain = parse_resource(_doc("Log", "page-views", {}))
    named = parse_resource(_doc("Log", "page-views", {"topicName": "web.page_views"}))
    assert isinstance(plain, Log)
    assert isinstance(named, Log)
    assert plain.topic == "page-views"
    assert named.topic == "web.page_views"


def test_a_view_defaults_to_an_append_output_named_after_it_and_reprocessing() -> None:
    view = parse_resource(_doc("DerivedView", "enriched", _view_spec()))
    assert isinstance(view, DerivedView)
    spec = view.spec
    assert view.output_log == "enriched"
    assert (spec.output.mode, spec.output.key, spec.output.deletion_policy) == (
        "append",
        None,
        "Retain",
    )
    assert spec.upgrade.strategy == "Reprocess"
    assert spec.upgrade.allow_partial_history is False
    assert spec.inputs[0].starting_position.from_ == "Earliest"


def test_spark_settings_default_to_one_small_executor_and_a_five_second_trigger() -> None:
    view = parse_resource(_doc("DerivedView", "v", _view_spec()))
    assert isinstance(view, DerivedView)
    spark = view.spec.spark
    assert (spark.driver.cores, spark.driver.memory) == (1, "1g")
    assert (spark.executor.instances, spark.executor.cores, spark.executor.memory) == (1, 1, "1g")
    assert (spark.trigger, spark.max_offsets_per_trigger, spark.image) == ("5s", None, None)
    assert spark.spark_conf == {}


def test_a_stream_job_restarts_in_place_by_default() -> None:
    job = parse_resource(
        _doc("StreamJob", "j", {"image": "app:1", "mainApplicationFile": "local:///app/job.py"})
    )
    assert isinstance(job, StreamJob)
    assert job.spec.upgrade.strategy == "InPlace"
    assert (job.spec.inputs, job.spec.outputs, job.spec.arguments, job.spec.env) == ([], [], [], {})


def test_an_output_log_name_overrides_the_views_name() -> None:
    view = parse_resource(_doc("DerivedView", "v", _view_spec(output={"log": "clicks-clean"})))
    assert isinstance(view, DerivedView)
    assert view.output_log == "clicks-clean"


def _missing(given: Any, written: Any, path: str = "spec") -> list[str]:
    """Where `written` lacks or changes something `given` says (extra defaults are fine)."""
    if isinstance(given, dict) and isinstance(written, dict):
        return [
            p
            for key, value in given.items()
            for p in (
                _missing(value, written[key], f"{path}.{key}")
                if key in written
                else [f"{path}.{key}"]
            )
        ]
    return [] if given == written else [f"{path}: {given!r} became {written!r}"]


FULL_LOG = _doc(
    "Log",
    "orders",
    {
        "topicName": "shop.orders_v1",
        "partitions": 6,
        "replicas": 3,
        "retention": {"time": "7d", "bytes": "10Gi"},
        "compaction": True,
        "config": {"min.insync.replicas": 2, "compression.type": "zstd"},
        "format": "json",
        "schema": "order_id STRING, amount DECIMAL(12,2)",
        "key": ["order_id"],
        "deletionPolicy": "Delete",
    },
)
FULL_VIEW = _doc(
    "DerivedView",
    "totals",
    {
        "inputs": [
            {
                "log": "orders",
                "alias": "o",
                "startingPosition": {"from": "Offsets", "offsets": {"0": 42, "1": 7}},
            }
        ],
        "sql": "SELECT order_id, amount FROM o",
        "output": {
            "log": "totals-out",
            "mode": "upsert",
            "key": ["order_id"],
            "partitions": 2,
            "replicas": 1,
            "retention": {"forever": True},
            "deletionPolicy": "Delete",
        },
        "upgrade": {
            "strategy": "Auto",
            "allowPartialHistory": True,
            "cutoverMaxLag": 10,
            "cutoverWindow": "30s",
            "retireAfter": "2h",
        },
        "spark": {
            "image": "img:1",
            "driver": {"cores": 2, "memory": "2g"},
            "executor": {"instances": 3, "cores": 2, "memory": "4g"},
            "trigger": "AvailableNow",
            "maxOffsetsPerTrigger": 100000,
            "sparkConf": {"spark.sql.shuffle.partitions": "6"},
        },
    },
)
FULL_JOB = _doc(
    "StreamJob",
    "scorer",
    {
        "image": "scorer:2",
        "mainApplicationFile": "local:///app/score.py",
        "arguments": ["--threshold", "0.8"],
        "env": {"MODEL_PATH": "/models/a"},
        "inputs": [
            {
                "log": "orders",
                "startingPosition": {"from": "Timestamp", "timestamp": "2025-01-01T00:00:00Z"},
            }
        ],
        "outputs": [{"log": "scores"}],
        "upgrade": {"strategy": "Reprocess"},
        "spark": {"trigger": "1m"},
    },
)


@pytest.mark.parametrize(
    "document", [FULL_LOG, FULL_VIEW, FULL_JOB], ids=["Log", "DerivedView", "StreamJob"]
)
def test_every_field_survives_a_camel_case_round_trip(document: dict[str, Any]) -> None:
    resource = parse_resource(document)
    written = resource.to_yaml_dict()
    assert _missing(document["spec"], written["spec"]) == []
    assert parse_resource(written) == resource


def test_yaml_form_uses_camel_case_and_leaves_unset_fields_out() -> None:
    written = parse_resource(_doc("Log", "a", {"topicName": "a.b"})).to_yaml_dict()
    assert written["apiVersion"] == GROUP_VERSION
    assert written["spec"]["topicName"] == "a.b"
    assert "deletionPolicy" in written["spec"]
    assert "topic_name" not in written["spec"]
    assert "replicas" not in written["spec"]
    assert "status" not in written


def test_python_names_are_accepted_as_well_as_yaml_names() -> None:
    log = Log.model_validate(
        {"metadata": {"name": "a"}, "spec": {"topic_name": "t", "deletion_policy": "Delete"}}
    )
    assert (log.spec.topic_name, log.spec.deletion_policy) == ("t", "Delete")


def test_status_keeps_working_when_the_operator_wrote_a_field_this_version_does_not_know() -> None:
    document = {**_doc("Log", "a", {}), "status": {"partitions": 3, "futureField": 1}}
    log = parse_resource(document)
    assert isinstance(log, Log)
    assert log.status is not None
    assert log.status.partitions == 3
