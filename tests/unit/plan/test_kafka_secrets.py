"""Kafka credentials reach Spark drivers and executors as Secret references: the password through
`secretKeyRef`, the CA and client certificate as Secret volumes; no secret value is in any object
the operator renders (SparkApplications, their arguments and environment, its settings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.controllers.services import runners_security
from distributary.controllers.settings import OperatorSettings
from distributary.graph import load_pipeline
from distributary.plan.access.kafka_connection import (
    PASSWORD_VARIABLE,
    SECURITY_VARIABLE,
    KafkaSecurity,
)
from distributary.plan.access.kafka_secrets import (
    KAFKA_CA_MOUNT,
    KAFKA_CLIENT_MOUNT,
    KafkaSecretMounts,
    for_pods,
    with_kafka_secrets,
)
from distributary.plan.applications.spark import job_application
from distributary.plan.pipelines.pipeline import PlanSettings, plan_pipeline

ROOT = Path(__file__).resolve().parents[3]
PASSWORD = "s3cret-value-that-must-not-leak"
ENVIRONMENT = {
    "DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "DISTRIBUTARY_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "DISTRIBUTARY_KAFKA_SASL_USERNAME": "distributary",
    "DISTRIBUTARY_KAFKA_SASL_PASSWORD": PASSWORD,
    "DISTRIBUTARY_KAFKA_SSL_CA_LOCATION": "/etc/distributary/kafka/ca/ca.crt",
    "DISTRIBUTARY_KAFKA_SASL_SECRET": "kafka-user/password",
    "DISTRIBUTARY_KAFKA_SSL_CA_SECRET": "cluster-ca-cert",
}


def settings(**values: Any) -> OperatorSettings:
    return OperatorSettings.from_environment(ENVIRONMENT, bootstrap_servers="kafka:9093", **values)


def rendered_applications(security: KafkaSecurity, mounts: KafkaSecretMounts) -> list[Any]:
    """Every SparkApplication of the clickstream example and of a job, as the spark-operator
    runtime applies them."""
    plan = plan_pipeline(
        load_pipeline([ROOT / "examples" / "clickstream"]),
        PlanSettings("direct", bootstrap_servers="kafka:9093", kafka_security=security),
    )
    apps = [view.application for view in plan.views]
    job = StreamJob.model_validate(
        {
            "metadata": {"name": "sessions", "namespace": "default"},
            "spec": {
                "image": "me/sessions:1",
                "mainApplicationFile": "local:///app.py",
                "inputs": [{"log": "page-views"}],
                "outputs": [],
            },
        }
    )
    logs = {"page-views": Log.model_validate({"metadata": {"name": "page-views"}, "spec": {}})}
    apps.append(
        job_application(
            job,
            logs,
            {},
            revision=1,
            spec_hash="f00d",
            checkpoint_root="/ckpt",
            bootstrap_servers="kafka:9093",
            kafka_security=security,
        )
    )
    return [with_kafka_secrets(app, mounts) for app in apps]


def test_the_secrets_are_read_from_the_operators_environment() -> None:
    found = settings()
    assert found.kafka_secrets == KafkaSecretMounts(
        password_secret="kafka-user", password_key="password", ca_secret="cluster-ca-cert"
    )
    assert OperatorSettings.from_environment({}, bootstrap_servers="k:9092").kafka_secrets is None


def test_no_secret_value_is_in_any_rendered_object() -> None:
    operator = settings()
    security = runners_security(operator)
    assert security is not None
    assert operator.kafka_secrets is not None
    apps = rendered_applications(security, operator.kafka_secrets)
    assert len(apps) == 5  # the clickstream example's four views and a job
    for app in apps:
        assert PASSWORD not in json.dumps(app)
    assert PASSWORD not in repr(operator)
    assert PASSWORD not in security.describe()


def test_drivers_and_executors_get_the_password_from_its_secret_and_the_ca_mounted() -> None:
    operator = settings()
    security = runners_security(operator)
    assert security is not None
    assert operator.kafka_secrets is not None
    for app in rendered_applications(security, operator.kafka_secrets):
        for role in ("driver", "executor"):
            pod = app["spec"][role]
            assert pod["envSecretKeyRefs"] == {
                PASSWORD_VARIABLE: {"name": "kafka-user", "key": "password"}
            }
            assert pod["secrets"] == [
                {"name": "cluster-ca-cert", "path": KAFKA_CA_MOUNT, "secretType": "Generic"}
            ]
            assert PASSWORD_VARIABLE not in (pod.get("envVars") or {})


def test_the_runners_model_names_what_the_pods_have() -> None:
    operator = settings()
    security = runners_security(operator)
    assert security is not None
    assert operator.kafka_secrets is not None
    views = rendered_applications(security, operator.kafka_secrets)[:-1]
    for app in views:
        spec = json.loads(app["spec"]["arguments"][1])
        assert spec["kafka_security"]["sasl_password"]["env"] == PASSWORD_VARIABLE
        assert spec["kafka_security"]["ssl_ca_location"] == f"{KAFKA_CA_MOUNT}/ca.crt"
    job = rendered_applications(security, operator.kafka_secrets)[-1]
    env = job["spec"]["driver"]["envVars"]
    assert KafkaSecurity.model_validate_json(env[SECURITY_VARIABLE]) == security


def test_a_client_certificate_is_mounted_under_its_own_secret() -> None:
    security = KafkaSecurity(
        protocol="SSL",
        ssl_ca_location="/etc/distributary/kafka/ca/ca.crt",
        ssl_certificate_location="/etc/distributary/kafka/client/user.crt",
        ssl_key_location="/etc/distributary/kafka/client/user.key",
    )
    mounts = KafkaSecretMounts(ca_secret="cluster-ca-cert", client_secret="my-user")
    pods = for_pods(security, mounts)
    assert pods.ssl_certificate_location == f"{KAFKA_CLIENT_MOUNT}/user.crt"
    assert pods.ssl_key_location == f"{KAFKA_CLIENT_MOUNT}/user.key"
    app = rendered_applications(pods, mounts)[0]
    for role in ("driver", "executor"):
        assert app["spec"][role]["secrets"] == [
            {"name": "cluster-ca-cert", "path": KAFKA_CA_MOUNT, "secretType": "Generic"},
            {"name": "my-user", "path": KAFKA_CLIENT_MOUNT, "secretType": "Generic"},
        ]
        assert "envSecretKeyRefs" not in app["spec"][role]


def test_applying_the_secrets_twice_changes_nothing() -> None:
    operator = settings()
    security = runners_security(operator)
    assert security is not None
    assert operator.kafka_secrets is not None
    app = rendered_applications(security, operator.kafka_secrets)[0]
    assert with_kafka_secrets(app, operator.kafka_secrets) == app


def test_the_local_runtime_keeps_the_operators_own_references() -> None:
    operator = settings(spark_runtime="local")
    assert runners_security(operator) == operator.kafka_security
