"""Opening connections the model describes: secrets resolved late, files read, failures named.

`plan.access.kafka_connection` says how to connect and where each secret is; this module does what
that needs I/O for. It reads a client properties file, resolves a password from its reference at the
moment a client is built (so it lives only in that client's settings), reads a client key for Java
clients, and probes a cluster with the settings so that a wrong password or an untrusted certificate
is reported within seconds, naming what to fix, instead of as a timeout half a minute later.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

# confluent_kafka.admin re-exports these without declaring them; mypy wants their home.
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from distributary.errors import DistributaryError
from distributary.kafka.cluster import client_config, kafka_error, result_within
from distributary.plan.access.kafka_connection import (
    KafkaConfigError,
    KafkaSecurity,
    SecretReference,
    parse_properties,
    password_in_properties,
    security_from_properties,
)

SCRAM_ITERATIONS = 4096  # Kafka's minimum


class KafkaConnectionError(DistributaryError, RuntimeError):
    """A cluster that refused the connection (credentials, certificates: `refused`) or did
    not answer."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


def read_properties_file(path: Path) -> tuple[KafkaSecurity, str | None]:
    """The model and bootstrap servers of a Java client properties file (what
    `kafka-console-producer --command-config` takes)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise KafkaConfigError(
            f"cannot read the Kafka client properties {path}: {exc.strerror}: check --kafka-config"
        ) from None
    return security_from_properties(parse_properties(text), str(path.resolve()))


def resolve_secret(reference: SecretReference, environ: Mapping[str, str] | None = None) -> str:
    """The secret `reference` points at; a KafkaConfigError naming the reference if it is not
    there (the message never holds the secret)."""
    env = os.environ if environ is None else environ
    if reference.env:
        value = env.get(reference.env)
        if not value:
            raise KafkaConfigError(
                f"the Kafka password is to come from environment variable {reference.env}, "
                "which is not set: set it (in a cluster, from the Secret holding the password)"
            )
        return value
    path = Path(reference.file or reference.properties_file or "")
    try:
        text = path.read_text()
    except OSError as exc:
        raise KafkaConfigError(
            f"cannot read the Kafka password from {reference.describe()}: {exc.strerror}: "
            "check that the file (or the mounted Secret) is there and readable"
        ) from None
    if reference.file:
        return text.rstrip("\r\n")
    password = password_in_properties(parse_properties(text))
    if password is None:
        raise KafkaConfigError(
            f"{path} holds no password (sasl.jaas.config password=... or sasl.password)"
        )
    return password


def password(security: KafkaSecurity, environ: Mapping[str, str] | None = None) -> str | None:
    """The SASL password of `security`, resolved; None without SASL."""
    if not security.sasl or security.sasl_password is None:
        return None
    return resolve_secret(security.sasl_password, environ)


def client_settings(
    security: KafkaSecurity | None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """librdkafka settings (the `client` of every adapter here) for `security`; none for
    plaintext, so a plaintext cluster sees the same clients as before."""
    if security is None or security.protocol == "PLAINTEXT":
        return {}
    return security.librdkafka(password(security, environ))


def spark_options(
    security: KafkaSecurity | None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Options of Spark's Kafka source and sink (`kafka.`-prefixed Java client properties).
    They reach the executors inside the query, so nothing needs to be on their disks but
    what the model names (a client key and certificate in two files travel as text)."""
    if security is None or security.protocol == "PLAINTEXT":
        return {}
    split = security.client_certificate and (
        security.ssl_certificate_location != security.ssl_key_location
    )
    client_pem = client_key_and_certificate(security) if split else None
    properties = security.java_properties(password(security, environ), client_pem)
    return {f"kafka.{key}": value for key, value in properties.items()}


def client_key_and_certificate(security: KafkaSecurity) -> tuple[str, str]:
    """The client's key and certificate chain, read from their PEM files, for Java clients
    (which take them inline when they are not in one file)."""
    certificate, key = security.ssl_certificate_location, security.ssl_key_location
    assert certificate
    assert key
    try:
        key_pem, cert_pem = Path(key).read_text(), Path(certificate).read_text()
    except OSError as exc:
        raise KafkaConfigError(
            f"cannot read the Kafka client key or certificate ({exc.filename}): {exc.strerror}"
        ) from None
    if "BEGIN PRIVATE KEY" not in key_pem:
        raise KafkaConfigError(
            f"{key} is not an unencrypted PKCS#8 key (BEGIN PRIVATE KEY), as Java clients need: "
            f"convert it with openssl pkcs8 -topk8 -nocrypt -in {key} -out KEY.pem"
        )
    return key_pem.strip(), cert_pem.strip()


# librdkafka's codes for a refused connection: nothing gets better by waiting for these.
_REFUSED = {
    KafkaError._AUTHENTICATION: "refused the credentials",
    KafkaError.SASL_AUTHENTICATION_FAILED: "refused the credentials",
    KafkaError._SSL: "failed the TLS handshake",
}
# ...and words of a transport error that is a TLS refusal (the broker's alert, e.g. no client
# certificate where one is required), not a broker that is away.
_TLS_REFUSALS = ("SSL routines", "certificate", "handshake")


def refusal(error: KafkaError) -> str | None:
    """What a connection error says the cluster did, when it refused the connection for good
    (credentials, certificates); None for one that may pass (a broker not up yet)."""
    if error.code() in _REFUSED:
        return _REFUSED[error.code()]
    if error.code() == KafkaError._TRANSPORT and any(w in error.str() for w in _TLS_REFUSALS):
        return "failed the TLS handshake"
    return None


def check_connection(
    bootstrap_servers: str,
    security: KafkaSecurity | None,
    *,
    timeout: float = 15.0,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Connect with `security` and ask for metadata; a KafkaConnectionError within seconds
    saying what is wrong and what to fix when the cluster refuses the credentials or the
    certificates, or does not answer within `timeout` seconds."""
    refused: list[KafkaError] = []
    settings = client_settings(security, environ)
    config: dict[str, Any] = {**client_config(bootstrap_servers, **settings)}
    config["error_cb"] = refused.append
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if admin.list_topics(timeout=1.0).brokers:
                return
        except KafkaException as exc:
            refused.append(kafka_error(exc))
        admin.poll(0)  # serves error_cb
        stop = next((e for e in refused if refusal(e) is not None), None)
        if stop is not None:
            message = refusal_message(bootstrap_servers, security, stop)
            raise KafkaConnectionError(message, refused=True)
    raise KafkaConnectionError(
        f"Kafka at {bootstrap_servers} did not answer within {timeout:.0f}s "
        f"({_described(security)}): check the bootstrap servers and that the listener there "
        "speaks this security protocol"
    )


def _described(security: KafkaSecurity | None) -> str:
    return security.describe() if security is not None else "PLAINTEXT"


def refusal_message(
    bootstrap_servers: str, security: KafkaSecurity | None, error: KafkaError
) -> str:
    """What a refused connection means and what to fix, from librdkafka's error."""
    said = error.str()
    what = refusal(error) or "refused the connection"
    if what == "refused the credentials" and security is not None and security.sasl:
        where = security.sasl_password.describe() if security.sasl_password else "the settings"
        fix = (
            f"check the user {security.sasl_username!r}, its password ({where}) and the "
            f"mechanism {security.sasl_mechanism} against the brokers' SASL users"
        )
    elif security is not None and security.tls:
        fix = (
            "check that ssl.truststore.location (the CA) signs the brokers' certificates and, "
            "for a listener that requires client certificates, that the key store holds a "
            "certificate the brokers trust"
        )
    else:
        fix = "check that the listener there speaks this security protocol"
    return f"Kafka at {bootstrap_servers} {what} ({_described(security)}): {said}: {fix}"


def add_scram_user(
    bootstrap_servers: str,
    security: KafkaSecurity | None,
    user: str,
    secret: str,
    mechanism: str = "SCRAM-SHA-512",
    timeout: float = 30.0,
) -> None:
    """Create (or change) the SCRAM credentials of `user` on the cluster, connecting with
    `security`; the password travels only inside that connection."""
    chosen = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256}.get(
        mechanism, ScramMechanism.SCRAM_SHA_512
    )
    admin = AdminClient(client_config(bootstrap_servers, **client_settings(security)))
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(chosen, SCRAM_ITERATIONS), secret.encode()
    )
    futures = admin.alter_user_scram_credentials([upsert], request_timeout=timeout)
    try:
        for future in futures.values():
            result_within(future, timeout)
    except KafkaException as exc:
        raise KafkaConnectionError(
            f"Kafka at {bootstrap_servers} did not create the SCRAM user {user!r}: "
            f"{kafka_error(exc).str()}"
        ) from None
