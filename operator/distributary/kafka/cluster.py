"""Reaching a Kafka cluster: client configuration and a readiness probe.

Every client Distributary makes starts from `client_config`, so connection settings (and later
TLS and SASL) are decided in one place.
"""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient


def client_config(
    bootstrap_servers: str, **extra: str | int | float | bool
) -> dict[str, str | int | float | bool]:
    """The configuration shared by every client of one cluster."""
    return {"bootstrap.servers": bootstrap_servers, "log_level": 3, **extra}


def cluster_ready(bootstrap_servers: str, timeout: float = 2.0) -> bool:
    """Whether a broker answers a metadata request within `timeout` seconds."""
    admin = AdminClient(client_config(bootstrap_servers))
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(metadata.brokers)
