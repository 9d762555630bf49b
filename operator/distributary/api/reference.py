"""The API reference (`docs/reference.md`), rendered from the models.

The reference is generated so that it cannot disagree with the API: names and nesting come from the
pydantic models (camelCase aliases, which model a field holds, its default), and every constraint is
read from the same structural schema the CRDs embed (`crd.openapi_schema`), so what the page says is
what the API server enforces. Each model gets one section, written where it first appears; later
uses link to it. A unit test fails when the committed page differs from `reference_markdown()`.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from distributary.api import KINDS, Kind
from distributary.api.common import GROUP_VERSION
from distributary.api.crd import PRINTER_COLUMNS, Schema, openapi_schema

_HEADER = """\
# API reference

Generated from `operator/distributary/api/` by `distributary.api.reference.reference_markdown()`;
do not edit. Every kind has the API version `{group_version}`, standard Kubernetes
`metadata`, a `spec` written by people and a `status` written by the operator. Field names are as
written in YAML. A rule is a CEL expression the API server checks (`oldSelf` is the value before
an update); `distributary validate` checks the same rules before anything is applied.
"""

_SCALAR_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _cell(text: str) -> str:
    """Text made safe for one Markdown table cell."""
    return text.replace("\n", " ").replace("|", "\\|")


def _code(value: object) -> str:
    text = value if isinstance(value, str) and value else json.dumps(value)
    return f"`{text}`"


def _range(low: object, high: object, unit: str) -> str:
    if low is not None and high is not None:
        return f"{low} to {high}{unit}"
    return f"at least {low}{unit}" if low is not None else f"at most {high}{unit}"


def _strip(annotation: Any) -> tuple[Any, bool]:
    """The annotation without `Annotated` and `None`, and whether `None` was allowed."""
    if get_origin(annotation) is Annotated:
        return _strip(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        optional = len(args) < len(get_args(annotation))
        if len(args) == 1:
            return _strip(args[0])[0], optional
        return annotation, optional
    return annotation, False


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _type_name(annotation: Any) -> str:
    """How a field's type reads in the reference, with a link for a nested model."""
    bare, _ = _strip(annotation)
    origin = get_origin(bare)
    if _is_model(bare):
        return f"[{bare.__name__}](#{bare.__name__.lower()})"
    if origin is Literal:
        return "enum: " + ", ".join(_code(a) for a in get_args(bare))
    if origin is list:
        return f"list of {_type_name(get_args(bare)[0])}"
    if origin is dict:
        return f"map of string to {_type_name(get_args(bare)[1])}"
    if origin in (Union, types.UnionType):
        names = {_type_name(a) for a in get_args(bare) if a is not type(None)}
        return " or ".join(sorted(names))
    return _SCALAR_NAMES.get(bare, getattr(bare, "__name__", str(bare)))


def _nested_models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The models a field's type holds (directly, in a list, or as map values)."""
    bare, _ = _strip(annotation)
    if _is_model(bare):
        yield bare
    for arg in get_args(bare):
        yield from _nested_models(arg)


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "its fields' defaults"
        return _code(value)
    if field.default is None:
        return "unset"
    return _code(field.default)


def _scalar_constraints(node: Schema) -> list[str]:
    found = []
    if "minimum" in node or "maximum" in node:
        found.append(_range(node.get("minimum"), node.get("maximum"), ""))
    if "minLength" in node or "maxLength" in node:
        found.append(_range(node.get("minLength"), node.get("maxLength"), " characters"))
    if "pattern" in node:
        found.append(f"pattern {_code(node['pattern'])}")
    if "format" in node:
        found.append(f"format {node['format']}")
    return found


def _constraints(node: Schema, holds_model: bool) -> list[str]:
    """The constraints of a field's schema node, in words; a nested model's rules are its own."""
    found = _scalar_constraints(node)
    if "minItems" in node or "maxItems" in node:
        found.append(_range(node.get("minItems"), node.get("maxItems"), " items"))
    if "maxProperties" in node:
        found.append(f"at most {node['maxProperties']} entries")
    if node.get("x-kubernetes-list-type") == "map":
        found.append("one item per " + ", ".join(node.get("x-kubernetes-list-map-keys", [])))
    for branch in node.get("anyOf", []):
        words = _scalar_constraints(branch)
        if words:
            found.append(f"as {branch.get('type')}: " + ", ".join(words))
    for key in ("items", "additionalProperties"):
        inner = node.get(key)
        if isinstance(inner, dict) and "properties" not in inner:
            words = _constraints(inner, holds_model=False)
            if words:
                found.append("each: " + ", ".join(words))
    if not holds_model or "properties" not in node:
        found.extend(f"rule {_code(r['rule'])}" for r in node.get("x-kubernetes-validations", []))
    return found


def _model_section(model: type[BaseModel]) -> list[str]:
    """One model's section: its docstring, its rules and a table of its fields."""
    schema = openapi_schema(model)
    lines = [f"### {model.__name__}", "", (model.__doc__ or "").strip(), ""]
    rules = schema.get("x-kubernetes-validations", [])
    if rules:
        lines += ["Rules:", ""]
        lines += [f"- {_code(r['rule'])}: {r['message']}" for r in rules]
        lines.append("")
    lines += [
        "| Field | Type | Default | Constraints | Description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, field in model.model_fields.items():
        alias = field.alias or name
        node = schema.get("properties", {}).get(alias, {})
        holds_model = next(_nested_models(field.annotation), None) is not None
        cells = [
            _code(alias),
            _type_name(field.annotation),
            _default(field),
            "; ".join(_constraints(node, holds_model)),
            field.description or "",
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines.append("")
    return lines


def _models_under(root: type[BaseModel], seen: set[type[BaseModel]]) -> list[type[BaseModel]]:
    """`root` and the models it holds, depth first, leaving out those already in `seen`."""
    if root in seen:
        return []
    seen.add(root)
    found = [root]
    for field in root.model_fields.values():
        for nested in _nested_models(field.annotation):
            found += _models_under(nested, seen)
    return found


def _part_model(kind: Kind, part: str) -> type[BaseModel]:
    """The model of a kind's `spec` or `status`."""
    return next(_nested_models(kind.model.model_fields[part].annotation))


def _kind_section(kind: Kind, seen: set[type[BaseModel]]) -> list[str]:
    columns = ", ".join(c["name"] for c in PRINTER_COLUMNS[kind.kind])
    spec, status = _part_model(kind, "spec"), _part_model(kind, "status")
    lines = [
        f"## {kind.kind}",
        "",
        (kind.model.__doc__ or "").strip(),
        "",
        f"- `apiVersion: {GROUP_VERSION}`, `kind: {kind.kind}`",
        f"- plural `{kind.plural}`, short name `{kind.short_name}`, category `distributary`",
        f"- `spec`: [{spec.__name__}](#{spec.__name__.lower()}); "
        f"`status`: [{status.__name__}](#{status.__name__.lower()})",
        f"- `kubectl get {kind.short_name}` shows: {columns}",
        "",
    ]
    for model in _models_under(spec, seen) + _models_under(status, seen):
        lines += _model_section(model)
    return lines


def reference_markdown() -> str:
    """The API reference as Markdown: every kind, its spec and status models, field by field."""
    lines = [_HEADER.format(group_version=GROUP_VERSION)]
    seen: set[type[BaseModel]] = set()
    for kind in KINDS.values():
        lines += _kind_section(kind, seen)
    return "\n".join(lines).rstrip("\n") + "\n"
