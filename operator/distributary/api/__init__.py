"""The Distributary API: pydantic models of the kinds, the only source of the CRDs.

`parse_resource` turns one YAML document into a typed resource, with errors that name the resource
and the field; `KINDS` maps each kind to its model and its CRD's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from distributary.api.common import API_GROUP, API_VERSION, GROUP_VERSION, Condition
from distributary.api.job import StreamJob
from distributary.api.log import Log
from distributary.api.sink import Sink
from distributary.api.source import Source
from distributary.api.view import DerivedView
from distributary.errors import DistributaryError

ResourceT = TypeVar("ResourceT", Log, DerivedView, StreamJob, Source, Sink)

Resource = Log | DerivedView | StreamJob | Source | Sink

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "GROUP_VERSION",
    "KINDS",
    "Condition",
    "DerivedView",
    "Kind",
    "Log",
    "Resource",
    "ResourceError",
    "Sink",
    "Source",
    "StreamJob",
    "label_part",
    "parse_resource",
    "quoted",
]


@dataclass(frozen=True)
class Kind:
    """A kind's model and the names its CRD gives it."""

    kind: str
    model: type[BaseModel]
    plural: str
    singular: str
    short_name: str


KINDS: dict[str, Kind] = {
    "Log": Kind("Log", Log, "logs", "log", "dlog"),
    "DerivedView": Kind("DerivedView", DerivedView, "derivedviews", "derivedview", "dview"),
    "StreamJob": Kind("StreamJob", StreamJob, "streamjobs", "streamjob", "sjob"),
    "Source": Kind("Source", Source, "sources", "source", "dsrc"),
    "Sink": Kind("Sink", Sink, "sinks", "sink", "dsink"),
}


class ResourceError(DistributaryError, ValueError):
    """A resource that is not valid, with one message per problem, each naming its field."""

    def __init__(self, resource: str, problems: list[str]) -> None:
        self.resource = resource
        self.problems = problems
        super().__init__("; ".join(f"{resource}: {p}" for p in problems))


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += ("." if path else "") + part
    return path


# Pydantic tags an error from a union (int-or-string fields) with the member it tried; people know
# only the field, and one mistake should read as one problem.
_UNION_MEMBERS = ("constrained-str", "constrained-int", "str", "int")


def _field_loc(error: Any) -> tuple[int | str, ...]:
    return tuple(
        part
        for part in error["loc"]
        if not str(part).startswith("function-after") and part not in _UNION_MEMBERS
    )


def _union_member_fits(error: Any) -> bool:
    """Whether the error comes from the union member of the input's own type (int or str)."""
    members = [str(part) for part in error["loc"] if part in _UNION_MEMBERS]
    if not members:
        return True
    wanted = "int" if isinstance(error.get("input"), int) else "str"
    return members[-1].endswith(wanted)


def _first_per_field(errors: list[Any]) -> list[Any]:
    firsts: dict[tuple[int | str, ...], Any] = {}
    for error in sorted(errors, key=lambda e: not _union_member_fits(e)):
        firsts.setdefault(_field_loc(error), error)
    order = {_field_loc(e): i for i, e in reversed(list(enumerate(errors)))}
    return sorted(firsts.values(), key=lambda e: order[_field_loc(e)])


def _problem(error: Any) -> str:
    loc = _field_loc(error)
    path = _field_path(loc)
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field: remove it or check its spelling"
    elif error["type"] == "missing":
        message = "required field is missing"
    elif error["type"] == "string_pattern_mismatch":
        message = f"{quoted(error['input'])} has the wrong form ({message})"
    return f"{path}: {message}" if path else message


# A label part longer than this is cut: a Kubernetes name has at most 253 characters, so a name
# a little too long still shows whole.
_LABEL_PART = 320


def label_part(value: Any) -> str:
    """A kind, namespace or name as a message shows it, before it is known to be valid: as
    written when it is printable text without spaces, else quoted with escapes (a line break
    never splits the message), and cut short well past the longest name Kubernetes allows."""
    plain = isinstance(value, str) and value.isprintable() and " " not in value
    text = value if plain else repr(value)
    return text if len(text) <= _LABEL_PART else f"{text[:_LABEL_PART]}... ({len(text)} characters)"


# A value quoted in a message is cut past this many characters: enough to recognise it by.
_QUOTED = 80


def quoted(value: Any) -> str:
    """A value as a message quotes it: its repr (so a line break shows as an escape), cut short
    past 80 characters, with its length."""
    text = repr(value)
    if len(text) <= _QUOTED:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} written out"
    return f"{text[:_QUOTED]}... ({size})"


def describe(document: dict[str, Any]) -> str:
    """How a resource is named in messages: `Kind/namespace/name`, or what is known of it."""
    kind = label_part(document.get("kind", "?"))
    metadata = document.get("metadata") or {}
    name = label_part(metadata.get("name", "?")) if isinstance(metadata, dict) else "?"
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    return f"{kind}/{label_part(namespace)}/{name}" if namespace else f"{kind}/{name}"


def parse_resource(document: dict[str, Any]) -> Resource:
    """Validate one document as a resource of one of `KINDS`, or raise `ResourceError`."""
    label = describe(document)
    api_version = document.get("apiVersion")
    if api_version != GROUP_VERSION:
        raise ResourceError(label, [f"apiVersion: {quoted(api_version)} is not {GROUP_VERSION!r}"])
    kind = KINDS.get(str(document.get("kind")))
    if kind is None:
        raise ResourceError(
            label, [f"kind: {quoted(document.get('kind'))} is not one of {', '.join(KINDS)}"]
        )
    try:
        resource = kind.model.model_validate(document)
    except ValidationError as exc:
        problems = [_problem(e) for e in _first_per_field(exc.errors())]
        raise ResourceError(label, problems) from None
    assert isinstance(resource, Log | DerivedView | StreamJob | Source | Sink)
    return resource


def parse_body(
    body: Mapping[str, Any], model: type[ResourceT], spec: Any = None
) -> ResourceT | str:
    """The resource the API object `body` holds (its identity and spec; with `spec`, as it was
    with that spec, e.g. an update's previous one), or the message saying why it cannot be
    used: a front end reports it as the resource's condition rather than failing on it."""
    meta = body.get("metadata") or {}
    document = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid")},
        "spec": body.get("spec") if spec is None else spec,
    }
    try:
        found = parse_resource(document)
    except ResourceError as exc:
        return str(exc)
    return found if isinstance(found, model) else f"not a {model.__name__}"


def owner_of(resource: Resource) -> dict[str, str]:
    """The fields of an ownerReference to `resource`. A resource read from files has no uid
    yet; a placeholder says so (the API server sets the real one)."""
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "name": resource.metadata.name,
        "uid": resource.metadata.uid or f"<uid of the {resource.kind}>",
    }
