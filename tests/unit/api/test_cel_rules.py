"""The CEL rules of the CRDs: present where the API needs them, well formed, and in agreement with
the pydantic validators that `distributary validate` runs.

Compiling and evaluating CEL needs the `cel-python` package; those tests are skipped without it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from distributary.api import KINDS
from distributary.api.common import Position, SparkSettings
from distributary.api.crd import crd
from distributary.api.job import JobSpec
from distributary.api.log import LogSpec, Retention
from distributary.api.view import DeadLetters, ViewOutput, ViewSpec

Schema = dict[str, Any]
ROOTS: dict[str, Schema] = {
    name: crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for name, kind in KINDS.items()
}


def _walk(node: Schema, path: str, in_array: bool) -> Iterator[tuple[str, Schema, bool]]:
    yield path, node, in_array
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}", in_array)
    if isinstance(node.get("items"), dict):
        keyed = node.get("x-kubernetes-list-type") in ("map", "set")
        yield from _walk(node["items"], f"{path}[]", in_array or not keyed)
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}", in_array)


def _rules() -> Iterator[tuple[str, Schema, bool, dict[str, Any]]]:
    for name, root in ROOTS.items():
        for path, node, in_array in _walk(root, "", False):
            for rule in node.get("x-kubernetes-validations", []):
                yield f"{name}{path}", node, in_array, rule


ALL_RULES = list(_rules())
RULE_IDS = [f"{where}:{rule['rule'][:40]}" for where, _, _, rule in ALL_RULES]


def _node(kind: str, path: str) -> Schema:
    node = ROOTS[kind]
    for part in re.findall(r"\.(\w+)|(\[\])", path):
        node = node["properties"][part[0]] if part[0] else node["items"]
    return node


def _rule_texts(kind: str, path: str) -> list[str]:
    return [r["rule"] for r in _node(kind, path).get("x-kubernetes-validations", [])]


@pytest.mark.parametrize(
    ("kind", "path", "rule"),
    [
        ("Log", ".spec.topicName", "self == oldSelf"),
        ("Log", ".spec.partitions", "self >= oldSelf"),
        ("Log", ".spec", "has(self.topicName) == has(oldSelf.topicName)"),
        ("DerivedView", ".spec.output.log", "self == oldSelf"),
        (
            "DerivedView",
            ".spec",
            "self.inputs.all(i, self.inputs.exists_one("
            "j, j.alias.lowerAscii() == i.alias.lowerAscii()))",
        ),
        ("DerivedView", ".spec.spark.sparkConf", "self.all(k, k.startsWith('spark.'))"),
        ("StreamJob", ".spec.spark.sparkConf", "self.all(k, k.startsWith('spark.'))"),
    ],
)
def test_the_immutability_increase_only_and_shape_rules_are_present(
    kind: str, path: str, rule: str
) -> None:
    assert rule in _rule_texts(kind, path)


@pytest.mark.parametrize(
    ("kind", "path", "count"),
    [
        ("Log", ".spec.retention", 1),
        ("Log", ".spec.config", 1),
        ("DerivedView", ".spec.output", 2),
        ("DerivedView", ".spec.deadLetters.retention", 1),
        ("DerivedView", ".spec.inputs[].startingPosition", 5),
        ("StreamJob", ".spec.inputs[].startingPosition", 5),
        ("StreamJob", ".spec.env", 1),
    ],
)
def test_every_pydantic_rule_has_its_cel_twin(kind: str, path: str, count: int) -> None:
    assert len(_rule_texts(kind, path)) == count


@pytest.mark.parametrize(("where", "node", "in_array", "rule"), ALL_RULES, ids=RULE_IDS)
def test_every_rule_has_a_message_and_a_field_path_the_node_has(
    where: str, node: Schema, in_array: bool, rule: dict[str, Any]
) -> None:
    assert set(rule) <= {"rule", "message", "fieldPath", "reason"}
    assert rule["message"].strip()
    if "fieldPath" in rule:
        assert rule["fieldPath"].lstrip(".") in node.get("properties", {}), where


@pytest.mark.parametrize(("where", "node", "in_array", "rule"), ALL_RULES, ids=RULE_IDS)
def test_a_transition_rule_sits_where_the_api_server_can_find_the_old_value(
    where: str, node: Schema, in_array: bool, rule: dict[str, Any]
) -> None:
    if "oldSelf" in rule["rule"]:
        assert not in_array, f"{where}: oldSelf under a list that is not a map or set"


@pytest.mark.parametrize(("where", "node", "in_array", "rule"), ALL_RULES, ids=RULE_IDS)
def test_a_rule_names_only_fields_its_node_has(
    where: str, node: Schema, in_array: bool, rule: dict[str, Any]
) -> None:
    for name, call in re.findall(r"\b(?:self|oldSelf)\.(\w+)(\s*\()?", rule["rule"]):
        if name in ("all", "exists", "exists_one", "map", "filter"):
            assert node.get("type") in ("object", "array"), where
            continue
        if call:  # a method of the value itself, e.g. a string's matches()
            continue
        assert name in node.get("properties", {}), f"{where}: {rule['rule']} names {name}"


@pytest.mark.parametrize(("where", "node", "in_array", "rule"), ALL_RULES, ids=RULE_IDS)
def test_every_rule_compiles(
    where: str, node: Schema, in_array: bool, rule: dict[str, Any]
) -> None:
    celpy = pytest.importorskip("celpy", reason="cel-python is not installed")
    celpy.Environment().compile(rule["rule"])


def _KUBERNETES_EXTENSIONS(celpy: Any) -> dict[str, Any]:  # noqa: N802
    """The few functions of Kubernetes' CEL string library that the rules use."""
    return {"lowerAscii": lambda text: celpy.celtypes.StringType(str(text).lower())}


def _cel_accepts(kind: str, path: str, value: Any, old: Any = None) -> bool:
    celpy = pytest.importorskip("celpy", reason="cel-python is not installed")
    env = celpy.Environment()
    activation = {"self": celpy.json_to_cel(value)}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    for rule in _rule_texts(kind, path):
        if ("oldSelf" in rule) != (old is not None):
            continue
        program = env.program(env.compile(rule), functions=_KUBERNETES_EXTENSIONS(celpy))
        if not bool(program.evaluate(activation)):
            return False
    return True


def _pydantic_accepts(model: type[BaseModel], value: Any) -> bool:
    try:
        model.model_validate(value)
    except ValidationError:
        return False
    return True


TS = "2025-01-01T00:00:00Z"
# (kind, schema path, model, wrapping field, value as the API server sees it after defaulting)
CASES: list[tuple[str, str, type[BaseModel], str | None, Any]] = [
    ("Log", ".spec.retention", Retention, None, {"forever": True, "time": "1d"}),
    ("Log", ".spec.retention", Retention, None, {"forever": True, "bytes": "1Gi"}),
    ("Log", ".spec.retention", Retention, None, {"forever": True}),
    ("Log", ".spec.retention", Retention, None, {"forever": False, "time": "1d"}),
    ("Log", ".spec", LogSpec, None, {"partitions": 3, "key": ["a"]}),
    ("Log", ".spec", LogSpec, None, {"partitions": 3, "key": ["a"], "schema": "a STRING"}),
    ("Log", ".spec.config", LogSpec, "config", {"retention.ms": "1"}),
    ("Log", ".spec.config", LogSpec, "config", {"cleanup.policy": "compact"}),
    ("Log", ".spec.config", LogSpec, "config", {"min.insync.replicas": 2}),
    *(
        ("Log", ".spec.topicName", LogSpec, "topicName", topic)
        for topic in (
            *("__consumer_offsets", "__x", "distributary.progress", "distributary.ns.v.dlq"),
            *("_x", "a__b", "distributary.x", "x.dlq", "distributary.progressive"),
        )
    ),
    *(
        ("DerivedView", ".spec.output.log", ViewOutput, "log", log)
        for log in ("distributary.progress", "distributary.ns.v.dlq", "out", "distributary.x")
    ),
    ("DerivedView", ".spec.output", ViewOutput, None, {"mode": "upsert"}),
    ("DerivedView", ".spec.output", ViewOutput, None, {"mode": "upsert", "key": []}),
    ("DerivedView", ".spec.output", ViewOutput, None, {"mode": "upsert", "key": ["a"]}),
    ("DerivedView", ".spec.output", ViewOutput, None, {"mode": "append", "key": ["a"]}),
    ("DerivedView", ".spec.output", ViewOutput, None, {"mode": "append"}),
    *(
        ("DerivedView", ".spec.deadLetters.retention", DeadLetters, "retention", retention)
        for retention in (
            *("0ms", "0s", "00m", "0h", "0d", "0w", "1ms", "9999ms", "59999ms", "1s", "59s"),
            *("60000ms", "0060000ms", "60s", "61s", "100s", "1m", "7d", "2w", "999999999ms"),
        )
    ),
    (
        "DerivedView",
        ".spec",
        ViewSpec,
        None,
        {"sql": "SELECT 1", "inputs": [{"log": "a", "alias": "x"}, {"log": "b", "alias": "x"}]},
    ),
    (
        "DerivedView",
        ".spec",
        ViewSpec,
        None,
        {"sql": "SELECT 1", "inputs": [{"log": "a", "alias": "x"}, {"log": "b", "alias": "y"}]},
    ),
    ("DerivedView", ".spec.inputs[].startingPosition", Position, None, {"from": "Timestamp"}),
    (
        "DerivedView",
        ".spec.inputs[].startingPosition",
        Position,
        None,
        {"from": "Timestamp", "timestamp": TS},
    ),
    ("DerivedView", ".spec.inputs[].startingPosition", Position, None, {"from": "Offsets"}),
    (
        "DerivedView",
        ".spec.inputs[].startingPosition",
        Position,
        None,
        {"from": "Offsets", "offsets": {"0": 1}},
    ),
    (
        "DerivedView",
        ".spec.inputs[].startingPosition",
        Position,
        None,
        {"from": "Latest", "offsets": {"0": 1}},
    ),
    (
        "DerivedView",
        ".spec.inputs[].startingPosition",
        Position,
        None,
        {"from": "Earliest", "timestamp": TS},
    ),
    ("DerivedView", ".spec.inputs[].startingPosition", Position, None, {"from": "Latest"}),
    ("DerivedView", ".spec.spark.sparkConf", SparkSettings, "sparkConf", {"sql.x": "1"}),
    ("DerivedView", ".spec.spark.sparkConf", SparkSettings, "sparkConf", {"spark.sql.x": "1"}),
    *(
        ("DerivedView", ".spec.spark.sparkConf", SparkSettings, "sparkConf", {key: "x"})
        for key in (
            *("spark.master", "spark.sql.streaming.checkpointLocation", "spark.app.name"),
            *("spark.kubernetes.namespace", "spark.kubernetes.container.image"),
            *("spark.kubernetes.authenticate.driver.serviceAccountName", "spark.driver.memory"),
            *("spark.kafka.bootstrap.servers", "spark.kafka.clusters.a.auth.bootstrap.servers"),
            *(
                "spark.masters",
                "spark.sql.streaming.checkpointLocation.x",
                "spark.driver.maxResultSize",
            ),
            *(
                "spark.kubernetes.driver.label.team",
                "spark.kafka.clusters.a.target.bootstrap.servers.regex",
            ),
        )
    ),
    ("StreamJob", ".spec.spark.sparkConf", SparkSettings, "sparkConf", {"spark.master": "k8s://x"}),
    ("StreamJob", ".spec.spark.sparkConf", SparkSettings, "sparkConf", {"spark.sql.x": "1"}),
    ("StreamJob", ".spec.env", JobSpec, "env", {"DISTRIBUTARY_X": "1"}),
    ("StreamJob", ".spec.env", JobSpec, "env", {"1A": "1"}),
    ("StreamJob", ".spec.env", JobSpec, "env", {"A_1": "1", "_b": "2"}),
]
JOB_BASE = {"image": "app:1", "mainApplicationFile": "local:///app/job.py"}


@pytest.mark.parametrize(("kind", "path", "model", "wrap", "value"), CASES)
def test_cel_and_pydantic_agree(
    kind: str, path: str, model: type[BaseModel], wrap: str | None, value: Any
) -> None:
    document = {wrap: value} if wrap else value
    if model is JobSpec:
        document = {**JOB_BASE, **document}
    assert _cel_accepts(kind, path, value) == _pydantic_accepts(model, document)


@pytest.mark.parametrize(
    ("kind", "path", "old", "new", "allowed"),
    [
        ("Log", ".spec.partitions", 3, 6, True),
        ("Log", ".spec.partitions", 6, 3, False),
        ("Log", ".spec.topicName", "a.b", "a.b", True),
        ("Log", ".spec.topicName", "a.b", "a.c", False),
        ("Log", ".spec", {"topicName": "a"}, {}, False),
        ("Log", ".spec", {}, {"topicName": "a"}, False),
        ("Log", ".spec", {"topicName": "a"}, {"topicName": "a", "partitions": 9}, True),
        ("DerivedView", ".spec.output.log", "out", "other", False),
    ],
)
def test_transition_rules_refuse_what_kafka_cannot_do(
    kind: str, path: str, old: Any, new: Any, allowed: bool
) -> None:
    assert _cel_accepts(kind, path, new, old=old) == allowed
