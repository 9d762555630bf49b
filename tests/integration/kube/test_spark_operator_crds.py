"""Our SparkApplications are accepted by the Spark operator's real CRDs with no field pruned.

The CRDs are the release's own (v2.3.0, read from the Go module cache), whose structural schema
refuses (server-side apply) or silently drops (a plain write) every field it does not declare.
Each manifest the planner makes (a view's and a job's, with a checkpoint claim, a service
account, Spark settings, a job's environment and the Kafka Secrets' references) is server-side
applied as the operator applies it, read back and compared whole: a field the CRD does not know
would be refused or missing from what reads back. No controller manages this namespace, so
nothing else writes to the applications.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from tests.integration.kube.operator_harness import Cluster
from tests.integration.kube.spark_operator_bed import SPARK_APPLICATION, SPARK_CRDS

from distributary.api.common import SparkSettings
from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.api.view import DerivedView
from distributary.plan.access.kafka_secrets import KafkaSecretMounts, with_kafka_secrets
from distributary.plan.applications.checkpoint_storage import CheckpointClaim
from distributary.plan.applications.runner_spec import view_runner_spec
from distributary.plan.applications.spark import (
    job_application,
    spark_application,
    with_checkpoint_claim,
    with_service_account,
)

NAMESPACE = "spark-crds"
EXTRA_CRDS = (SPARK_CRDS,)
SPARK = {
    "image": "registry/distributary-spark:2",
    "driver": {"cores": 2, "memory": "2g"},
    "executor": {"cores": 3, "memory": "4g", "instances": 5},
    "sparkConf": {"spark.sql.shuffle.partitions": "12"},
}


def log(name: str, partitions: int = 3) -> Log:
    return Log.model_validate(
        {
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"partitions": partitions, "schema": "user STRING, amount INT"},
        }
    )


def view_manifest() -> dict[str, Any]:
    view = DerivedView.model_validate(
        {
            "metadata": {"name": "big-clicks", "namespace": NAMESPACE},
            "spec": {
                "inputs": [{"log": "clicks", "alias": "clicks"}],
                "sql": "SELECT user, sum(amount) AS total FROM clicks GROUP BY user",
                "output": {"mode": "upsert", "key": ["user"]},
                "spark": SPARK,
            },
        }
    )
    runner = view_runner_spec(
        view,
        {"clicks": log("clicks", 4)},
        log(view.output_log, 4),
        revision=2,
        spec_hash="c0ffee",
        output_topic="big-clicks.r2",
        checkpoint_root="file:///checkpoints",
    )
    manifest = spark_application(runner, view.spec.spark, image="registry/default:1")
    manifest = with_service_account(manifest, "pipeline-drivers")
    return with_checkpoint_claim(manifest, CheckpointClaim("distributary-checkpoints"))


def job_manifest() -> dict[str, Any]:
    job = StreamJob.model_validate(
        {
            "metadata": {"name": "enrich", "namespace": NAMESPACE},
            "spec": {
                "image": "registry/enrich:1.0",
                "mainApplicationFile": "local:///app/enrich.py",
                "arguments": ["--mode", "fast"],
                "inputs": [{"log": "clicks"}],
                "outputs": [{"log": "enriched"}],
                "env": {"ENRICH_LEVEL": "3"},
                "spark": {"driver": {"cores": 1, "memory": "1g"}},
            },
        }
    )
    manifest = job_application(
        job,
        {"clicks": log("clicks")},
        {"enriched": log("enriched")},
        revision=1,
        spec_hash="beef",
        checkpoint_root="file:///checkpoints",
        bootstrap_servers="kafka:9092",
        progress_topic="distributary.progress",
    )
    # The Kafka credentials as the operator adds them: references to Secrets, never values.
    secrets = KafkaSecretMounts(password_secret="kafka-user", ca_secret="kafka-ca")
    return with_kafka_secrets(manifest, secrets)


def applied_and_read_back(cluster: Cluster, manifest: dict[str, Any]) -> dict[str, Any]:
    """`manifest` server-side applied, as the operator applies it, then read back."""
    cluster.kubectl(
        "apply", "--server-side", "--field-manager=distributary", "-n", NAMESPACE, "-f", "-",
        stdin=yaml.safe_dump(manifest),
    )  # fmt: skip
    found = cluster.get(SPARK_APPLICATION, manifest["metadata"]["name"])
    assert found is not None
    return found


def differences(sent: Any, read: Any, path: str = "") -> list[str]:
    """Where `read` differs from `sent`, as paths: missing, changed or added fields."""
    if isinstance(sent, dict) and isinstance(read, dict):
        found = []
        for key in sorted(set(sent) | set(read)):
            where = f"{path}.{key}"
            if key not in read:
                found.append(f"{where} pruned")
            elif key not in sent:
                found.append(f"{where} added: {json.dumps(read[key])}")
            else:
                found += differences(sent[key], read[key], where)
        return found
    return [] if sent == read else [f"{path}: sent {sent!r}, read {read!r}"]


@pytest.mark.parametrize("make", [view_manifest, job_manifest], ids=["view", "job"])
def test_what_we_apply_reads_back_equal(cluster: Cluster, make: Any) -> None:
    sent = make()
    assert sent["spec"]["driver"]  # a manifest with something in it to lose
    read = applied_and_read_back(cluster, sent)
    assert differences(sent["spec"], read["spec"], "spec") == []
    for part in ("labels", "annotations"):
        assert read["metadata"][part] == sent["metadata"][part]


def test_the_crd_is_the_releases_and_knows_only_what_it_declares(cluster: Cluster) -> None:
    crd = json.loads(cluster.kubectl("get", "crd", SPARK_APPLICATION, "-o", "json"))
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1beta2"]
    assert crd["metadata"]["annotations"]["controller-gen.kubebuilder.io/version"]
    sent = job_manifest()
    sent["metadata"]["name"] = "enrich-unknown-field"
    sent["spec"]["driver"]["notASparkField"] = "x"
    # Server-side apply, the operator's way, refuses a field the schema lacks ...
    refused = cluster.kubectl(
        "apply", "--server-side", "-n", NAMESPACE, "-f", "-",
        stdin=yaml.safe_dump(sent), check=False,
    )  # fmt: skip
    assert cluster.get(SPARK_APPLICATION, "enrich-unknown-field") is None, refused
    # ... and a client that skips validation has it dropped: the comparison above would see it.
    cluster.kubectl("create", "--validate=false", "-n", NAMESPACE, "-f", "-",
                    stdin=yaml.safe_dump(sent))  # fmt: skip
    read = cluster.get(SPARK_APPLICATION, "enrich-unknown-field") or {}
    assert differences(sent["spec"], read["spec"], "spec") == ["spec.driver.notASparkField pruned"]


def test_settings_reach_the_manifest(cluster: Cluster) -> None:
    """What the comparison covers: the view's Spark settings, claim and service account, and
    the job's environment and secret references."""
    spec = applied_and_read_back(cluster, view_manifest())["spec"]
    settings = SparkSettings.model_validate(SPARK)
    assert spec["image"] == settings.image
    assert (spec["driver"]["cores"], spec["driver"]["memory"]) == (2, "2g")
    assert spec["executor"]["instances"] == 5
    assert spec["driver"]["serviceAccount"] == "pipeline-drivers"
    assert spec["volumes"] == [
        {
            "name": "distributary-checkpoints",
            "persistentVolumeClaim": {"claimName": "distributary-checkpoints"},
        }
    ]
    assert spec["sparkConf"]["spark.sql.shuffle.partitions"] == "12"
    job = applied_and_read_back(cluster, job_manifest())["spec"]
    assert job["driver"]["envVars"]["ENRICH_LEVEL"] == "3"
    assert job["executor"]["envSecretKeyRefs"] == job["driver"]["envSecretKeyRefs"]
    assert {s["name"] for s in job["driver"]["secrets"]} == {"kafka-ca"}
