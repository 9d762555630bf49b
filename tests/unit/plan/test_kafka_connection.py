"""The Kafka connection model: read from a client properties file and from the operator's
environment, rendered for librdkafka and for Java (Spark's Kafka source and sink), and never
holding a password, only where one is."""

from __future__ import annotations

import json

import pytest

from distributary.plan.access.kafka_connection import (
    KafkaConfigError,
    KafkaSecurity,
    SecretReference,
    jaas_config,
    jaas_options,
    parse_properties,
    password_in_properties,
    security_from_environment,
    security_from_properties,
)

SASL_FILE = """\
# as kafka-console-producer --command-config takes it
bootstrap.servers=kafka-0:9093,kafka-1:9093
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="alice" \\
    password="s3\\\\"cret";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/kafka/ca.crt
"""

MTLS_FILE = """\
security.protocol: SSL
ssl.truststore.type = PEM
ssl.truststore.location = /etc/kafka/ca.crt
ssl.keystore.type=PEM
ssl.keystore.location=/etc/kafka/client.pem
! a comment of the other kind
"""


def sasl() -> KafkaSecurity:
    return KafkaSecurity(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="alice",
        sasl_password=SecretReference(env="KAFKA_PASSWORD"),
        ssl_ca_location="/ca.pem",
    )


def test_a_properties_file_is_read_as_java_reads_it() -> None:
    properties = parse_properties(SASL_FILE)
    assert properties["security.protocol"] == "SASL_SSL"
    assert properties["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="s3\\"cret";'
    )
    # Java's properties unescaping first, then JAAS's quoting.
    assert password_in_properties(properties) == 's3"cret'


def test_a_sasl_ssl_file_keeps_its_password_where_it_is() -> None:
    security, servers = security_from_properties(parse_properties(SASL_FILE), "/cfg/client.props")
    assert servers == "kafka-0:9093,kafka-1:9093"
    assert security == KafkaSecurity(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="alice",
        sasl_password=SecretReference(properties_file="/cfg/client.props"),
        ssl_ca_location="/etc/kafka/ca.crt",
    )
    assert "cret" not in security.model_dump_json()


def test_an_mtls_file_names_one_pem_key_store_for_key_and_certificate() -> None:
    security, servers = security_from_properties(parse_properties(MTLS_FILE), "/m.props")
    assert servers is None
    assert security.protocol == "SSL"
    assert security.ssl_certificate_location == security.ssl_key_location == "/etc/kafka/client.pem"
    assert security.java_properties(None) == {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/kafka/ca.crt",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/etc/kafka/client.pem",
    }


def test_librdkafka_gets_the_resolved_password_and_the_pem_files() -> None:
    assert sasl().librdkafka("pw") == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "pw",
        "ssl.ca.location": "/ca.pem",
    }
    mtls = KafkaSecurity(
        protocol="SSL",
        ssl_certificate_location="/c.pem",
        ssl_key_location="/k.pem",
        ssl_verify_hostname=False,
    )
    assert mtls.librdkafka(None) == {
        "security.protocol": "SSL",
        "ssl.certificate.location": "/c.pem",
        "ssl.key.location": "/k.pem",
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_java_gets_a_jaas_login_with_the_mechanisms_module() -> None:
    rendered = sasl().java_properties('p"w')
    assert rendered == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="p\\"w";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/ca.pem",
    }
    assert jaas_options(rendered["sasl.jaas.config"]) == {"username": "alice", "password": 'p"w'}
    plain = jaas_config("PLAIN", "bob", "x")
    assert plain.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")


def test_an_unresolved_password_is_refused_naming_where_it_should_come_from() -> None:
    with pytest.raises(KafkaConfigError, match="environment variable KAFKA_PASSWORD"):
        sasl().librdkafka(None)


def test_the_model_describes_itself_without_secrets() -> None:
    assert sasl().describe() == "SASL_SSL, SCRAM-SHA-512 as 'alice', CA /ca.pem"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", "sasl.mechanism 'GSSAPI'"),
        ("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n", "needs a user and a password"),
        ("security.protocol=TLS\n", "security.protocol 'TLS' is not one of"),
        (
            "security.protocol=SSL\nssl.truststore.location=/t.jks\n",
            "ssl.truststore.type is JKS (the default); only PEM",
        ),
        ("security.protocol=SSL\nssl.key.password=x\n", "ssl.key.password is not supported"),
        (
            "security.protocol=SSL\nssl.certificate.location=/c.pem\n",
            "a client certificate needs its private key",
        ),
    ],
)
def test_a_file_that_cannot_work_is_refused_naming_the_setting(text: str, said: str) -> None:
    with pytest.raises(KafkaConfigError, match=r"Kafka client properties /f\.props: ") as raised:
        security_from_properties(parse_properties(text), "/f.props")
    assert said in str(raised.value)


def test_the_operators_environment_points_at_the_password_variable() -> None:
    env = {
        "DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "DISTRIBUTARY_KAFKA_SASL_MECHANISM": "scram-sha-256",
        "DISTRIBUTARY_KAFKA_SASL_USERNAME": "op",
        "DISTRIBUTARY_KAFKA_SASL_PASSWORD": "the-secret",
        "DISTRIBUTARY_KAFKA_SSL_CA_LOCATION": "/etc/ca/ca.crt",
    }
    security = security_from_environment(env)
    assert security.sasl_password == SecretReference(env="DISTRIBUTARY_KAFKA_SASL_PASSWORD")
    assert security.sasl_mechanism == "SCRAM-SHA-256"
    assert "the-secret" not in security.model_dump_json()
    with_file = security_from_environment(
        {**env, "DISTRIBUTARY_KAFKA_SASL_PASSWORD_FILE": "/etc/kafka-user/password"}
    )
    assert with_file.sasl_password == SecretReference(file="/etc/kafka-user/password")


def test_no_environment_is_plaintext_and_a_wrong_one_is_refused() -> None:
    assert security_from_environment({}) == KafkaSecurity()
    with pytest.raises(KafkaConfigError, match="DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL is 'tls'"):
        security_from_environment({"DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL": "tls"})
    with pytest.raises(KafkaConfigError, match=r"SASL_SSL needs sasl\.mechanism"):
        security_from_environment({"DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})


def test_a_secret_reference_names_exactly_one_place() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        SecretReference(env="A", file="/b")
    with pytest.raises(ValueError, match="exactly one"):
        SecretReference()
    assert json.loads(SecretReference(file="/p").model_dump_json(exclude_none=True)) == {
        "file": "/p"
    }
