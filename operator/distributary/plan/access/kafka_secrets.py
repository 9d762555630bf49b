"""Kafka credentials for Spark drivers and executors in a cluster: Secrets referenced, never read.

A view's runner and a job's driver resolve their Kafka password and read their TLS files where
they run (`kafka.connection`), from the references their connection model holds. In a cluster
those references must lead to the same Secrets the operator's own credentials come from: the
password as an environment variable filled from a Secret's key, the CA and the client
certificate as Secrets mounted where the model says. This module adds exactly that
to a SparkApplication, and rewrites the model the runners get so that its references are those
the pods will have. No secret value passes through the operator: a SparkApplication, its
arguments and its environment hold names of Secrets, keys and paths.

Secrets are namespaced: each pipeline namespace needs Secrets of these names (a copy of the
operator's, or a Strimzi `KafkaUser`'s own there).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distributary.plan.access.kafka_connection import (
    PASSWORD_VARIABLE,
    KafkaSecurity,
    SecretReference,
)

KAFKA_CA_MOUNT = "/etc/distributary/kafka/ca"
KAFKA_CLIENT_MOUNT = "/etc/distributary/kafka/client"

# The operator's environment that names the Secrets, each as NAME or NAME/KEY.
PASSWORD_SECRET_VARIABLE = "DISTRIBUTARY_KAFKA_SASL_SECRET"
CA_SECRET_VARIABLE = "DISTRIBUTARY_KAFKA_SSL_CA_SECRET"
CLIENT_SECRET_VARIABLE = "DISTRIBUTARY_KAFKA_SSL_CLIENT_SECRET"
SECRET_ENVIRONMENT = (PASSWORD_SECRET_VARIABLE, CA_SECRET_VARIABLE, CLIENT_SECRET_VARIABLE)


@dataclass(frozen=True)
class KafkaSecretMounts:
    """The Secrets (in each pipeline namespace) that give drivers and executors their Kafka
    credentials: the SASL password's Secret and key, the CA's Secret, the client certificate's
    Secret (mutual TLS). None: the pods get none of that kind."""

    password_secret: str | None = None
    password_key: str = "password"
    ca_secret: str | None = None
    client_secret: str | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> KafkaSecretMounts | None:
        """The mounts the operator's DISTRIBUTARY_KAFKA_*_SECRET variables name; None if none."""
        password = environ.get(PASSWORD_SECRET_VARIABLE) or ""
        name, _, key = password.partition("/")
        mounts = cls(
            password_secret=name or None,
            password_key=key or "password",
            ca_secret=environ.get(CA_SECRET_VARIABLE) or None,
            client_secret=environ.get(CLIENT_SECRET_VARIABLE) or None,
        )
        return mounts if mounts != cls() else None


def for_pods(security: KafkaSecurity, mounts: KafkaSecretMounts) -> KafkaSecurity:
    """`security` with the references the pods will have: the password in the variable the
    Secret fills, the CA and the client files under the Secrets' mounts (same file names)."""
    update: dict[str, Any] = {}
    if security.sasl and mounts.password_secret:
        update["sasl_password"] = SecretReference(env=PASSWORD_VARIABLE)
    if security.ssl_ca_location and mounts.ca_secret:
        update["ssl_ca_location"] = _under(KAFKA_CA_MOUNT, security.ssl_ca_location)
    if security.ssl_certificate_location and security.ssl_key_location and mounts.client_secret:
        update["ssl_certificate_location"] = _under(
            KAFKA_CLIENT_MOUNT, security.ssl_certificate_location
        )
        update["ssl_key_location"] = _under(KAFKA_CLIENT_MOUNT, security.ssl_key_location)
    return security.model_copy(update=update)


def _under(mount: str, path: str) -> str:
    return posixpath.join(mount, posixpath.basename(path))


def with_kafka_secrets(manifest: Mapping[str, Any], mounts: KafkaSecretMounts) -> dict[str, Any]:
    """The SparkApplication `manifest` with its driver and executors given the Kafka Secrets
    of `mounts`: the password as an environment variable from a Secret key
    (`envSecretKeyRefs`), the CA and the client certificate as Secrets mounted read-only
    (`secrets`). The Spark operator's controller turns both into spark-submit's own
    `secretKeyRef` and `secrets` settings, so they reach the pods without its webhook, as
    `envVars` do. Applying it twice changes nothing."""
    spec = dict(manifest["spec"])
    mounted = [
        {"name": secret, "path": path, "secretType": "Generic"}
        for secret, path in (
            (mounts.ca_secret, KAFKA_CA_MOUNT),
            (mounts.client_secret, KAFKA_CLIENT_MOUNT),
        )
        if secret
    ]
    paths = (KAFKA_CA_MOUNT, KAFKA_CLIENT_MOUNT)
    for role in ("driver", "executor"):
        pod = dict(spec[role])
        refs = {
            k: v for k, v in (pod.get("envSecretKeyRefs") or {}).items() if k != PASSWORD_VARIABLE
        }
        if mounts.password_secret:
            refs[PASSWORD_VARIABLE] = {"name": mounts.password_secret, "key": mounts.password_key}
        if refs:
            pod["envSecretKeyRefs"] = refs
        secrets = [m for m in pod.get("secrets") or [] if m.get("path") not in paths]
        if secrets or mounted:
            pod["secrets"] = [*secrets, *mounted]
        spec[role] = pod
    return {**manifest, "spec": spec}
