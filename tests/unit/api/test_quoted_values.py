"""What a person wrote, quoted back in a message: one line whatever it holds, and short however
long it is, so a line break or a huge value never splits or floods a problem."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.api.invalid_documents import LOG, VIEW

from distributary.api import ResourceError, label_part, parse_resource, quoted
from distributary.api.admission import schema_problems
from distributary.graph import load

HUGE = "x" * 100_000


def _with(document: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    parent = changed
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return changed


@pytest.mark.parametrize("name", ["clicks", "page-views.v2", "a" * 254])
def test_a_plain_name_is_shown_as_written(name: str) -> None:
    assert label_part(name) == name


@pytest.mark.parametrize("name", ["two\nlines", "tab\there", "sep\u2028arated", "a b", 7, None])
def test_a_name_that_is_not_plain_text_is_shown_quoted_on_one_line(name: Any) -> None:
    shown = label_part(name)
    assert shown == repr(name)
    assert "\n" not in shown
    assert "\u2028" not in shown


def test_a_long_value_is_cut_and_its_length_given() -> None:
    shown = quoted(HUGE)
    assert len(shown) < 120
    assert shown.endswith("... (100000 characters)")


@pytest.mark.parametrize("field", ["kind", "name"])
def test_a_line_break_in_the_kind_or_name_leaves_the_model_error_on_one_line(field: str) -> None:
    path = ("kind",) if field == "kind" else ("metadata", "name")
    with pytest.raises(ResourceError) as caught:
        parse_resource(_with(LOG, path, "Lo\ng"))
    assert "\n" not in str(caught.value)
    assert "'Lo\\ng'" in str(caught.value)


@pytest.mark.parametrize(
    ("field", "document"),
    [
        (
            "spec.inputs[0].log",
            _with(VIEW, ("spec", "inputs"), [{"log": HUGE + "!", "alias": "c"}]),
        ),
        ("spec.output", _with(VIEW, ("spec", "output"), [HUGE])),
        ("metadata.name", _with(VIEW, ("metadata", "name"), HUGE)),
    ],
    ids=["pattern", "type", "length-and-pattern"],
)
def test_a_huge_value_is_quoted_short_by_the_schema_check(
    field: str, document: dict[str, Any]
) -> None:
    problems = [p for p in schema_problems(document) if p.startswith(field)]
    assert problems
    assert all(len(p) < 400 for p in problems), [len(p) for p in problems]


def test_validate_names_a_resource_with_a_huge_name_in_a_short_line(tmp_path: Path) -> None:
    path = tmp_path / "logs.yaml"
    path.write_text(yaml.safe_dump(_with(LOG, ("metadata", "name"), HUGE)))
    problems = load([tmp_path]).problems
    assert problems
    assert all(len(str(p)) < 1_000 for p in problems), [len(str(p)) for p in problems]
