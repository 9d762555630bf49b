"""docs/reference.md is generated from the models and covers every field."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from distributary.api import KINDS
from distributary.api.reference import reference_markdown

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "reference.md"
REGENERATE = "regenerate it with 'make docs' and commit docs/reference.md"


def _reachable(model: type[BaseModel], seen: set[type[BaseModel]]) -> None:
    """`model` and every API model its fields hold, found by name in their annotations."""
    if model in seen:
        return
    seen.add(model)
    for field in model.model_fields.values():
        for name in re.findall(r"\w+", repr(field.annotation)):
            if name in _MODELS_BY_NAME:
                _reachable(_MODELS_BY_NAME[name], seen)


def _all_subclasses(base: type[BaseModel]) -> list[type[BaseModel]]:
    found = []
    for sub in base.__subclasses__():
        found += [sub, *_all_subclasses(sub)]
    return found


_MODELS_BY_NAME = {
    m.__name__: m for m in _all_subclasses(BaseModel) if m.__module__.startswith("distributary.api")
}


def test_the_committed_reference_is_what_the_models_generate() -> None:
    assert REFERENCE.read_text() == reference_markdown(), (
        f"docs/reference.md is stale: {REGENERATE}"
    )


def test_every_kind_and_every_model_under_it_has_a_section() -> None:
    text = reference_markdown()
    for kind in KINDS.values():
        assert f"\n## {kind.kind}\n" in text
        seen: set[type[BaseModel]] = set()
        for part in ("spec", "status"):
            _reachable(_MODELS_BY_NAME[_part_name(kind.model, part)], seen)
        assert len(seen) >= 5
        for model in seen:
            assert f"\n### {model.__name__}\n" in text, model.__name__


def _part_name(model: type[BaseModel], part: str) -> str:
    names: list[str] = re.findall(r"\w+", repr(model.model_fields[part].annotation))
    return next(n for n in names if n in _MODELS_BY_NAME)


def test_every_field_appears_under_its_yaml_name() -> None:
    text = reference_markdown()
    for model in _MODELS_BY_NAME.values():
        if f"\n### {model.__name__}\n" not in text:
            continue
        section = text.split(f"\n### {model.__name__}\n", 1)[1].split("\n### ", 1)[0]
        for name, field in model.model_fields.items():
            assert f"| `{field.alias or name}` |" in section, f"{model.__name__}.{name}"


def test_every_link_points_at_a_section() -> None:
    text = reference_markdown()
    headings = {h.lower() for h in re.findall(r"^#+ (\w+)$", text, flags=re.MULTILINE)}
    for target in re.findall(r"\]\(#([\w-]+)\)", text):
        assert target in headings, target


def test_constraints_and_rules_reach_the_page() -> None:
    text = reference_markdown()
    assert "| `partitions` | integer | `3` | 1 to 10000; rule `self >= oldSelf` |" in text
    assert "rule `self == oldSelf`" in text
    for short_name in ("dlog", "dview", "sjob"):
        assert f"short name `{short_name}`" in text
    assert r"(ms\|s\|m\|h\|d\|w)" in text
