"""CustomResourceDefinitions generated from the pydantic models.

Pydantic writes JSON Schema 2020-12; the API server wants a *structural* OpenAPI v3 schema. This
module bridges the two by rewriting pydantic's output rather than by making the models speak
OpenAPI: `$ref`s are inlined, `X | None` becomes `nullable`, `const` becomes a one-value `enum`,
titles and `additionalProperties: false` are dropped, and only scalar defaults are kept (a default
object would freeze every nested default into stored resources). `structural_problems` then checks
the result against the rules the API server enforces, so a drift is caught by a unit test and not
by `kubectl apply`.

We considered the `kube-custom-resource` package: it fits models written on its own base classes
and types, has no place for CEL rules, and would have put two sources of truth in `api/`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from distributary.api import KINDS, Kind
from distributary.api.common import API_GROUP, API_VERSION

Schema = dict[str, Any]

_READY = '.status.conditions[?(@.type=="Ready")]'
PRINTER_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "Log": [
        {"name": "Ready", "type": "string", "jsonPath": f"{_READY}.status"},
        {"name": "Reason", "type": "string", "jsonPath": f"{_READY}.reason"},
        {"name": "Topic", "type": "string", "jsonPath": ".status.topicName"},
        {"name": "Partitions", "type": "integer", "jsonPath": ".spec.partitions"},
        {"name": "Records", "type": "integer", "jsonPath": ".status.records"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "DerivedView": [
        {"name": "Ready", "type": "string", "jsonPath": f"{_READY}.status"},
        {"name": "Reason", "type": "string", "jsonPath": f"{_READY}.reason"},
        {
            "name": "Serving",
            "type": "integer",
            "jsonPath": ".status.servingRevision",
            "description": "The revision readers follow.",
        },
        {"name": "Lag", "type": "integer", "jsonPath": ".status.lag"},
        {"name": "Output", "type": "string", "jsonPath": ".status.outputTopic", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "StreamJob": [
        {"name": "Ready", "type": "string", "jsonPath": f"{_READY}.status"},
        {"name": "Reason", "type": "string", "jsonPath": f"{_READY}.reason"},
        {"name": "Revision", "type": "integer", "jsonPath": ".status.revision"},
        {"name": "Lag", "type": "integer", "jsonPath": ".status.lag"},
        {
            "name": "State",
            "type": "string",
            "jsonPath": ".status.sparkApplication.state",
            "priority": 1,
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "Sink": [
        {"name": "Ready", "type": "string", "jsonPath": f"{_READY}.status"},
        {"name": "Reason", "type": "string", "jsonPath": f"{_READY}.reason"},
        {"name": "Topic", "type": "string", "jsonPath": ".status.topic"},
        {"name": "Lag", "type": "integer", "jsonPath": ".status.lag"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "Source": [
        {"name": "Ready", "type": "string", "jsonPath": f"{_READY}.status"},
        {"name": "Reason", "type": "string", "jsonPath": f"{_READY}.reason"},
        {"name": "Connector", "type": "string", "jsonPath": ".status.connectorState"},
        {
            "name": "Lag",
            "type": "integer",
            "jsonPath": ".status.slot.lagBytes",
            "description": "WAL bytes the connector has not confirmed.",
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
}

_SCALARS = (str, int, float, bool)
_DROP = ("title", "$defs")


def _resolve(node: Any, defs: dict[str, Schema]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is not None:
        target = defs[ref.removeprefix("#/$defs/")]
        node = {**target, **node}
    return {key: _resolve(value, defs) for key, value in node.items()}


def _int_or_string_rule(branches: list[Schema]) -> Schema | None:
    """The constraints of an int-or-string's integer and string branches as one CEL rule."""
    checks: dict[str, list[str]] = {"integer": [], "string": []}
    for branch in branches:
        kind = branch.get("type")
        if kind not in checks:
            continue
        if "minimum" in branch:
            checks[kind].append(f"self >= {branch['minimum']}")
        if "maximum" in branch:
            checks[kind].append(f"self <= {branch['maximum']}")
        if "maxLength" in branch:
            checks[kind].append(f"size(self) <= {branch['maxLength']}")
        if "pattern" in branch:
            checks[kind].append(f"self.matches('{branch['pattern']}')")
    if not checks["integer"] and not checks["string"]:
        return None
    whole = " && ".join(checks["integer"]) or "true"
    text = " && ".join(checks["string"]) or "true"
    patterns = [b["pattern"] for b in branches if "pattern" in b]
    shape = f" matching {patterns[0]}" if patterns else ""
    return {
        "rule": f"type(self) == int ? ({whole}) : ({text})",
        "message": f"must be a non-negative whole number or a string{shape}",
    }


def _collapse_any_of(node: Schema) -> Schema:
    branches = node.pop("anyOf")
    non_null = [b for b in branches if b.get("type") != "null"]
    nullable = len(non_null) < len(branches)
    if node.get("x-kubernetes-int-or-string"):
        # The API server accepts exactly `anyOf: [{type: integer}, {type: string}]` here (a
        # structural schema allows nothing else in anyOf), so each branch's own constraints
        # become one CEL rule.
        node.pop("type", None)
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        lengths = [b["maxLength"] for b in non_null if "maxLength" in b]
        if lengths:  # bounds the cost of the CEL rule below, as the API server estimates it
            node["maxLength"] = max(lengths)
        rule = _int_or_string_rule(non_null)
        if rule is not None:
            node["x-kubernetes-validations"] = [*node.get("x-kubernetes-validations", []), rule]
    elif len(non_null) == 1:
        # The outer node's keys (description, CEL rules) win over the branch's.
        node = {**non_null[0], **node}
    else:
        raise ValueError(f"a union the API server cannot express: {branches}")
    if nullable:
        node["nullable"] = True
    return node


def _convert(node: Any) -> Any:
    if isinstance(node, list):
        return [_convert(item) for item in node]
    if not isinstance(node, dict):
        return node
    if "anyOf" in node:
        node = _collapse_any_of(dict(node))
    node = {k: v for k, v in node.items() if k not in _DROP}
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "default" in node and (node["default"] is None or not isinstance(node["default"], _SCALARS)):
        del node["default"]
    if "properties" in node and node.get("additionalProperties") is False:
        del node["additionalProperties"]
    if node.get("additionalProperties") is False:
        del node["additionalProperties"]
    if node.get("properties") == {} and "additionalProperties" not in node:
        node.pop("properties")
    for key in ("properties",):
        if key in node:
            node[key] = {name: _convert(sub) for name, sub in node[key].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = _convert(node[key])
    if "anyOf" in node:
        node["anyOf"] = [_convert(b) for b in node["anyOf"]]
    if node.get("required") == []:
        del node["required"]
    return node


def openapi_schema(model: type[BaseModel]) -> Schema:
    """The structural OpenAPI v3 schema of a pydantic model, as a CRD embeds it."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    converted = _convert(_resolve(raw, defs))
    assert isinstance(converted, dict)
    return converted


def _kind_schema(kind: Kind) -> Schema:
    fields = kind.model.model_fields
    spec_model = fields["spec"].annotation
    status_model = fields["status"].annotation
    assert isinstance(spec_model, type)
    assert issubclass(spec_model, BaseModel)
    status_type = next(t for t in getattr(status_model, "__args__", ()) if t is not type(None))
    status = openapi_schema(status_type)
    status.pop("required", None)
    doc = (kind.model.__doc__ or "").strip()
    schema: Schema = {
        "type": "object",
        "description": doc,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": openapi_schema(spec_model),
            "status": status,
        },
    }
    if fields["spec"].is_required():
        schema["required"] = ["spec"]
    return schema


def crd(kind: Kind) -> Schema:
    """The CustomResourceDefinition of one kind."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{API_GROUP}"},
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": [kind.short_name],
                "categories": ["distributary"],
            },
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS[kind.kind],
                    "schema": {"openAPIV3Schema": _kind_schema(kind)},
                }
            ],
        },
    }


def crd_files() -> dict[str, str]:
    """Every CRD as YAML text, by file name."""
    header = (
        "# Generated from operator/distributary/api by `distributary crds --out crds/`. "
        "Do not edit.\n"
    )
    return {
        f"{API_GROUP}_{kind.plural}.yaml": header
        + yaml.safe_dump(crd(kind), sort_keys=False, width=100)
        for kind in KINDS.values()
    }


def write_crds(out_dir: Path) -> list[Path]:
    """Write every CRD into `out_dir`, returning the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in crd_files().items():
        path = out_dir / name
        path.write_text(text)
        written.append(path)
    return written


def drift(out_dir: Path) -> list[str]:
    """The files in `out_dir` that differ from what the models generate, one line each."""
    problems = []
    for name, text in crd_files().items():
        path = out_dir / name
        if not path.exists():
            problems.append(f"{path}: missing")
        elif path.read_text() != text:
            problems.append(f"{path}: differs from the models")
    return problems


_FORBIDDEN_KEYS = (
    "$ref",
    "$defs",
    "const",
    "definitions",
    "title",
    "$schema",
    "patternProperties",
    "dependencies",
    "additionalItems",
    "exclusiveMinimum",
    "exclusiveMaximum",
)


def _walk(node: Schema, path: str) -> Iterator[tuple[str, Schema]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def structural_problems(schema: Schema) -> list[str]:
    """Where a schema breaks the API server's structural rules (empty when it keeps them)."""
    problems = []
    for path, node in _walk(schema, ""):
        where = path or "."
        special = node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields"
        )
        if "type" not in node and not special:
            problems.append(f"{where}: no type")
        if node.get("type") == "null":
            problems.append(f"{where}: type null")
        for key in _FORBIDDEN_KEYS:
            if key in node:
                problems.append(f"{where}: {key} is not allowed")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: additionalProperties beside properties")
        if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
            problems.append(f"{where}: anyOf outside int-or-string")
        if "anyOf" in node and node["anyOf"] != [{"type": "integer"}, {"type": "string"}]:
            problems.append(f"{where}: int-or-string anyOf must be [integer, string] alone")
        if node.get("type") == "array" and "items" not in node:
            problems.append(f"{where}: array without items")
        if node.get("x-kubernetes-list-type") == "map":
            items = node.get("items", {})
            for key in node.get("x-kubernetes-list-map-keys", []):
                if key not in items.get("required", []) and "default" not in items.get(
                    "properties", {}
                ).get(key, {}):
                    problems.append(
                        f"{where}: list map key {key} is neither required nor defaulted"
                    )
        if "default" in node and node.get("nullable") is not True and node["default"] is None:
            problems.append(f"{where}: null default on a field that is not nullable")
    return problems
