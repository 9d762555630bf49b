"""Where checkpoints live: roots a restarted driver would lose are refused under the Spark
operator, and a checkpoint claim is mounted into every driver and executor."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from distributary.api.common import SparkSettings
from distributary.plan.applications.checkpoint_storage import (
    DEFAULT_MOUNT_PATH,
    NOT_DURABLE,
    CheckpointClaim,
    checkpoint_problem,
    local_path,
)
from distributary.plan.applications.spark import (
    CHECKPOINT_VOLUME,
    SPARK_GROUP,
    Application,
    spark_application_of,
    with_checkpoint_claim,
)
from distributary.plan.pipelines.pipeline import DEFAULT_CHECKPOINT_ROOT

CLAIM = CheckpointClaim("distributary-checkpoints", DEFAULT_MOUNT_PATH)


@pytest.mark.parametrize(
    ("root", "path"),
    [
        ("file:///var/lib/distributary/checkpoints", "/var/lib/distributary/checkpoints"),
        ("file:///var/lib/distributary/checkpoints/", "/var/lib/distributary/checkpoints"),
        ("file:/ck", "/ck"),
        ("/var/ck/../ck", "/var/ck"),
        ("checkpoints", "checkpoints"),
        ("s3a://bucket/checkpoints", None),
        ("gs://bucket/checkpoints", None),
        ("abfss://ck@account.dfs.core.windows.net/checkpoints", None),
        ("hdfs://namenode:8020/checkpoints", None),
    ],
)
def test_a_root_on_the_drivers_own_disk_has_a_local_path(root: str, path: str | None) -> None:
    assert local_path(root) == path


@pytest.mark.parametrize(
    "root",
    [
        "s3a://bucket/checkpoints",
        "gs://bucket/checkpoints",
        "abfss://ck@account.dfs.core.windows.net/checkpoints",
        "hdfs://namenode:8020/checkpoints",
    ],
)
def test_object_stores_are_durable_without_a_claim(root: str) -> None:
    assert checkpoint_problem(root, "spark-operator") is None


@pytest.mark.parametrize("root", [DEFAULT_CHECKPOINT_ROOT, "/srv/checkpoints", "checkpoints"])
def test_a_node_local_root_under_the_spark_operator_is_refused_with_the_fix(root: str) -> None:
    problem = checkpoint_problem(root, "spark-operator")
    assert problem is not None
    assert problem.reason == NOT_DURABLE == "CheckpointNotDurable"
    assert root in problem.message
    assert "restarted driver loses its checkpoint" in problem.message
    for fix in (
        "checkpoints.claim",
        "DISTRIBUTARY_CHECKPOINT_CLAIM",
        "s3a://",
        "DISTRIBUTARY_ALLOW_NODE_LOCAL_CHECKPOINTS=true",
    ):
        assert fix in problem.message


def test_a_node_local_root_is_accepted_when_explicitly_allowed() -> None:
    allowed = checkpoint_problem(DEFAULT_CHECKPOINT_ROOT, "spark-operator", allow_node_local=True)
    assert allowed is None


def test_the_local_runtime_is_never_refused() -> None:
    assert checkpoint_problem(DEFAULT_CHECKPOINT_ROOT, "local") is None
    assert checkpoint_problem("checkpoints", "local", CheckpointClaim("c", "relative")) is None


@pytest.mark.parametrize(
    "root",
    [
        "file:///var/lib/distributary/checkpoints",
        "file:///var/lib/distributary/checkpoints/team-a",
        "/var/lib/distributary/checkpoints/team-a/",
    ],
)
def test_a_root_under_the_claims_mount_path_is_durable(root: str) -> None:
    assert checkpoint_problem(root, "spark-operator", CLAIM) is None


@pytest.mark.parametrize(
    "root", ["file:///var/lib/distributary", "file:///var/lib/distributary/checkpoints-old"]
)
def test_a_root_beside_the_claims_mount_path_is_refused(root: str) -> None:
    problem = checkpoint_problem(root, "spark-operator", CLAIM)
    assert problem is not None
    assert problem.reason == NOT_DURABLE
    assert f"is not under {DEFAULT_MOUNT_PATH}" in problem.message
    assert "'distributary-checkpoints'" in problem.message
    assert f"file://{DEFAULT_MOUNT_PATH}" in problem.message


def test_a_claim_with_a_relative_mount_path_is_refused() -> None:
    claim = CheckpointClaim("distributary-checkpoints", "checkpoints")
    problem = checkpoint_problem("s3a://bucket/ck", "spark-operator", claim)
    assert problem is not None
    assert "DISTRIBUTARY_CHECKPOINT_MOUNT_PATH" in problem.message
    assert "not an absolute path" in problem.message


def manifest() -> dict[str, Any]:
    app = Application(
        kind="DerivedView",
        namespace="shop",
        name="counts",
        revision=2,
        spec_hash="abc",
        image="distributary-spark:test",
        main_file="local:///opt/distributary/runner.py",
        arguments=(),
        spark_conf={},
        env={"A": "1"},
    )
    return spark_application_of(app, SparkSettings(), "distributary-spark", None)


def test_the_claim_is_mounted_into_the_driver_and_the_executors() -> None:
    before = manifest()
    mounted = with_checkpoint_claim(before, CLAIM)
    spec = mounted["spec"]
    assert spec["volumes"] == [
        {
            "name": CHECKPOINT_VOLUME,
            "persistentVolumeClaim": {"claimName": "distributary-checkpoints"},
        }
    ]
    for role in ("driver", "executor"):
        assert spec[role]["volumeMounts"] == [
            {"name": CHECKPOINT_VOLUME, "mountPath": DEFAULT_MOUNT_PATH}
        ]
        assert spec[role]["podSecurityContext"] == {"fsGroup": SPARK_GROUP}
        assert spec[role]["envVars"] == before["spec"][role]["envVars"]
    # Everything else is as it was, and the manifest given is left untouched.
    assert before == manifest()
    rest = copy.deepcopy(mounted)
    del rest["spec"]["volumes"]
    for role in ("driver", "executor"):
        del rest["spec"][role]["volumeMounts"], rest["spec"][role]["podSecurityContext"]
    assert rest == before


def test_mounting_twice_mounts_once() -> None:
    once = with_checkpoint_claim(manifest(), CLAIM)
    assert with_checkpoint_claim(once, CLAIM) == once
