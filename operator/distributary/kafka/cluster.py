"""Reaching a Kafka cluster: client configuration, a readiness probe, bounded waits.

Every client Distributary makes starts from `client_config`; TLS and SASL settings reach it as a
`client` mapping rendered by `kafka.connection` from the one connection model. confluent-kafka
answers admin requests with futures that wait forever unless told otherwise; `result_within` is
how every adapter waits on them.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient


def client_config(
    bootstrap_servers: str, **extra: str | int | float | bool
) -> dict[str, str | int | float | bool]:
    """The configuration shared by every client of one cluster."""
    # librdkafka logs each refused connection (level 3) every 50 ms while a broker is down; the
    # callers report unreachable brokers themselves, once, through the errors they get.
    return {"bootstrap.servers": bootstrap_servers, "log_level": 2, **extra}


# What a partition answers until its leader is elected (a topic just made, a broker just
# started): not always flagged retriable by librdkafka, and worth asking again.
NO_LEADER_YET = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})


def cluster_ready(
    bootstrap_servers: str, timeout: float = 2.0, client: Mapping[str, str] | None = None
) -> bool:
    """Whether a broker answers a metadata request within `timeout` seconds; `client` adds
    librdkafka settings (TLS, SASL)."""
    admin = AdminClient(client_config(bootstrap_servers, **(client or {})))
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(metadata.brokers)


def result_within(future: concurrent.futures.Future[Any], timeout: float) -> Any:
    """The future's result; KafkaException(_TIMED_OUT) when none came within `timeout` seconds
    plus a margin that lets the client's own request timeout fire first."""
    try:
        return future.result(timeout=timeout + 5.0)
    except concurrent.futures.TimeoutError:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "no answer")) from None


def kafka_error(exc: KafkaException) -> KafkaError:
    """The KafkaError a KafkaException carries (one made from its text if it carries none)."""
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else KafkaError(KafkaError._FAIL, str(exc))
