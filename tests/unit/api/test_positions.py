"""Starting positions: which fields go with which `from`, for views and jobs alike."""

from __future__ import annotations

from typing import Any

import pytest

from distributary.api import ResourceError, parse_resource
from distributary.api.common import GROUP_VERSION, Position


def _view_starting(position: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "DerivedView",
        "metadata": {"name": "v"},
        "spec": {
            "inputs": [{"log": "clicks", "alias": "c", "startingPosition": position}],
            "sql": "SELECT * FROM c",
        },
    }


def _job_starting(position: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "StreamJob",
        "metadata": {"name": "j"},
        "spec": {
            "image": "app:1",
            "mainApplicationFile": "local:///app/job.py",
            "inputs": [{"log": "clicks", "startingPosition": position}],
        },
    }


@pytest.mark.parametrize(
    "position",
    [
        {"from": "Earliest"},
        {"from": "Latest"},
        {"from": "Timestamp", "timestamp": "2025-01-01T00:00:00Z"},
        {"from": "Offsets", "offsets": {"0": 42, "3": 0}},
    ],
)
def test_each_kind_of_position_is_accepted_with_its_own_field(position: dict[str, Any]) -> None:
    parsed = Position.model_validate(position)
    assert parsed.to_yaml_dict() == position


@pytest.mark.parametrize(
    ("position", "message"),
    [
        ({"from": "Timestamp"}, "timestamp is required when from is Timestamp"),
        ({"from": "Offsets"}, "offsets is required when from is Offsets"),
        (
            {"from": "Earliest", "timestamp": "2025-01-01T00:00:00Z"},
            "timestamp is only read when from is Timestamp",
        ),
        ({"from": "Latest", "offsets": {"0": 1}}, "offsets is only read when from is Offsets"),
        ({"from": "Offsets", "offsets": {"p0": 1}}, "offsets key 'p0' is not a partition number"),
    ],
)
@pytest.mark.parametrize("document", [_view_starting, _job_starting], ids=["view", "job"])
def test_a_position_without_its_field_or_with_another_is_refused(
    position: dict[str, Any], message: str, document: Any
) -> None:
    with pytest.raises(ResourceError) as caught:
        parse_resource(document(position))
    assert caught.value.problems == [f"spec.inputs[0].startingPosition: {message}"]


def test_an_offset_is_never_negative() -> None:
    with pytest.raises(ResourceError) as caught:
        parse_resource(_view_starting({"from": "Offsets", "offsets": {"0": -1}}))
    assert caught.value.problems[0].startswith("spec.inputs[0].startingPosition.offsets.0: ")


def test_an_unknown_position_is_refused() -> None:
    with pytest.raises(ResourceError) as caught:
        parse_resource(_view_starting({"from": "Beginning"}))
    assert caught.value.problems[0].startswith("spec.inputs[0].startingPosition.from: ")
