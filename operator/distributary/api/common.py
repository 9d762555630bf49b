"""Types shared by the three kinds: names, conditions, Spark settings, starting positions.

Every model here is written so that two things fall out of it: validation of a resource read from a
file (pydantic) and the OpenAPI schema of the CRD (`api.crd`). A constraint is therefore declared
once, as a pydantic constraint or as a CEL rule attached with `cel(...)`, and a rule that CEL states
for the API server is mirrored by a pydantic validator so that `distributary validate` catches it
before `kubectl apply` does.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

API_GROUP = "distributary.dev"
API_VERSION = "v1alpha1"
GROUP_VERSION: Final = "distributary.dev/v1alpha1"

# A Kubernetes object name (RFC 1123 subdomain, as most kinds use).
KUBE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A Kafka topic name: letters, digits, '.', '_' and '-', at most 249 characters, not '.' or '..'.
TOPIC_NAME_PATTERN = r"^(\.{0,2}[a-zA-Z0-9_-]|\.\.\.)[a-zA-Z0-9._-]*$"
# A SQL identifier usable unquoted as a table alias in Spark SQL.
SQL_IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
# A duration as people write it in Kubernetes-land: 500ms, 30s, 5m, 2h, 7d, 1w.
DURATION_PATTERN = r"^[0-9]{1,9}(ms|s|m|h|d|w)$"
# Spark's own memory strings (Spark does not accept Kubernetes quantities such as 1Gi).
SPARK_MEMORY_PATTERN = r"^[1-9][0-9]{0,6}[kmgt]$"
# A CPU quantity as Kubernetes writes one in a pod's requests and limits: 250m, 0.5, 2.
CPU_QUANTITY_PATTERN = r"^([0-9]{1,3}(\.[0-9]{1,3})?|[1-9][0-9]{0,5}m)$"
# A condition reason, as metav1.Condition defines it.
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

KubeName = Annotated[
    str, StringConstraints(min_length=1, max_length=253, pattern=KUBE_NAME_PATTERN)
]
TopicName = Annotated[
    str, StringConstraints(min_length=1, max_length=249, pattern=TOPIC_NAME_PATTERN)
]
# maxLength bounds the cost the API server estimates for CEL rules over identifiers.
SqlIdentifier = Annotated[str, StringConstraints(max_length=128, pattern=SQL_IDENTIFIER_PATTERN)]
Duration = Annotated[str, StringConstraints(max_length=16, pattern=DURATION_PATTERN)]
SparkMemory = Annotated[str, StringConstraints(max_length=8, pattern=SPARK_MEMORY_PATTERN)]
CpuQuantity = Annotated[str, StringConstraints(max_length=8, pattern=CPU_QUANTITY_PATTERN)]
ColumnName = Annotated[str, StringConstraints(min_length=1, max_length=256)]

_DURATION_UNITS_MS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
}


def duration_ms(value: str) -> int:
    """Milliseconds in a duration string such as `30s` or `7d` (validated by `Duration`)."""
    match = re.fullmatch(r"([0-9]+)(ms|s|m|h|d|w)", value)
    if match is None:
        raise ValueError(
            f"{value!r} is not a duration: write a number and a unit (ms, s, m, h, d, w)"
        )
    return int(match.group(1)) * _DURATION_UNITS_MS[match.group(2)]


def cel(
    rule: str, message: str, *, field_path: str | None = None, reason: str | None = None
) -> dict[str, Any]:
    """One `x-kubernetes-validations` rule, for `json_schema_extra`."""
    entry: dict[str, Any] = {"rule": rule, "message": message}
    if field_path is not None:
        entry["fieldPath"] = field_path
    if reason is not None:
        entry["reason"] = reason
    return entry


def validations(*rules: dict[str, Any]) -> dict[str, Any]:
    """The `json_schema_extra` of a model or field that carries CEL rules."""
    return {"x-kubernetes-validations": list(rules)}


class ApiModel(BaseModel):
    """Base of every spec and status model: camelCase in YAML, unknown fields refused.

    Refusing unknown fields matters for files read by `distributary validate`/`run`: a misspelt
    field would otherwise be dropped without a word, as the API server prunes it.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
        validate_default=False,
    )

    def to_yaml_dict(self) -> dict[str, Any]:
        """The model as it is written in YAML: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class StatusModel(ApiModel):
    """Base of status models: the operator writes them, so unknown fields are kept, not refused."""

    model_config = ConfigDict(extra="ignore")


HANDLED_SPEC = (
    "The spec the operator's last finished reconcile carried out, as compact JSON: an edit made "
    "while no operator ran is classified against it."
)

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(StatusModel):
    """One aspect of the resource's state, with the fields of Kubernetes' metav1.Condition."""

    type: Annotated[str, StringConstraints(min_length=1, max_length=316)] = Field(
        description="The aspect: Ready, Reconciling, Stalled, Reprocessing, CaughtUp, DataLossRisk."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    observed_generation: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="The metadata.generation this condition was computed from."
    )
    last_transition_time: str = Field(
        description="When the status last changed (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    reason: Annotated[
        str, StringConstraints(min_length=1, max_length=1024, pattern=REASON_PATTERN)
    ] = Field(description="A CamelCase word for programs: why the condition is as it is.")
    message: Annotated[str, StringConstraints(max_length=32768)] = Field(
        default="", description="A sentence for people: what is happening and what to do."
    )


Conditions = Annotated[
    list[Condition],
    Field(
        default_factory=list,
        max_length=16,
        description="Conditions in the kstatus convention: Ready, Reconciling, Stalled and others.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    ),
]


class ObjectMeta(BaseModel):
    """The part of metadata Distributary reads; everything else is kept as it is."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, alias_generator=to_camel)

    name: KubeName
    namespace: KubeName = "default"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int = 0
    uid: str | None = None


class Position(ApiModel):
    """Where a consumer starts reading when it has neither a checkpoint nor committed offsets."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.from != 'Timestamp' || has(self.timestamp)",
                "startingPosition.timestamp is required when from is Timestamp",
                field_path=".timestamp",
            ),
            cel(
                "self.from != 'Offsets' || has(self.offsets)",
                "startingPosition.offsets is required when from is Offsets",
                field_path=".offsets",
            ),
            cel(
                "self.from == 'Timestamp' || !has(self.timestamp)",
                "startingPosition.timestamp is only read when from is Timestamp",
                field_path=".timestamp",
            ),
            cel(
                "self.from == 'Offsets' || !has(self.offsets)",
                "startingPosition.offsets is only read when from is Offsets",
                field_path=".offsets",
            ),
            cel(
                "!has(self.offsets) || self.offsets.all(k, k.matches('^[0-9]+$'))",
                'startingPosition.offsets keys are partition numbers, e.g. "0"',
                field_path=".offsets",
            ),
        )
    )

    from_: Literal["Earliest", "Latest", "Timestamp", "Offsets"] = Field(
        default="Earliest",
        alias="from",
        description="Earliest (the start of retained history), Latest, Timestamp or Offsets.",
    )
    timestamp: str | None = Field(
        default=None,
        description="With from: Timestamp, the first record appended at or after this instant "
        "(RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    offsets: dict[str, Annotated[int, Field(ge=0)]] | None = Field(
        default=None,
        max_length=10000,
        description="With from: Offsets, the offset to start at per partition number "
        '(e.g. {"0": 42, "1": 17}); partitions not named start at the earliest offset.',
    )

    @model_validator(mode="after")
    def _check_from(self) -> Position:
        if self.from_ == "Timestamp" and self.timestamp is None:
            raise ValueError("timestamp is required when from is Timestamp")
        if self.from_ == "Offsets" and self.offsets is None:
            raise ValueError("offsets is required when from is Offsets")
        if self.from_ != "Timestamp" and self.timestamp is not None:
            raise ValueError("timestamp is only read when from is Timestamp")
        if self.from_ != "Offsets" and self.offsets is not None:
            raise ValueError("offsets is only read when from is Offsets")
        for partition in self.offsets or {}:
            if not partition.isdigit():
                raise ValueError(f"offsets key {partition!r} is not a partition number")
        return self


class SparkPod(ApiModel):
    """Resources of the Spark driver or of each executor."""

    cores: Annotated[int, Field(ge=1, le=64)] = Field(default=1, description="CPU cores.")
    memory: SparkMemory = Field(
        default="1g", description="Heap memory in Spark's units, e.g. 512m or 2g."
    )
    cpu_request: CpuQuantity | None = Field(
        default=None,
        description="The pod's CPU request, a Kubernetes quantity such as 500m (default: "
        "`cores`), so that a pod asks the scheduler for less CPU than Spark's task slots.",
    )
    cpu_limit: CpuQuantity | None = Field(
        default=None, description="The pod's CPU limit, a Kubernetes quantity (default: none)."
    )
    memory_overhead: SparkMemory | None = Field(
        default=None,
        description="Memory beyond the heap in Spark's units (default: Spark's, a tenth of "
        "the heap and at least 384m); the pod's memory request is the heap plus this.",
    )


class SparkExecutors(SparkPod):
    """Resources and count of the executors."""

    instances: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=1, description="How many executors."
    )


TRIGGER_PATTERN = r"^(AvailableNow|[0-9]{1,9}(ms|s|m|h))$"

# Spark settings the operator and the runner set themselves, with what sets each one instead. A
# view or job that set one would move its checkpoint, its cluster, its namespace or its Kafka
# away from what the operator tracks, or run its driver with another service account's rights.
RESERVED_SPARK_CONF: Final[dict[str, str]] = {
    "spark.master": "the operator's Spark runtime",
    "spark.submit.deployMode": "the operator's Spark runtime",
    "spark.app.name": "the operator, from the resource's name and revision",
    "spark.sql.streaming.checkpointLocation": "the operator, per revision, under its checkpoint "
    "root",
    "spark.kubernetes.namespace": "the resource's own namespace",
    "spark.kubernetes.authenticate.driver.serviceAccountName": "the operator's Spark service "
    "account",
    "spark.kubernetes.authenticate.serviceAccountName": "the operator's Spark service account",
    "spark.kubernetes.authenticate.executor.serviceAccountName": "the operator's Spark service "
    "account",
    "spark.kubernetes.container.image": "spec.spark.image",
    "spark.kubernetes.driver.container.image": "spec.spark.image",
    "spark.kubernetes.executor.container.image": "spec.spark.image",
    "spark.driver.cores": "spec.spark.driver.cores",
    "spark.driver.memory": "spec.spark.driver.memory",
    "spark.executor.cores": "spec.spark.executor.cores",
    "spark.executor.memory": "spec.spark.executor.memory",
    "spark.executor.instances": "spec.spark.executor.instances",
}
# Any key that names Kafka's servers (e.g. spark.kafka.clusters.<id>.auth.bootstrap.servers):
# the operator gives every runner and job the bootstrap servers it was started with.
RESERVED_SPARK_CONF_SUFFIX: Final = "bootstrap.servers"


def reserved_spark_conf(key: str) -> str | None:
    """What sets the Spark setting `key` instead of a view's or job's sparkConf; None when
    sparkConf may set it."""
    if key in RESERVED_SPARK_CONF:
        return RESERVED_SPARK_CONF[key]
    if key.endswith(RESERVED_SPARK_CONF_SUFFIX):
        return "the operator's Kafka bootstrap servers"
    return None


def _reserved_conf_rule() -> str:
    names = ", ".join(f"'{key}'" for key in RESERVED_SPARK_CONF)
    return f"self.all(k, !(k in [{names}]) && !k.endsWith('{RESERVED_SPARK_CONF_SUFFIX}'))"


# A variable's name as Kubernetes and shells take it; the project's own and Spark's are kept.
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
RESERVED_ENV_PREFIXES: Final = ("DISTRIBUTARY_", "SPARK_")
# A label key (an optional DNS-subdomain prefix and a name) and value, as Kubernetes allows.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
SECRET_KEY_NAME_PATTERN = r"^[-._a-zA-Z0-9]{1,253}$"
RESERVED_VOLUME_PREFIX: Final = "distributary-"
# A list whose items the API server keeps unique by name (a list-map, as pods' own lists are).
KEYED_BY_NAME: Final[dict[str, Any]] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
}  # the checkpoint claim's volume, and any to come

EnvName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=ENV_NAME_PATTERN)]
LabelKey = Annotated[str, StringConstraints(max_length=317, pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_PATTERN)]


class SecretKeyRef(ApiModel):
    """One key of a Secret in the resource's namespace."""

    name: KubeName = Field(description="The Secret's name.")
    key: Annotated[str, StringConstraints(pattern=SECRET_KEY_NAME_PATTERN)] = Field(
        description="The key within the Secret."
    )


class PodEnv(ApiModel):
    """A variable of the driver's and executors' containers: a value, or a Secret's key."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "has(self.value) != has(self.secretKeyRef)",
                "give a variable either value or secretKeyRef, exactly one",
            ),
            cel(
                "!self.name.upperAscii().startsWith('DISTRIBUTARY_') && "
                "!self.name.upperAscii().startsWith('SPARK_')",
                "variables beginning with DISTRIBUTARY_ or SPARK_ are set by the operator and "
                "Spark; choose another name",
                field_path=".name",
            ),
        )
    )

    name: EnvName = Field(
        description="The variable's name; names beginning with DISTRIBUTARY_ or SPARK_ are "
        "set by the operator and Spark, and refused."
    )
    value: Annotated[str, StringConstraints(max_length=4096)] | None = Field(
        default=None, description="Its value (no secret here: use secretKeyRef)."
    )
    secret_key_ref: SecretKeyRef | None = Field(
        default=None, description="A Secret's key whose value it takes, read where the pod runs."
    )

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        for prefix in RESERVED_ENV_PREFIXES:
            if name.upper().startswith(prefix):
                raise ValueError(
                    f"variable {name!r}: names beginning with {prefix} are set by the operator "
                    "and Spark; choose another name"
                )
        return name

    @model_validator(mode="after")
    def _one_source(self) -> PodEnv:
        if (self.value is None) == (self.secret_key_ref is None):
            raise ValueError(
                f"variable {self.name!r}: give either value or secretKeyRef, exactly one"
            )
        return self


class SecretRef(ApiModel):
    """A Secret in the resource's namespace, by name."""

    name: KubeName = Field(description="The Secret's name.")


class PodEnvFrom(ApiModel):
    """Every key of a Secret as a variable of the driver's and executors' containers."""

    secret_ref: SecretRef = Field(description="The Secret whose keys become variables.")


class SecretVolumeSource(ApiModel):
    """A Secret's keys as files."""

    secret_name: KubeName = Field(description="The Secret's name.")


class ConfigMapVolumeSource(ApiModel):
    """A ConfigMap's keys as files."""

    name: KubeName = Field(description="The ConfigMap's name.")


class ClaimVolumeSource(ApiModel):
    """A PersistentVolumeClaim in the resource's namespace."""

    claim_name: KubeName = Field(description="The claim's name.")


class EmptyDirVolumeSource(ApiModel):
    """A folder that lives as long as the pod."""

    size_limit: Annotated[str, StringConstraints(max_length=32)] | None = Field(
        default=None, description="Its largest size, as a Kubernetes quantity (e.g. 1Gi)."
    )


class PodVolume(ApiModel):
    """A volume mounted into the Spark container of the driver and of every executor."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(has(self.secret) ? 1 : 0) + (has(self.configMap) ? 1 : 0) + "
                "(has(self.persistentVolumeClaim) ? 1 : 0) + (has(self.emptyDir) ? 1 : 0) == 1",
                "give a volume exactly one of secret, configMap, persistentVolumeClaim, emptyDir",
            ),
            cel(
                f"!self.name.startsWith('{RESERVED_VOLUME_PREFIX}')",
                f"volume names beginning with {RESERVED_VOLUME_PREFIX} are the operator's (the "
                "checkpoint claim's); choose another name",
                field_path=".name",
            ),
        )
    )

    name: Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN)] = Field(
        description="The volume's name in the pods (a DNS label; names beginning with "
        "distributary- are the operator's)."
    )
    mount_path: Annotated[str, StringConstraints(max_length=1024, pattern=r"^/")] = Field(
        description="Where it is mounted, an absolute path."
    )
    read_only: bool = Field(default=False, description="Mounted read-only.")
    secret: SecretVolumeSource | None = Field(default=None, description="A Secret's keys.")
    config_map: ConfigMapVolumeSource | None = Field(default=None, description="A ConfigMap's.")
    persistent_volume_claim: ClaimVolumeSource | None = Field(
        default=None, description="A PersistentVolumeClaim."
    )
    empty_dir: EmptyDirVolumeSource | None = Field(
        default=None, description="An empty folder, as long as the pod lives."
    )

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name.startswith(RESERVED_VOLUME_PREFIX):
            raise ValueError(
                f"volume {name!r}: names beginning with {RESERVED_VOLUME_PREFIX} are the "
                "operator's (the checkpoint claim's); choose another name"
            )
        return name

    @model_validator(mode="after")
    def _one_source(self) -> PodVolume:
        given = [
            field
            for field in ("secret", "config_map", "persistent_volume_claim", "empty_dir")
            if getattr(self, field) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                f"volume {self.name!r}: give exactly one of secret, configMap, "
                f"persistentVolumeClaim, emptyDir ({len(given)} given)"
            )
        return self


class PodToleration(ApiModel):
    """A taint the driver and executors tolerate, as a pod's toleration says it."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || "
                "self.value == ''",
                "a toleration with operator Exists has no value: remove it",
            ),
            cel(
                "(has(self.operator) && self.operator == 'Exists') || has(self.key)",
                "a toleration with operator Equal needs a key",
            ),
        )
    )

    key: LabelKey | None = Field(default=None, description="The taint's key; unset: every key.")
    operator: Literal["Exists", "Equal"] = Field(
        default="Equal", description="Equal: key and value match; Exists: the key alone."
    )
    value: LabelValue | None = Field(default=None, description="The value, for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The taint's effect; unset: every effect."
    )
    toleration_seconds: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="For NoExecute: how long the pod stays once tainted."
    )

    @model_validator(mode="after")
    def _consistent(self) -> PodToleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists has no value: remove it")
        if self.operator == "Equal" and self.key is None:
            raise ValueError("a toleration with operator Equal needs a key")
        return self


class SparkPods(ApiModel):
    """What the driver's and the executors' pods need from the cluster they run on: variables
    (from Secrets too), volumes, where they may be scheduled, the secrets to pull the image.
    Applied to the driver and every executor alike; `distributary run` has no pods and ignores
    them (it says so)."""

    env: list[PodEnv] = Field(
        default_factory=list,
        max_length=64,
        description="Variables of the Spark container.",
        json_schema_extra=KEYED_BY_NAME,
    )
    env_from: list[PodEnvFrom] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets whose every key becomes a variable of the Spark container.",
    )
    volumes: list[PodVolume] = Field(
        default_factory=list,
        max_length=32,
        description="Volumes mounted into it, each at its own path.",
        json_schema_extra=KEYED_BY_NAME,
    )
    node_selector: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=32,
        description="Labels the nodes the pods run on must have.",
        json_schema_extra=validations(
            cel(
                f"self.all(k, size(k) <= 317 && k.matches('{LABEL_KEY_PATTERN}'))",
                "nodeSelector keys are label keys (an optional DNS prefix and '/', then a name "
                "of at most 63 characters)",
            )
        ),
    )
    tolerations: list[PodToleration] = Field(
        default_factory=list, max_length=32, description="Taints the pods tolerate."
    )
    image_pull_secrets: list[KubeName] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets (kubernetes.io/dockerconfigjson) to pull the image with.",
    )

    @field_validator("node_selector")
    @classmethod
    def _label_keys(cls, selector: dict[str, str]) -> dict[str, str]:
        for key in selector:
            if len(key) > 317 or re.fullmatch(LABEL_KEY_PATTERN, key) is None:
                raise ValueError(
                    f"nodeSelector key {key!r} is not a label key (an optional DNS prefix and "
                    "'/', then a name of at most 63 characters)"
                )
        return selector

    @model_validator(mode="after")
    def _unique(self) -> SparkPods:
        for what, names in (
            ("variable", [e.name for e in self.env]),
            ("volume", [v.name for v in self.volumes]),
            ("mount path", [v.mount_path.rstrip("/") or "/" for v in self.volumes]),
        ):
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{what} {twice[0]!r} is given twice: give each once")
        return self

    @property
    def empty(self) -> bool:
        """Whether nothing is asked of the pods."""
        return self == SparkPods()


class SparkSettings(ApiModel):
    """How the Spark application of a view or job runs."""

    image: Annotated[str, StringConstraints(max_length=512)] | None = Field(
        default=None, description="The job image; the operator's default image when unset."
    )
    driver: SparkPod = Field(default_factory=SparkPod, description="The driver's resources.")
    executor: SparkExecutors = Field(
        default_factory=SparkExecutors, description="The executors' resources and count."
    )
    pods: SparkPods = Field(
        default_factory=SparkPods,
        description="What the driver's and executors' pods need on a cluster: variables (from "
        "Secrets too), volumes, node selector, tolerations, image pull secrets.",
    )
    trigger: Annotated[str, StringConstraints(max_length=16, pattern=TRIGGER_PATTERN)] = Field(
        default="5s",
        description="How often a micro-batch starts (e.g. 500ms, 5s, 1m), or AvailableNow to "
        "process what is there and stop.",
    )
    max_offsets_per_trigger: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="The most records one micro-batch reads over all partitions; unset: no "
        "limit, except for a revision reprocessing its inputs' history, which reads 250000 at "
        "most so that its progress shows batch by batch.",
    )
    spark_conf: dict[str, Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=dict,
        max_length=256,
        description="Extra Spark configuration; keys start with 'spark.'. Keys the operator "
        "sets itself (spark.master, the checkpoint location, the namespace, the service account, "
        "the image, resources, Kafka's bootstrap servers) are refused.",
        json_schema_extra=validations(
            cel(
                "self.all(k, k.startsWith('spark.'))",
                "sparkConf keys start with 'spark.' (e.g. spark.sql.shuffle.partitions)",
            ),
            cel(
                _reserved_conf_rule(),
                "sparkConf may not set what the operator sets itself: "
                + ", ".join(RESERVED_SPARK_CONF)
                + f", or any key ending in {RESERVED_SPARK_CONF_SUFFIX}; use the spec.spark "
                "fields (image, driver, executor) and leave the rest to the operator",
            ),
        ),
    )

    @field_validator("spark_conf")
    @classmethod
    def _check_conf(cls, conf: dict[str, str]) -> dict[str, str]:
        for key in conf:
            if not key.startswith("spark."):
                raise ValueError(
                    f"sparkConf key {key!r} does not start with 'spark.' "
                    "(e.g. spark.sql.shuffle.partitions)"
                )
            owner = reserved_spark_conf(key)
            if owner is not None:
                raise ValueError(
                    f"sparkConf key {key!r} is set by {owner}, not by sparkConf: remove it"
                )
        return conf


class SparkApplicationRef(StatusModel):
    """The Spark application that runs a view's or job's revision, as last observed."""

    name: str = Field(description="The SparkApplication's name, or the local process's name.")
    state: str | None = Field(default=None, description="Its state as the runtime reports it.")
    attempts: int = Field(
        default=0,
        description="Failures in a row that count toward the restart back-off (the restart "
        "due included); 0 again once it has run stably.",
    )
    failures: list[str] = Field(
        default_factory=list,
        description="When it failed (RFC 3339), oldest first: the failures within the window "
        "that makes a view or job Stalled, since it last ran stably.",
    )
    last_error: str | None = Field(
        default=None, description="Why it last failed, as its runtime said."
    )
    running_since: str | None = Field(
        default=None,
        description="Since when it has been seen running (RFC 3339); unset while it does not run.",
        json_schema_extra={"format": "date-time"},
    )
    restart_at: str | None = Field(
        default=None,
        description="When its restart is due (RFC 3339), while it waits for one after a failure.",
        json_schema_extra={"format": "date-time"},
    )


class Progress(StatusModel):
    """The last micro-batch of a streaming query."""

    batch_id: int | None = Field(default=None, description="The micro-batch number.")
    records_per_second: float | None = Field(
        default=None, description="Records processed per second in the last batch."
    )
    batch_duration_ms: int | None = Field(default=None, description="How long the batch took.")
    timestamp: str | None = Field(
        default=None,
        description="When the batch ended (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )


class InputPosition(StatusModel):
    """A consumer's position in one input log: its logical clock."""

    log: str = Field(description="The input log's name.")
    alias: str | None = Field(default=None, description="The alias it has in the SQL.")
    topic: str | None = Field(default=None, description="The topic being read.")
    position: dict[str, int] = Field(
        default_factory=dict, description="The next offset to read, per partition."
    )
    lag: int | None = Field(default=None, description="Records appended but not yet read.")


class Change(StatusModel):
    """How the last spec change was classified, and why."""

    generation: int = Field(description="The generation that was classified.")
    classification: Literal["Ignore", "RestartInPlace", "Reprocess", "Forbidden"] = Field(
        description="Ignore, RestartInPlace, Reprocess or Forbidden."
    )
    reasons: list[str] = Field(default_factory=list, description="Why, one line per difference.")


class PendingAction(StatusModel):
    """The action the operator recorded before taking it (status as a write-ahead log)."""

    action: str = Field(description="What the operator is doing, e.g. StartRevision, Restart.")
    revision: int | None = Field(default=None, description="The revision it applies to.")
    generation: int = Field(description="The generation it was decided from.")
    started_at: str = Field(
        description="When it was recorded (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
