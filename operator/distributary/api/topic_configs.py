"""The type and range of each topic config a Log may set, as Kafka 4 declares them.

A value Kafka would refuse is refused here, where `distributary validate` and the operator's
condition can name the Log, the key and the range, instead of surfacing later as a broker error
(or, through a topic operator, as a topic that never becomes ready). What only the cluster knows
(a broker whose own settings refuse a value) is left to the cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

INT_MAX: Final = 2**31 - 1
LONG_MAX: Final = 2**63 - 1

Kind = Literal["int", "long", "double", "boolean", "choice", "replicas"]


@dataclass(frozen=True)
class ConfigType:
    """A config's type and, for numbers, its range; for a choice, its values."""

    kind: Kind
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        """The type in words, as a message says it."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "boolean":
            return "true or false (quoted in YAML: 'true')"
        if self.kind == "replicas":
            return "'*', or partition:broker pairs such as 0:101,1:102"
        kind = "a number" if self.kind == "double" else "a whole number"
        return f"{kind} from {_number(self.low)} to {_number(self.high)}"


def _number(value: float | None) -> str:
    return str(int(value)) if value is not None and value == int(value) else str(value)


def _int(low: int, high: int = INT_MAX) -> ConfigType:
    return ConfigType("int", low, high)


def _long(low: int, high: int = LONG_MAX) -> ConfigType:
    return ConfigType("long", low, high)


_BOOLEAN = ConfigType("boolean")
_REPLICAS = ConfigType("replicas")

# Every key of `log.KAFKA_TOPIC_CONFIGS` but cleanup.policy, retention.ms and retention.bytes,
# which have fields of their own and are never read from `config`.
TOPIC_CONFIG_TYPES: Final[dict[str, ConfigType]] = {
    "compression.type": ConfigType(
        "choice", choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
    ),
    "compression.gzip.level": ConfigType("choice", choices=("-1", *map(str, range(1, 10)))),
    "compression.lz4.level": _int(1, 17),
    "compression.zstd.level": _int(-131072, 22),
    "delete.retention.ms": _long(0),
    "file.delete.delay.ms": _long(0),
    "flush.messages": _long(1),
    "flush.ms": _long(0),
    "follower.replication.throttled.replicas": _REPLICAS,
    "index.interval.bytes": _int(0),
    "leader.replication.throttled.replicas": _REPLICAS,
    "local.retention.bytes": _long(-2),
    "local.retention.ms": _long(-2),
    "max.compaction.lag.ms": _long(1),
    "max.message.bytes": _int(0),
    "message.timestamp.after.max.ms": _long(0),
    "message.timestamp.before.max.ms": _long(0),
    "message.timestamp.type": ConfigType("choice", choices=("CreateTime", "LogAppendTime")),
    "min.cleanable.dirty.ratio": ConfigType("double", 0, 1),
    "min.compaction.lag.ms": _long(0),
    "min.insync.replicas": _int(1),
    "preallocate": _BOOLEAN,
    "remote.storage.enable": _BOOLEAN,
    "remote.log.copy.disable": _BOOLEAN,
    "remote.log.delete.on.disable": _BOOLEAN,
    "segment.bytes": _int(14),
    "segment.index.bytes": _int(4),
    "segment.jitter.ms": _long(0),
    "segment.ms": _long(1),
    "unclean.leader.election.enable": _BOOLEAN,
    "message.downconversion.enable": _BOOLEAN,
}

_WHOLE = re.compile(r"-?[0-9]{1,19}")
_DECIMAL = re.compile(r"-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")
_REPLICA_LIST = re.compile(r"\*|[0-9]+:[0-9]+(\s*,\s*[0-9]+:[0-9]+)*|")


def _fits(kind: ConfigType, text: str) -> bool:
    if kind.kind in ("int", "long", "double"):
        pattern = _WHOLE if kind.kind != "double" else _DECIMAL
        if pattern.fullmatch(text) is None:
            return False
        number = float(text) if kind.kind == "double" else int(text)
        low = kind.low if kind.low is not None else -float("inf")
        high = kind.high if kind.high is not None else float("inf")
        return low <= number <= high
    if kind.kind == "boolean":
        return text.lower() in ("true", "false")
    if kind.kind == "choice":
        return text in kind.choices
    return _REPLICA_LIST.fullmatch(text) is not None


def config_value_problem(key: str, value: str | int) -> str | None:
    """What Kafka would refuse in `value` for topic config `key`, or None. Keys without a type
    here (unknown ones) are left to the check of keys."""
    kind = TOPIC_CONFIG_TYPES.get(key)
    if kind is None:
        return None
    if _fits(kind, str(value).strip()):
        return None
    return f"config {key}: {value!r} is not {kind.describe()}, as Kafka requires"
