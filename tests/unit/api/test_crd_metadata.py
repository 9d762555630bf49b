"""What each CRD says besides its schema: names, subresources, printer columns."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api import KINDS
from distributary.api.crd import crd

CRDS = {name: crd(kind) for name, kind in KINDS.items()}
SHORT_NAMES = {
    "Log": "dlog",
    "DerivedView": "dview",
    "StreamJob": "sjob",
    "Source": "dsrc",
    "Sink": "dsink",
}
PLURALS = {
    "Log": "logs",
    "DerivedView": "derivedviews",
    "StreamJob": "streamjobs",
    "Source": "sources",
    "Sink": "sinks",
}


def _version(name: str) -> dict[str, Any]:
    versions = CRDS[name]["spec"]["versions"]
    assert len(versions) == 1
    version = versions[0]
    assert isinstance(version, dict)
    return version


def _columns(name: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _version(name)["additionalPrinterColumns"]}


@pytest.mark.parametrize("name", list(KINDS))
def test_each_crd_names_its_kind_in_the_distributary_group(name: str) -> None:
    definition = CRDS[name]
    assert definition["apiVersion"] == "apiextensions.k8s.io/v1"
    assert definition["kind"] == "CustomResourceDefinition"
    assert definition["metadata"]["name"] == f"{PLURALS[name]}.distributary.dev"
    spec = definition["spec"]
    assert (spec["group"], spec["scope"]) == ("distributary.dev", "Namespaced")
    names = spec["names"]
    assert (names["kind"], names["listKind"]) == (name, f"{name}List")
    assert (names["plural"], names["singular"]) == (PLURALS[name], name.lower())


@pytest.mark.parametrize("name", list(KINDS))
def test_each_crd_has_its_short_name_and_the_distributary_category(name: str) -> None:
    names = CRDS[name]["spec"]["names"]
    assert names["shortNames"] == [SHORT_NAMES[name]]
    assert names["categories"] == ["distributary"]


@pytest.mark.parametrize("name", list(KINDS))
def test_v1alpha1_is_served_stored_and_has_the_status_subresource(name: str) -> None:
    version = _version(name)
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_shows_ready_reason_and_age(name: str) -> None:
    columns = _columns(name)
    ready = '.status.conditions[?(@.type=="Ready")]'
    assert columns["Ready"]["jsonPath"] == f"{ready}.status"
    assert columns["Reason"]["jsonPath"] == f"{ready}.reason"
    assert columns["Age"] == {
        "name": "Age",
        "type": "date",
        "jsonPath": ".metadata.creationTimestamp",
    }
    names = list(columns)
    assert names[:2] == ["Ready", "Reason"]
    assert names[-1] == "Age"


@pytest.mark.parametrize(
    ("name", "column", "path"),
    [
        ("Log", "Partitions", ".spec.partitions"),
        ("DerivedView", "Serving", ".status.servingRevision"),
        ("DerivedView", "Lag", ".status.lag"),
        ("StreamJob", "Lag", ".status.lag"),
    ],
)
def test_each_kind_shows_the_figures_people_watch(name: str, column: str, path: str) -> None:
    assert _columns(name)[column]["jsonPath"] == path
    assert _columns(name)[column]["type"] == "integer"


def _schema_at(name: str, json_path: str) -> dict[str, Any] | None:
    node: dict[str, Any] = _version(name)["schema"]["openAPIV3Schema"]
    for part in json_path.strip(".").split("."):
        node = node.get("properties", {}).get(part)
        if node is None:
            return None
    return node


@pytest.mark.parametrize("name", list(KINDS))
def test_every_column_reads_a_field_the_schema_has_with_the_columns_type(name: str) -> None:
    for column in _version(name)["additionalPrinterColumns"]:
        path = column["jsonPath"]
        if "[?" in path or path.startswith(".metadata."):
            continue
        node = _schema_at(name, path)
        assert node is not None, f"{name} column {column['name']}: {path} is not in the schema"
        assert node["type"] == column["type"], f"{name} column {column['name']}"
