"""Documents the API server refuses, each with the field its refusal names.

Shared by the unit tests of `distributary validate` and by the test that applies each one to a real
kube-apiserver with the CRDs installed, so the two are held to the same cases. Each case is a valid
base resource with one change, so the field named is the only thing wrong.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

LOG: dict[str, Any] = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "Log",
    "metadata": {"name": "clicks"},
    "spec": {"partitions": 2, "schema": "user_id STRING, url STRING"},
}
VIEW: dict[str, Any] = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "DerivedView",
    "metadata": {"name": "urls"},
    "spec": {
        "inputs": [{"log": "clicks", "alias": "c"}],
        "sql": "SELECT user_id, url FROM c",
    },
}
JOB: dict[str, Any] = {
    "apiVersion": "distributary.dev/v1alpha1",
    "kind": "StreamJob",
    "metadata": {"name": "sessions"},
    "spec": {
        "image": "example.com/sessions:1",
        "mainApplicationFile": "local:///app/main.py",
        "inputs": [{"log": "clicks"}],
    },
}


@dataclass(frozen=True)
class Invalid:
    """One refused document: its name, the document, and the field both refusals name."""

    name: str
    document: dict[str, Any]
    field: str

    def named_in(self, fields: Iterable[str]) -> bool:
        """Whether one of `fields` is this case's field or one inside it (a map's entry: the
        API server names `metadata.labels` where validate names `metadata.labels.tier`)."""
        return any(
            f == self.field or f.startswith((f"{self.field}.", f"{self.field}[")) for f in fields
        )


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`base` with the value at a dotted path (`[n]` indexes a list) set, or removed when
    `value` is `REMOVE`."""
    document = copy.deepcopy(base)
    parts = path.replace("[", ".[").split(".")
    node: Any = document
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node.setdefault(part, {})
    last = parts[-1]
    if value is REMOVE:
        del node[last]
    else:
        node[last] = value
    return document


REMOVE = object()
_TIMESTAMP = "spec.inputs[0].startingPosition"


def _timestamp(value: Any) -> dict[str, Any]:
    return _with(VIEW, _TIMESTAMP, {"from": "Timestamp", "timestamp": value})


INVALID: list[Invalid] = [
    # Types, with no coercion.
    Invalid("integer-as-string", _with(LOG, "spec.partitions", "6"), "spec.partitions"),
    Invalid("integer-as-number", _with(LOG, "spec.partitions", 2.5), "spec.partitions"),
    Invalid("boolean-as-string", _with(LOG, "spec.compaction", "yes"), "spec.compaction"),
    Invalid("boolean-as-integer", _with(LOG, "spec.compaction", 1), "spec.compaction"),
    Invalid("string-as-integer", _with(VIEW, "spec.sql", 42), "spec.sql"),
    Invalid("string-as-boolean", _with(LOG, "spec.topicName", True), "spec.topicName"),
    Invalid("list-as-string", _with(LOG, "spec.key", "user_id"), "spec.key"),
    Invalid("object-as-string", _with(VIEW, "spec.spark", "big"), "spec.spark"),
    Invalid("integer-in-list", _with(LOG, "spec.key", [7]), "spec.key[0]"),
    Invalid(
        "nested-integer-as-string",
        _with(VIEW, "spec.spark.executor.instances", "2"),
        "spec.spark.executor.instances",
    ),
    # Formats.
    Invalid("date-only", _timestamp("2024-05-01"), f"{_TIMESTAMP}.timestamp"),
    Invalid("not-a-date", _timestamp("yesterday"), f"{_TIMESTAMP}.timestamp"),
    Invalid("month-13", _timestamp("2024-13-01T00:00:00Z"), f"{_TIMESTAMP}.timestamp"),
    Invalid("timestamp-as-integer", _timestamp(1714564800), f"{_TIMESTAMP}.timestamp"),
    Invalid("no-zone", _timestamp("2024-05-01T12:00:00"), f"{_TIMESTAMP}.timestamp"),
    Invalid("february-30", _timestamp("2024-02-30T00:00:00Z"), f"{_TIMESTAMP}.timestamp"),
    # Metadata, which the API server checks itself.
    Invalid("name-pattern", _with(LOG, "metadata.name", "Bad_Name"), "metadata.name"),
    Invalid("name-length", _with(LOG, "metadata.name", "a" * 254), "metadata.name"),
    Invalid("label-as-integer", _with(LOG, "metadata.labels", {"tier": 1}), "metadata.labels"),
    Invalid("label-value", _with(LOG, "metadata.labels", {"t": "no spaces"}), "metadata.labels"),
    Invalid("label-key", _with(LOG, "metadata.labels", {"no spaces": "x"}), "metadata.labels"),
    Invalid(
        "annotation-as-boolean",
        _with(LOG, "metadata.annotations", {"note": True}),
        "metadata.annotations",
    ),
    Invalid("unknown-metadata-field", _with(LOG, "metadata.nmae", "x"), "metadata.nmae"),
    # Patterns, lengths, ranges, enums, item counts.
    Invalid("pattern", _with(LOG, "spec.topicName", "no spaces"), "spec.topicName"),
    Invalid(
        "pattern-memory", _with(VIEW, "spec.spark.driver.memory", "1Gi"), "spec.spark.driver.memory"
    ),
    Invalid("max-length", _with(LOG, "spec.topicName", "t" * 250), "spec.topicName"),
    Invalid("min-length", _with(VIEW, "spec.sql", ""), "spec.sql"),
    Invalid("minimum", _with(LOG, "spec.partitions", 0), "spec.partitions"),
    Invalid("maximum", _with(LOG, "spec.replicas", 33), "spec.replicas"),
    Invalid("enum", _with(LOG, "spec.deletionPolicy", "Keep"), "spec.deletionPolicy"),
    Invalid("min-items", _with(VIEW, "spec.inputs", []), "spec.inputs"),
    Invalid("max-items", _with(LOG, "spec.key", [f"k{i}" for i in range(33)]), "spec.key"),
    Invalid(
        "max-properties",
        _with(LOG, "spec.config", {f"x.{i}": "1" for i in range(65)}),
        "spec.config",
    ),
    Invalid(
        "int-or-string", _with(LOG, "spec.config", {"segment.ms": True}), "spec.config.segment.ms"
    ),
    Invalid("null-required", _with(VIEW, "spec.sql", None), "spec.sql"),
    # Required and unknown fields.
    Invalid("required", _with(VIEW, "spec.sql", REMOVE), "spec.sql"),
    Invalid("required-nested", _with(VIEW, "spec.inputs[0].log", REMOVE), "spec.inputs[0].log"),
    Invalid("unknown-field", _with(LOG, "spec.partitionz", 3), "spec.partitionz"),
    Invalid("unknown-top-level-field", _with(LOG, "specs", {}), "specs"),
    Invalid(
        "unknown-nested-field", _with(JOB, "spec.inputs[0].topic", "x"), "spec.inputs[0].topic"
    ),
]

# Documents that cannot be placed: the API server finds no kind to give them.
UNPLACED: list[Invalid] = [
    Invalid("version-typo", _with(LOG, "apiVersion", "distributary.dev/v1"), "apiVersion"),
    Invalid("group-typo", _with(LOG, "apiVersion", "distributery.dev/v1alpha1"), "apiVersion"),
    Invalid("no-version", _with(LOG, "apiVersion", "distributary.dev"), "apiVersion"),
    Invalid("kind-typo", _with(LOG, "kind", "Logs"), "kind"),
    Invalid("kind-case", _with(VIEW, "kind", "Derivedview"), "kind"),
    Invalid("our-kind-elsewhere", _with(JOB, "apiVersion", "batch/v1"), "apiVersion"),
    Invalid("no-api-version", _with(LOG, "apiVersion", REMOVE), "apiVersion"),
    Invalid("no-kind", _with(VIEW, "kind", REMOVE), "kind"),
]

# Documents the CRDs' CEL rules refuse; validate refuses them through the rules' pydantic twins.
_POSITION = "spec.inputs[0].startingPosition"
CEL_REFUSED: list[Invalid] = [
    Invalid(
        "timestamp-required",
        _with(VIEW, _POSITION, {"from": "Timestamp"}),
        f"{_POSITION}.timestamp",
    ),
    Invalid(
        "offsets-unread",
        _with(VIEW, _POSITION, {"from": "Earliest", "offsets": {"0": 5}}),
        f"{_POSITION}.offsets",
    ),
    Invalid(
        "offsets-key",
        _with(VIEW, _POSITION, {"from": "Offsets", "offsets": {"p0": 5}}),
        f"{_POSITION}.offsets",
    ),
    Invalid(
        "forever-and-time",
        _with(LOG, "spec.retention", {"forever": True, "time": "7d"}),
        "spec.retention",
    ),
    Invalid(
        "reserved-config", _with(LOG, "spec.config", {"cleanup.policy": "compact"}), "spec.config"
    ),
    Invalid(
        "same-alias",
        _with(
            VIEW, "spec.inputs", [{"log": "clicks", "alias": "c"}, {"log": "clicks", "alias": "C"}]
        ),
        "spec.inputs",
    ),
    Invalid("upsert-without-key", _with(VIEW, "spec.output", {"mode": "upsert"}), "spec.output"),
    Invalid(
        "spark-conf-key", _with(VIEW, "spec.spark.sparkConf", {"foo": "x"}), "spec.spark.sparkConf"
    ),
    Invalid("reserved-env", _with(JOB, "spec.env", {"DISTRIBUTARY_X": "1"}), "spec.env"),
    Invalid(
        "short-dead-letters",
        _with(VIEW, "spec.deadLetters.retention", "10s"),
        "spec.deadLetters.retention",
    ),
]
