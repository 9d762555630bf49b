"""Secrets are resolved where a client is built, from their references; the model travels in
runner specs and jobs' environments without them; refusals from Kafka are said with their fix."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.api.view import DerivedView
from distributary.kafka.connection import (
    client_settings,
    read_properties_file,
    refusal,
    refusal_message,
    resolve_secret,
    spark_options,
)
from distributary.plan.access.kafka_connection import (
    SECURITY_VARIABLE,
    SPARK_REDACTION,
    KafkaConfigError,
    KafkaSecurity,
    SecretReference,
)
from distributary.plan.applications.runner_spec import RunnerSpec, view_runner_spec
from distributary.plan.applications.spark import job_environment, spark_application

PASSWORD = "correct-horse-battery"


def sasl(reference: SecretReference) -> KafkaSecurity:
    return KafkaSecurity(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="alice",
        sasl_password=reference,
        ssl_ca_location="/ca.pem",
    )


def test_a_password_comes_from_its_variable_its_file_or_its_properties_file(
    tmp_path: Path,
) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_text(PASSWORD + "\n")  # a mounted Secret's key ends as it was created
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{PASSWORD}";\n'
    )
    env = {"PW": PASSWORD}
    assert resolve_secret(SecretReference(env="PW"), env) == PASSWORD
    assert resolve_secret(SecretReference(file=str(secret_file)), env) == PASSWORD
    assert resolve_secret(SecretReference(properties_file=str(properties)), env) == PASSWORD
    security, _ = read_properties_file(properties)
    assert client_settings(security)["sasl.password"] == PASSWORD


def test_a_missing_secret_is_refused_naming_where_it_was_looked_for(tmp_path: Path) -> None:
    with pytest.raises(KafkaConfigError, match="environment variable PW, which is not set"):
        resolve_secret(SecretReference(env="PW"), {})
    missing = tmp_path / "nothing"
    with pytest.raises(KafkaConfigError, match=f"file {missing}: No such file"):
        resolve_secret(SecretReference(file=str(missing)), {})


def test_plaintext_adds_no_settings() -> None:
    assert client_settings(None) == {}
    assert client_settings(KafkaSecurity()) == {}
    assert spark_options(None) == {}


def test_spark_gets_kafka_prefixed_java_properties_with_the_password_resolved() -> None:
    options = spark_options(sasl(SecretReference(env="PW")), {"PW": PASSWORD})
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert f'password="{PASSWORD}"' in options["kafka.sasl.jaas.config"]
    assert options["kafka.ssl.truststore.location"] == "/ca.pem"


def test_a_key_and_certificate_in_two_files_reach_java_inline_and_in_one_file_by_name(
    tmp_path: Path,
) -> None:
    key, certificate = tmp_path / "client.key", tmp_path / "client.crt"
    key.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    certificate.write_text("-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n")
    split = KafkaSecurity(
        protocol="SSL", ssl_certificate_location=str(certificate), ssl_key_location=str(key)
    )
    options = spark_options(split)
    assert options["kafka.ssl.keystore.type"] == "PEM"
    assert options["kafka.ssl.keystore.key"] == key.read_text().strip()
    assert options["kafka.ssl.keystore.certificate.chain"] == certificate.read_text().strip()
    assert "kafka.ssl.keystore.location" not in options
    # Executors read the Spark options, not the driver's disk: no file is made for them.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["client.crt", "client.key"]
    joined = tmp_path / "client.pem"
    joined.write_text(key.read_text() + certificate.read_text())
    one = KafkaSecurity(
        protocol="SSL", ssl_certificate_location=str(joined), ssl_key_location=str(joined)
    )
    assert spark_options(one)["kafka.ssl.keystore.location"] == str(joined)
    assert "kafka.ssl.keystore.key" not in spark_options(one)


def test_spark_redacts_an_inline_client_key() -> None:
    pattern = re.compile(SPARK_REDACTION)
    for option in ("kafka.ssl.keystore.key", "kafka.sasl.jaas.config"):
        value = 'x required password="p";' if "jaas" in option else "-----BEGIN PRIVATE KEY-----"
        assert pattern.search(option) or pattern.search(value), option
    assert not pattern.search("kafka.ssl.keystore.location")


def test_an_rsa_key_java_cannot_read_is_refused_with_the_conversion(tmp_path: Path) -> None:
    key, certificate = tmp_path / "k.pem", tmp_path / "c.pem"
    key.write_text("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n")
    certificate.write_text("-----BEGIN CERTIFICATE-----\n")
    security = KafkaSecurity(
        protocol="SSL", ssl_certificate_location=str(certificate), ssl_key_location=str(key)
    )
    with pytest.raises(KafkaConfigError, match="openssl pkcs8 -topk8 -nocrypt"):
        spark_options(security)


def test_a_refused_password_and_a_refused_certificate_name_what_to_fix() -> None:
    security = sasl(SecretReference(properties_file="/etc/client.properties"))
    denied = KafkaError(
        KafkaError._AUTHENTICATION, "SASL authentication error: invalid credentials"
    )
    message = refusal_message("k:9093", security, denied)
    assert message.startswith("Kafka at k:9093 refused the credentials (SASL_SSL, SCRAM-SHA-512")
    assert "its password (the password in /etc/client.properties)" in message
    alert = KafkaError(KafkaError._TRANSPORT, "SSL routines::ssl/tls alert bad certificate")
    assert refusal(alert) == "failed the TLS handshake"
    assert refusal(KafkaError(KafkaError._TRANSPORT, "Connection refused")) is None
    mtls = KafkaSecurity(protocol="SSL", ssl_ca_location="/ca.pem")
    assert "key store holds a certificate the brokers trust" in refusal_message(
        "k:9094", mtls, alert
    )


# --- the model where it travels ----------------------------------------------------------------


def make_log(name: str) -> Log:
    return Log.model_validate(
        {"metadata": {"name": name, "namespace": "shop"}, "spec": {"partitions": 2}}
    )


def make_view() -> DerivedView:
    return DerivedView.model_validate(
        {
            "metadata": {"name": "counts", "namespace": "shop"},
            "spec": {
                "inputs": [{"log": "clicks", "alias": "c"}],
                "sql": "SELECT * FROM c",
                "output": {"mode": "append"},
            },
        }
    )


def runner_spec(**kwargs: Any) -> RunnerSpec:
    return view_runner_spec(
        make_view(),
        {"c": make_log("clicks")},
        make_log("counts"),
        revision=1,
        spec_hash="f00d",
        output_topic="counts.r1",
        checkpoint_root="/ckpt",
        bootstrap_servers="k:9093",
        **kwargs,
    )


def test_a_plaintext_runner_spec_is_written_as_before() -> None:
    assert "kafka_security" not in json.loads(runner_spec().model_dump_json())
    plain = runner_spec(kafka_security=KafkaSecurity())
    assert "kafka_security" not in json.loads(plain.model_dump_json())


def test_a_secured_runner_spec_and_its_application_carry_the_reference_only() -> None:
    security = sasl(SecretReference(env="DISTRIBUTARY_KAFKA_SASL_PASSWORD"))
    spec = runner_spec(kafka_security=security)
    assert RunnerSpec.model_validate_json(spec.model_dump_json()) == spec
    app = spark_application(spec, make_view().spec.spark, image="dist/job:1")
    payload = json.loads(app["spec"]["arguments"][1])
    assert payload["kafka_security"]["sasl_password"]["env"] == "DISTRIBUTARY_KAFKA_SASL_PASSWORD"
    assert PASSWORD not in json.dumps(app)


def test_a_jobs_environment_carries_the_model_as_json() -> None:
    job = StreamJob.model_validate(
        {
            "metadata": {"name": "j", "namespace": "shop"},
            "spec": {
                "image": "me/j:1",
                "mainApplicationFile": "local:///j.py",
                "inputs": [{"log": "clicks"}],
                "outputs": [],
            },
        }
    )
    security = sasl(SecretReference(file="/etc/kafka-user/password"))
    env = job_environment(
        job,
        {"clicks": make_log("clicks")},
        {},
        revision=1,
        checkpoint_root="/ckpt",
        kafka_security=security,
    )
    assert KafkaSecurity.model_validate_json(env[SECURITY_VARIABLE]) == security
    plain = job_environment(
        job, {"clicks": make_log("clicks")}, {}, revision=1, checkpoint_root="/c"
    )
    assert SECURITY_VARIABLE not in plain
