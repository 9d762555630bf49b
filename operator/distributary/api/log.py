"""The `Log` kind: a named, ordered, retained sequence of records (a Kafka topic).

The spec says what the log is (its topic, partitions, retention, record format), never how to
reach it: a Log reconciled through Strimzi and one reconciled through the Admin API look the same.
Topic configs that have a field of their own (retention, compaction) may not also appear in
`config`, so there is one place to read each setting.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from distributary.api.common import (
    GROUP_VERSION,
    HANDLED_SPEC,
    ApiModel,
    ColumnName,
    Conditions,
    Duration,
    ObjectMeta,
    StatusModel,
    TopicName,
    cel,
    duration_ms,
    validations,
)
from distributary.api.names import (
    CLAIMS_SUFFIX,
    DEAD_LETTER_SUFFIX,
    INTERNAL_TOPIC_PREFIX,
    MAX_TOPIC_NAME,
    PROGRESS_SUFFIX,
    PROGRESS_TOPIC,
    PROJECT_TOPIC_PREFIX,
    reserved_topic,
    shown,
    topic_names,
    topic_problem,
)
from distributary.api.topic_configs import LONG_MAX, config_value_problem

# Topic-level configs Kafka 4 accepts. Keys outside this set are refused with a suggestion.
KAFKA_TOPIC_CONFIGS = frozenset(
    {
        "cleanup.policy",
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "delete.retention.ms",
        "file.delete.delay.ms",
        "flush.messages",
        "flush.ms",
        "follower.replication.throttled.replicas",
        "index.interval.bytes",
        "leader.replication.throttled.replicas",
        "local.retention.bytes",
        "local.retention.ms",
        "max.compaction.lag.ms",
        "max.message.bytes",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.type",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "preallocate",
        "remote.storage.enable",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.index.bytes",
        "segment.jitter.ms",
        "segment.ms",
        "unclean.leader.election.enable",
        "message.downconversion.enable",
    }
)
# Configs owned by dedicated spec fields.
MANAGED_TOPIC_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes")

BYTES_PATTERN = r"^[0-9]{1,19}([KMGTP]i?)?$"
_BYTE_UNITS = {
    "": 1,
    "K": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "P": 1000**5,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "Pi": 1024**5,
}


# The largest size in the largest unit that Kafka's retention.bytes (a Java long) holds.
_LARGEST_RETENTION = f"{LONG_MAX // _BYTE_UNITS['Pi']}Pi"


def quantity_bytes(value: int | str) -> int:
    """Bytes in a size such as 1073741824, `500Mi` or `10G` (Kubernetes quantity suffixes)."""
    text = str(value)
    digits = text.rstrip("KMGTPi")
    unit = text[len(digits) :]
    if not digits.isdigit() or unit not in _BYTE_UNITS:
        raise ValueError(f"{value!r} is not a size: write bytes, or a number with Ki, Mi, Gi, Ti")
    return int(digits) * _BYTE_UNITS[unit]


class Retention(ApiModel):
    """How long records are kept. Unset fields leave the broker's default in force."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!(has(self.forever) && self.forever) || (!has(self.time) && !has(self.bytes))",
                "retention.forever keeps everything: remove retention.time and retention.bytes, "
                "or set forever to false",
            ),
        )
    )

    time: Duration | None = Field(
        default=None, description="Keep records at least this long, e.g. 7d or 12h."
    )
    bytes: (
        Annotated[str, StringConstraints(max_length=24, pattern=BYTES_PATTERN)]
        | Annotated[int, Field(ge=0)]
        | None
    ) = Field(
        default=None,
        description="Keep at most this much per partition, e.g. 10Gi or 1073741824; at most "
        "8191Pi (a Java long of bytes).",
        json_schema_extra={"x-kubernetes-int-or-string": True},
    )
    forever: bool = Field(default=False, description="Never delete records by age or size.")

    @model_validator(mode="after")
    def _check(self) -> Retention:
        if self.forever and (self.time is not None or self.bytes is not None):
            raise ValueError(
                "retention.forever keeps everything: remove retention.time and retention.bytes, "
                "or set forever to false"
            )
        if self.time is not None:
            duration_ms(self.time)
        if self.bytes is not None and quantity_bytes(self.bytes) > LONG_MAX:
            raise ValueError(
                f"bytes: {self.bytes!r} is {quantity_bytes(self.bytes):,} bytes, more "
                f"than Kafka's retention.bytes holds (a Java long: at most {LONG_MAX} bytes): "
                f"write at most {_LARGEST_RETENTION} (or {LONG_MAX}), or set retention.forever: "
                "true to keep everything"
            )
        return self

    def topic_configs(self) -> dict[str, str]:
        """The Kafka configs this retention stands for."""
        if self.forever:
            return {"retention.ms": "-1", "retention.bytes": "-1"}
        configs: dict[str, str] = {}
        if self.time is not None:
            configs["retention.ms"] = str(duration_ms(self.time))
        if self.bytes is not None:
            configs["retention.bytes"] = str(quantity_bytes(self.bytes))
        return configs


class LogSpec(ApiModel):
    """What a log is: its topic, partitions, retention and record format."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.topicName) == has(oldSelf.topicName)",
                "topicName cannot be added or removed after creation: a Log's topic never changes; "
                "create a new Log for a new topic",
                field_path=".topicName",
            ),
        )
    )

    topic_name: TopicName | None = Field(
        default=None,
        description="The Kafka topic; metadata.name when unset. Immutable.",
        json_schema_extra=validations(
            cel("self == oldSelf", "topicName is immutable: create a new Log for a new topic"),
            cel(
                f"!self.startsWith('{INTERNAL_TOPIC_PREFIX}')",
                "topicName may not begin with '__': such topics are Kafka's own "
                "(__consumer_offsets, __transaction_state); choose another name",
            ),
            cel(
                f"self != '{PROGRESS_TOPIC}' && !(self.startsWith('{PROJECT_TOPIC_PREFIX}') && "
                f"self.endsWith('{DEAD_LETTER_SUFFIX}'))",
                f"topicName may not be {PROGRESS_TOPIC} or distributary.<namespace>.<name>.dlq: "
                "Distributary writes those topics itself; choose another name",
            ),
            cel(
                f"!(self.startsWith('{PROJECT_TOPIC_PREFIX}') && "
                f"(self.endsWith('{PROGRESS_SUFFIX}') || self.endsWith('{CLAIMS_SUFFIX}')))",
                "topicName may not be distributary.<installation>.progress or "
                "distributary.<installation>.claims: Distributary keeps its progress and who owns "
                "each topic there; choose another name",
            ),
        ),
    )
    partitions: Annotated[int, Field(ge=1, le=10000)] = Field(
        default=3,
        description="Partitions of the topic. May be increased, never decreased.",
        json_schema_extra=validations(
            cel(
                "self >= oldSelf",
                "partitions can only be increased: Kafka cannot remove "
                "partitions; create a new Log to shrink",
            ),
        ),
    )
    replicas: Annotated[int, Field(ge=1, le=32)] | None = Field(
        default=None,
        description="Replicas of each partition; the broker's default when unset. Changes only "
        "where the topic backend can reassign partitions.",
    )
    retention: Retention | None = Field(default=None, description="How long records are kept.")
    compaction: bool = Field(
        default=False,
        description=(
            "Keep the latest record per key (cleanup.policy=compact): a changelog, a table."
        ),
    )
    config: dict[str, Annotated[str, StringConstraints(max_length=1024)] | int] = Field(
        default_factory=dict,
        max_length=64,
        description="Other Kafka topic configs, e.g. {min.insync.replicas: 2}. Retention and "
        "compaction have fields of their own.",
        json_schema_extra={
            "additionalProperties": {"x-kubernetes-int-or-string": True},
            **validations(
                cel(
                    "self.all(k, k != 'cleanup.policy' && k != 'retention.ms' && "
                    "k != 'retention.bytes')",
                    "config may not set cleanup.policy, retention.ms or retention.bytes: use the "
                    "compaction and retention fields",
                ),
            ),
        },
    )
    format: Literal["json"] = Field(
        default="json", description="How record values are encoded: json (more formats to come)."
    )
    record_schema: Annotated[str, StringConstraints(max_length=65536)] | None = Field(
        default=None,
        alias="schema",
        description="The value's columns as a Spark DDL string, e.g. 'user STRING, ts TIMESTAMP'.",
    )
    key: list[ColumnName] | None = Field(
        default=None,
        max_length=32,
        description="Columns of the value that form the record key (JSON-encoded).",
    )
    deletion_policy: Literal["Retain", "Delete"] = Field(
        default="Retain",
        description="Retain (default) keeps the topic when the Log is deleted; Delete removes it.",
    )

    @field_validator("topic_name")
    @classmethod
    def _check_topic_name(cls, topic: str | None) -> str | None:
        reason = reserved_topic(topic) if topic is not None else None
        if reason is not None:
            raise ValueError(f"{topic!r} {reason}: choose another topic name")
        return topic

    @model_validator(mode="after")
    def _check_config(self) -> LogSpec:
        for key in self.config:
            if key in MANAGED_TOPIC_CONFIGS:
                raise ValueError(
                    f"config may not set {key}: use the compaction and retention fields"
                )
            if key not in KAFKA_TOPIC_CONFIGS:
                near = difflib.get_close_matches(key, sorted(KAFKA_TOPIC_CONFIGS), n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise ValueError(f"config key {key!r} is not a Kafka topic config{hint}")
            problem = config_value_problem(key, self.config[key])
            if problem is not None:
                raise ValueError(problem)
        return self

    def topic_configs(self) -> dict[str, str]:
        """Every topic config this spec asks for, as Kafka strings."""
        configs = {name: str(value) for name, value in self.config.items()}
        if self.retention is not None:
            configs.update(self.retention.topic_configs())
        if self.compaction:
            retention = self.retention
            deletes = (
                retention is not None
                and not retention.forever
                and (retention.time is not None or retention.bytes is not None)
            )
            configs["cleanup.policy"] = "compact,delete" if deletes else "compact"
        return configs


class Subscriber(StatusModel):
    """A view, job or Sink reading this log, with its position and lag."""

    kind: str = Field(description="DerivedView, StreamJob or Sink.")
    name: str = Field(description="Its name.")
    revision: int | None = Field(default=None, description="The revision reading.")
    consumer_group: str | None = Field(default=None, description="Its Kafka consumer group.")
    position: dict[str, int] = Field(
        default_factory=dict, description="Next offset to read, per partition."
    )
    lag: int | None = Field(default=None, description="Records not yet read.")


class LogStatus(StatusModel):
    """The log as last observed."""

    conditions: Conditions
    observed_generation: int | None = Field(default=None, description="The generation observed.")
    handled_spec: str | None = Field(default=None, description=HANDLED_SPEC)
    topic_name: str | None = Field(
        default=None,
        description="The topic readers follow (for a view's output: the serving revision's topic).",
    )
    partitions: int | None = Field(default=None, description="Partitions the topic has.")
    start_offsets: dict[str, int] = Field(
        default_factory=dict, description="First retained offset per partition."
    )
    end_offsets: dict[str, int] = Field(
        default_factory=dict, description="Next offset to be written per partition."
    )
    records: int | None = Field(
        default=None,
        description="Offsets retained (end - start): the records, and in a topic written with "
        "transactions (a view's output) one commit marker per transaction and partition too.",
    )
    subscribers: list[Subscriber] = Field(
        default_factory=list, description="Views and jobs reading this log."
    )
    managed_configs: list[str] = Field(
        default_factory=list,
        description="Topic configs the operator set, so it can unset those the spec drops.",
    )


class Log(ApiModel):
    """A named log: an append-only, totally ordered, retained sequence of records."""

    api_version: Literal["distributary.dev/v1alpha1"] = Field(default=GROUP_VERSION)
    kind: Literal["Log"] = "Log"
    metadata: ObjectMeta
    spec: LogSpec = Field(default_factory=LogSpec)
    status: LogStatus | None = None

    @model_validator(mode="after")
    def _check_name_as_topic(self) -> Log:
        # Without spec.topicName the name is the topic; a Kubernetes name may be 253 characters.
        name = self.metadata.name
        problem = topic_problem(name) if self.spec.topic_name is None else None
        if problem is not None:
            raise ValueError(
                f"metadata.name: {shown(name)} is the Log's topic when spec.topicName is unset, "
                f"and {problem}: set spec.topicName to a topic name of at most "
                f"{MAX_TOPIC_NAME} characters that names no internal topic"
            )
        return self

    @property
    def topic(self) -> str:
        """The topic this Log names: `spec.topicName`, else its name as the operator's topic
        naming makes it (`api.names.use_topic_names`; by default the resource's name)."""
        if self.spec.topic_name:
            return self.spec.topic_name
        return topic_names().topic(self.metadata.namespace, self.metadata.name)


def log_manifest(name: str, namespace: str, spec: LogSpec, **metadata: Any) -> dict[str, Any]:
    """A Log as a Kubernetes manifest (used for a view's child output log)."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Log",
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": spec.to_yaml_dict(),
    }
