"""What an input's watermark accepts: an identifier column and a delay in the project's units."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api import DerivedView, ResourceError, parse_resource
from distributary.api.common import GROUP_VERSION


def _view(watermark: Any) -> dict[str, Any]:
    item = {"log": "clicks", "alias": "c", "watermark": watermark}
    spec = {"inputs": [item], "sql": "SELECT * FROM c"}
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "DerivedView",
        "metadata": {"name": "v"},
        "spec": spec,
    }


def _only_problem(document: dict[str, Any]) -> str:
    with pytest.raises(ResourceError) as caught:
        parse_resource(document)
    assert len(caught.value.problems) == 1, caught.value.problems
    return caught.value.problems[0]


@pytest.mark.parametrize("delay", ["0s", "500ms", "30s", "10m", "2h", "1d"])
def test_a_watermark_with_a_column_and_a_delay_is_accepted(delay: str) -> None:
    view = parse_resource(_view({"column": "ts", "delay": delay}))
    assert isinstance(view, DerivedView)
    watermark = view.spec.inputs[0].watermark
    assert watermark is not None
    assert (watermark.column, watermark.delay) == ("ts", delay)
    assert view.spec.inputs[0].to_yaml_dict()["watermark"] == {"column": "ts", "delay": delay}


def test_an_input_has_no_watermark_unless_it_declares_one() -> None:
    body = _view(None)
    del body["spec"]["inputs"][0]["watermark"]
    plain = parse_resource(body)
    assert isinstance(plain, DerivedView)
    assert plain.spec.inputs[0].watermark is None


@pytest.mark.parametrize("delay", ["10 seconds", "10", "-5s", "1y"])
def test_a_delay_is_a_duration_of_the_projects_form(delay: str) -> None:
    problem = _only_problem(_view({"column": "ts", "delay": delay}))
    assert problem.startswith("spec.inputs[0].watermark.delay: ")


@pytest.mark.parametrize("missing", ["column", "delay"])
def test_the_column_and_the_delay_are_both_required(missing: str) -> None:
    watermark = {"column": "ts", "delay": "5s"}
    del watermark[missing]
    problem = _only_problem(_view(watermark))
    assert problem == f"spec.inputs[0].watermark.{missing}: required field is missing"


def test_the_column_is_a_plain_column_name() -> None:
    problem = _only_problem(_view({"column": "event.ts", "delay": "5s"}))
    assert problem.startswith("spec.inputs[0].watermark.column: ")


def test_an_unknown_watermark_field_is_refused() -> None:
    problem = _only_problem(_view({"column": "ts", "delay": "5s", "lateness": "1m"}))
    assert problem.startswith("spec.inputs[0].watermark.lateness: ")
