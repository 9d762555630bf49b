"""Every generated CRD schema is one a real API server accepts.

`structural_problems` is the generator's own check; the tests here walk the schemas independently,
and pair each schema node with the model field it came from, so that a bug shared by the converter
and its checker still fails a test.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from distributary.api import KINDS, Kind
from distributary.api.crd import crd, structural_problems

Schema = dict[str, Any]
CRDS = {name: crd(kind) for name, kind in KINDS.items()}
SPECIAL = ("x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields")


def _root(name: str) -> Schema:
    schema = CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert isinstance(schema, dict)
    return schema


def _every_dict(node: Any, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Every mapping anywhere in the schema, whatever key it sits under."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _every_dict(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _every_dict(value, f"{path}/{index}")


def _schema_nodes(node: Schema, path: str = "") -> Iterator[tuple[str, Schema, bool]]:
    """Every schema node, with whether it sits under an array (uncorrelatable for oldSelf)."""
    yield from _nodes_under(node, path, False)


def _nodes_under(node: Schema, path: str, in_array: bool) -> Iterator[tuple[str, Schema, bool]]:
    yield path or ".", node, in_array
    for name, sub in node.get("properties", {}).items():
        yield from _nodes_under(sub, f"{path}.{name}", in_array)
    if isinstance(node.get("items"), dict):
        keyed = node.get("x-kubernetes-list-type") in ("map", "set")
        yield from _nodes_under(node["items"], f"{path}[]", in_array or not keyed)
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes_under(node["additionalProperties"], f"{path}{{}}", in_array)


def _bare(annotation: Any) -> tuple[Any, bool]:
    """The annotation without Annotated and None, and whether it allows None."""
    if get_origin(annotation) is Annotated:
        return _bare(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        optional = len(members) < len(get_args(annotation))
        if len(members) == 1:
            return _bare(members[0])[0], optional
        return tuple(_bare(m)[0] for m in members), optional
    return annotation, False


def _fields(model: type[BaseModel], node: Schema, path: str) -> Iterator[tuple[str, Any, Schema]]:
    """(path, annotation, schema node) for every field of `model` and of the models it holds."""
    for name, field in model.model_fields.items():
        alias = field.alias or name
        assert alias in node.get("properties", {}), f"{path}.{alias} is not in the schema"
        yield f"{path}.{alias}", field.annotation, node["properties"][alias]
        yield from _inner(field.annotation, node["properties"][alias], f"{path}.{alias}")


def _inner(annotation: Any, node: Schema, path: str) -> Iterator[tuple[str, Any, Schema]]:
    bare, _ = _bare(annotation)
    if isinstance(bare, type) and issubclass(bare, BaseModel):
        yield from _fields(bare, node, path)
    elif get_origin(bare) in (list, dict):
        key, sub_path = (
            ("items", f"{path}[]")
            if get_origin(bare) is list
            else ("additionalProperties", f"{path}{{}}")
        )
        element = get_args(bare)[-1]
        yield sub_path, element, node[key]
        yield from _inner(element, node[key], sub_path)


def _model_fields(kind: Kind) -> Iterator[tuple[str, Any, Schema]]:
    root = _root(kind.kind)
    for part in ("spec", "status"):
        model, _ = _bare(kind.model.model_fields[part].annotation)
        yield from _fields(model, root["properties"][part], f".{part}")


KIND_NAMES = list(KINDS)


@pytest.mark.parametrize("name", KIND_NAMES)
def test_the_generators_own_check_finds_nothing(name: str) -> None:
    assert structural_problems(_root(name)) == []


@pytest.mark.parametrize("name", KIND_NAMES)
def test_no_json_schema_construct_the_api_server_refuses_is_left(name: str) -> None:
    for path, node in _every_dict(_root(name)):
        for key in ("$ref", "$defs", "definitions", "const", "title", "$schema"):
            assert key not in node, f"{name}{path}: {key}"
        assert node.get("type") != "null", f"{name}{path}: type null"
        assert node.get("additionalProperties") is not False, f"{name}{path}"


@pytest.mark.parametrize("name", KIND_NAMES)
def test_every_node_has_a_type_unless_it_is_int_or_string_or_preserves_unknown_fields(
    name: str,
) -> None:
    for path, node, _ in _schema_nodes(_root(name)):
        if any(node.get(flag) for flag in SPECIAL):
            assert "type" not in node, f"{name}{path}: a type beside {SPECIAL}"
            if "anyOf" in node:  # the one form a structural schema allows
                assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], f"{name}{path}"
        else:
            assert node.get("type") in (
                "object",
                "array",
                "string",
                "integer",
                "number",
                "boolean",
            ), f"{name}{path}: no type"


@pytest.mark.parametrize("name", KIND_NAMES)
def test_properties_and_additional_properties_never_share_a_node(name: str) -> None:
    for path, node, _ in _schema_nodes(_root(name)):
        assert not ("properties" in node and "additionalProperties" in node), f"{name}{path}"
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), f"{name}{path}: array without items"


@pytest.mark.parametrize("name", KIND_NAMES)
def test_a_field_that_may_be_unset_is_nullable_and_no_other_is(name: str) -> None:
    for path, annotation, node in _model_fields(KINDS[name]):
        _, optional = _bare(annotation)
        assert bool(node.get("nullable")) == optional, f"{name}{path}"


@pytest.mark.parametrize("name", KIND_NAMES)
def test_a_field_that_takes_an_integer_or_a_string_is_int_or_string(name: str) -> None:
    seen = 0
    for path, annotation, node in _model_fields(KINDS[name]):
        bare, _ = _bare(annotation)
        both = isinstance(bare, tuple) and set(bare) == {int, str}
        seen += both
        assert bool(node.get("x-kubernetes-int-or-string")) == both, f"{name}{path}"
    assert seen == {"Log": 2, "DerivedView": 1, "Source": 1}.get(name, 0)


@pytest.mark.parametrize("name", KIND_NAMES)
def test_every_model_field_is_in_the_schema_and_nothing_else_is(name: str) -> None:
    paired = {path for path, _, _ in _model_fields(KINDS[name])}
    in_schema = {
        path for path, _, _ in _schema_nodes(_root(name)) if path.startswith((".spec.", ".status."))
    }
    assert in_schema == paired


@pytest.mark.parametrize("name", KIND_NAMES)
def test_the_root_requires_a_spec_where_one_is_needed_and_leaves_metadata_alone(name: str) -> None:
    root = _root(name)
    assert root["type"] == "object"
    # A Log's spec may be left out (every field has a default); a view or job needs one.
    assert root.get("required") == (None if name == "Log" else ["spec"])
    assert root["properties"]["metadata"] == {"type": "object"}
    assert "required" not in root["properties"]["status"]


def _default_problems(node: Schema) -> list[str]:
    value = node["default"]
    kinds: dict[str, type | tuple[type, ...]] = {
        "string": str,
        "integer": int,
        "boolean": bool,
        "number": (int, float),
    }
    problems = []
    if "type" in node and not isinstance(value, kinds[node["type"]]):
        problems.append(f"{value!r} is not of type {node['type']}")
    if "enum" in node and value not in node["enum"]:
        problems.append(f"{value!r} is not in {node['enum']}")
    if "pattern" in node and re.search(node["pattern"], str(value)) is None:
        problems.append(f"{value!r} does not match {node['pattern']}")
    if "minimum" in node and value < node["minimum"]:
        problems.append(f"{value!r} is below {node['minimum']}")
    if "maximum" in node and value > node["maximum"]:
        problems.append(f"{value!r} is above {node['maximum']}")
    if "maxLength" in node and len(value) > node["maxLength"]:
        problems.append(f"{value!r} is too long")
    return problems


@pytest.mark.parametrize("name", KIND_NAMES)
def test_every_default_is_a_scalar_that_its_own_schema_accepts(name: str) -> None:
    defaults = 0
    for path, node, _ in _schema_nodes(_root(name)):
        if "default" in node:
            defaults += 1
            assert isinstance(node["default"], str | int | float | bool), f"{name}{path}"
            assert _default_problems(node) == [], f"{name}{path}"
    assert defaults > 0


@pytest.mark.parametrize("name", KIND_NAMES)
def test_a_map_list_has_its_keys_required(name: str) -> None:
    for path, node, _ in _schema_nodes(_root(name)):
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"].get("required", [])), f"{name}{path}"


@pytest.mark.parametrize("name", KIND_NAMES)
def test_conditions_are_a_map_list_keyed_by_type(name: str) -> None:
    conditions = _root(name)["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert set(item["required"]) == {"type", "status", "lastTransitionTime", "reason"}
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
