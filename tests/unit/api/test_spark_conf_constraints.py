"""sparkConf may not set what the operator and the runner set themselves: the master, the
checkpoint location, the namespace, the service account, the image and resources the spec has
fields for, and Kafka's servers. The message names the key and what sets it instead."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from distributary.api import parse_body
from distributary.api.common import RESERVED_SPARK_CONF, SparkSettings, reserved_spark_conf
from distributary.api.job import JobSpec
from distributary.api.view import DerivedView, ViewSpec
from distributary.plan.applications.runner_spec import default_spark_conf


def _refusal(conf: dict[str, str]) -> str:
    with pytest.raises(ValidationError) as caught:
        SparkSettings.model_validate({"sparkConf": conf})
    return str(caught.value)


@pytest.mark.parametrize(
    ("key", "instead"),
    [
        ("spark.master", "Spark runtime"),
        ("spark.submit.deployMode", "Spark runtime"),
        ("spark.sql.streaming.checkpointLocation", "checkpoint root"),
        ("spark.kubernetes.namespace", "namespace"),
        ("spark.kubernetes.authenticate.driver.serviceAccountName", "service account"),
        ("spark.kubernetes.container.image", "spec.spark.image"),
        ("spark.executor.instances", "spec.spark.executor.instances"),
        ("spark.driver.memory", "spec.spark.driver.memory"),
    ],
)
def test_a_key_the_operator_sets_is_refused_naming_what_sets_it(key: str, instead: str) -> None:
    message = _refusal({"spark.sql.shuffle.partitions": "4", key: "x"})
    assert repr(key) in message
    assert instead in message
    assert "remove it" in message


@pytest.mark.parametrize(
    "key",
    [
        "spark.kafka.bootstrap.servers",
        "spark.kafka.clusters.main.auth.bootstrap.servers",
        "spark.hadoop.kafka.bootstrap.servers",
    ],
)
def test_any_key_naming_kafkas_servers_is_refused(key: str) -> None:
    assert "bootstrap servers" in _refusal({key: "broker:9092"})


@pytest.mark.parametrize(
    "key",
    [
        "spark.sql.shuffle.partitions",
        "spark.masters",  # only the exact names are the operator's
        "spark.sql.streaming.checkpointLocation.extra",
        "spark.driver.maxResultSize",
        "spark.executor.extraJavaOptions",
        "spark.kubernetes.driver.label.team",
        "spark.kafka.clusters.main.target.bootstrap.servers.regex",
        "spark.hadoop.fs.s3a.endpoint",
    ],
)
def test_other_keys_are_the_users(key: str) -> None:
    assert reserved_spark_conf(key) is None
    assert SparkSettings.model_validate({"sparkConf": {key: "1"}}).spark_conf == {key: "1"}


def test_the_runners_own_defaults_stay_overridable() -> None:
    assert not [key for key in default_spark_conf(3) if reserved_spark_conf(key)]


def test_views_and_jobs_both_refuse_them() -> None:
    spark = {"sparkConf": {"spark.master": "local[*]"}}
    with pytest.raises(ValidationError, match=r"spark\.master"):
        ViewSpec.model_validate(
            {"inputs": [{"log": "a", "alias": "a"}], "sql": "SELECT 1", "spark": spark}
        )
    with pytest.raises(ValidationError, match=r"spark\.master"):
        JobSpec.model_validate(
            {"image": "i", "mainApplicationFile": "local:///a.py", "spark": spark}
        )


def test_every_reserved_key_is_a_spark_key() -> None:
    assert all(key.startswith("spark.") for key in RESERVED_SPARK_CONF)


def test_a_stored_view_with_one_becomes_invalid_naming_the_field() -> None:
    # A view stored before the CRD had the rule: the operator's parse refuses it (InvalidSpec).
    body = {
        "apiVersion": "distributary.dev/v1alpha1",
        "kind": "DerivedView",
        "metadata": {"name": "big", "namespace": "shop"},
        "spec": {
            "inputs": [{"log": "clicks", "alias": "src"}],
            "sql": "SELECT 1 AS one",
            "spark": {"sparkConf": {"spark.kubernetes.namespace": "kube-system"}},
        },
    }
    found = parse_body(body, DerivedView)
    assert isinstance(found, str)
    assert found.startswith("DerivedView/shop/big: spec.spark.sparkConf: ")
    assert "'spark.kubernetes.namespace' is set by the resource's own namespace" in found
