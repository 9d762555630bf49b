"""`spec.spark.pods`: what a view's or job's pods need on a cluster, refused when it cannot work,
and carried into the SparkApplication where the Spark operator hands it to the pods."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from tests.unit.plan.test_spark_application import make_view, view_app

from distributary.api.common import SparkSettings
from distributary.plan.applications.spark import CHECKPOINT_VOLUME, with_checkpoint_claim

PODS: dict[str, Any] = {
    "env": [
        {"name": "AWS_REGION", "value": "eu-west-1"},
        {"name": "AWS_ACCESS_KEY_ID", "secretKeyRef": {"name": "s3", "key": "access-key"}},
    ],
    "envFrom": [{"secretRef": {"name": "s3-extra"}}],
    "volumes": [
        {
            "name": "certs",
            "mountPath": "/etc/certs",
            "readOnly": True,
            "secret": {"secretName": "ca"},
        },
        {"name": "scratch", "mountPath": "/scratch", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "lookup", "mountPath": "/lookup", "configMap": {"name": "lookup"}},
        {"name": "data", "mountPath": "/data", "persistentVolumeClaim": {"claimName": "data"}},
    ],
    "nodeSelector": {"pool": "spark", "topology.kubernetes.io/zone": "a"},
    "tolerations": [
        {"key": "dedicated", "value": "spark", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists"},
    ],
    "imagePullSecrets": ["registry"],
}


def app_with(pods: dict[str, Any]) -> dict[str, Any]:
    return view_app(make_view(spark={"pods": pods}))


def refusal(pods: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        SparkSettings.model_validate({"pods": pods})
    return str(caught.value)


def test_no_pod_settings_add_nothing_to_the_application() -> None:
    spec = view_app()["spec"]
    assert not {"nodeSelector", "imagePullSecrets", "volumes"} & set(spec)
    for role in (spec["driver"], spec["executor"]):
        assert not {"envSecretKeyRefs", "envFrom", "volumeMounts", "tolerations"} & set(role)


def test_every_pod_setting_reaches_the_driver_and_the_executors() -> None:
    spec = app_with(PODS)["spec"]
    assert spec["nodeSelector"] == {"pool": "spark", "topology.kubernetes.io/zone": "a"}
    assert spec["imagePullSecrets"] == ["registry"]
    assert spec["volumes"] == [
        {"name": "certs", "secret": {"secretName": "ca"}},
        {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "lookup", "configMap": {"name": "lookup"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
    ]
    for role in (spec["driver"], spec["executor"]):
        assert role["envVars"]["AWS_REGION"] == "eu-west-1"
        assert "AWS_ACCESS_KEY_ID" not in role["envVars"]  # never a secret's value in the spec
        assert role["envSecretKeyRefs"] == {
            "AWS_ACCESS_KEY_ID": {"name": "s3", "key": "access-key"}
        }
        assert role["envFrom"] == [{"secretRef": {"name": "s3-extra"}}]
        assert role["volumeMounts"] == [
            {"name": "certs", "mountPath": "/etc/certs", "readOnly": True},
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "lookup", "mountPath": "/lookup"},
            {"name": "data", "mountPath": "/data"},
        ]
        assert role["tolerations"] == [
            {"key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Exists"},
        ]


def test_the_checkpoint_claim_joins_the_users_volumes_without_replacing_them() -> None:
    claim_type = type("Claim", (), {"name": "ckpt", "mount_path": "/mnt/checkpoints"})
    spec = with_checkpoint_claim(app_with(PODS), claim_type())["spec"]  # type: ignore[arg-type]
    assert [v["name"] for v in spec["volumes"]] == [
        "certs",
        "scratch",
        "lookup",
        "data",
        CHECKPOINT_VOLUME,
    ]
    for role in (spec["driver"], spec["executor"]):
        paths = [m["mountPath"] for m in role["volumeMounts"]]
        assert paths == ["/etc/certs", "/scratch", "/lookup", "/data", "/mnt/checkpoints"]


@pytest.mark.parametrize(
    ("pods", "said"),
    [
        ({"env": [{"name": "DISTRIBUTARY_CHECKPOINT_LOCATION", "value": "/x"}]}, "DISTRIBUTARY_"),
        ({"env": [{"name": "spark_home", "value": "/x"}]}, "SPARK_"),
        ({"env": [{"name": "A"}]}, "either value or secretKeyRef"),
        (
            {"env": [{"name": "A", "value": "1", "secretKeyRef": {"name": "s", "key": "k"}}]},
            "either value or secretKeyRef",
        ),
        ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "given twice"),
        ({"env": [{"name": "1A", "value": "1"}]}, "pods.env.0.name"),
        (
            {"volumes": [{"name": CHECKPOINT_VOLUME, "mountPath": "/x", "emptyDir": {}}]},
            "are the operator's",
        ),
        ({"volumes": [{"name": "a", "mountPath": "/x"}]}, "exactly one of secret"),
        (
            {
                "volumes": [
                    {"name": "a", "mountPath": "/x", "emptyDir": {}},
                    {"name": "b", "mountPath": "/x/", "emptyDir": {}},
                ]
            },
            "mount path '/x' is given twice",
        ),
        ({"volumes": [{"name": "a", "mountPath": "x", "emptyDir": {}}]}, "mountPath"),
        ({"nodeSelector": {"bad key!": "a"}}, "not a label key"),
        ({"nodeSelector": {"pool": "not a value"}}, "nodeSelector"),
        ({"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}, "has no value"),
        ({"tolerations": [{"value": "b"}]}, "needs a key"),
        ({"imagePullSecrets": ["Not_A_Name"]}, "imagePullSecrets"),
    ],
)
def test_pod_settings_that_cannot_work_are_refused_with_the_fix(
    pods: dict[str, Any], said: str
) -> None:
    assert said in refusal(pods)


def test_pod_resources_reach_each_role_in_the_spark_operators_field_names() -> None:
    spark = {
        "driver": {"cores": 1, "memory": "512m", "cpuRequest": "500m", "memoryOverhead": "256m"},
        "executor": {"cores": 2, "cpuRequest": "0.5", "cpuLimit": "2", "instances": 2},
    }
    spec = view_app(make_view(spark=spark))["spec"]
    driver, executor = spec["driver"], spec["executor"]
    assert (driver["cores"], driver["memory"]) == (1, "512m")
    assert (driver["coreRequest"], driver["memoryOverhead"]) == ("500m", "256m")
    assert "coreLimit" not in driver
    assert (executor["coreRequest"], executor["coreLimit"]) == ("0.5", "2")
    assert executor["instances"] == 2
    assert "memoryOverhead" not in executor
    plain = view_app()["spec"]
    for role in (plain["driver"], plain["executor"]):
        assert not {"coreRequest", "coreLimit", "memoryOverhead"} & set(role)


@pytest.mark.parametrize("bad", ["1Gi", "-1", "0.5m", "1.2345", "m", "1e3", "1000000m"])
def test_a_cpu_quantity_that_is_not_one_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError) as caught:
        SparkSettings.model_validate({"driver": {"cpuRequest": bad}})
    assert "cpuRequest" in str(caught.value)
