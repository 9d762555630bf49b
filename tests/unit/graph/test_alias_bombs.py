"""A pipeline file whose aliases would expand to billions of values ("billion laughs") is refused
within a second, naming the file, without being expanded; a file with a few anchors still loads."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from distributary.api.documents import MAX_ALIASED_NODES, MAX_YAML_DEPTH
from distributary.graph import load, load_pipeline

HEAD = "apiVersion: distributary.dev/v1alpha1\nkind: Log\nmetadata: {name: clicks}\nspec:\n"


def bomb(levels: int = 9, width: int = 9) -> str:
    """A Log whose spec.config holds `levels` anchors of `width` references to the one before:
    width**levels values written out (387,420,489 for nine of nine)."""
    lines = [HEAD.rstrip("\n"), "  config:"]
    lines.append("    l0: &l0 [" + ", ".join(['"x"'] * width) + "]")
    for level in range(1, levels + 1):
        lines.append(f"    l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_is_refused_within_a_second_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(bomb())
    started = time.monotonic()
    (problem,) = load([tmp_path]).problems
    assert time.monotonic() - started < 1
    assert problem.source == str(tmp_path / "bomb.yaml")
    assert f"more than the {MAX_ALIASED_NODES:,} Distributary reads" in problem.message
    assert "write the values out, or refer to large anchors less often" in problem.message
    assert "not valid YAML" not in problem.message


def test_aliases_within_the_limit_load(tmp_path: Path) -> None:
    (tmp_path / "few.yaml").write_text(bomb(levels=2, width=9))  # 819 values
    assert not any("aliases" in p.message for p in load([tmp_path]).problems)


def test_a_document_repeating_a_mapping_through_an_anchor_loads(tmp_path: Path) -> None:
    (tmp_path / "logs.yaml").write_text(
        "apiVersion: distributary.dev/v1alpha1\nkind: Log\n"
        "metadata: {name: clicks, labels: &team {team: shop}, annotations: *team}\n"
        "spec:\n  config: &settings {segment.ms: '60000'}\n"
    )
    pipeline = load_pipeline([tmp_path])
    assert pipeline.ok, pipeline.problems
    (log,) = pipeline.logs.values()
    assert log.metadata.labels == log.metadata.annotations == {"team": "shop"}


def test_an_alias_inside_what_it_refers_to_is_refused(tmp_path: Path) -> None:
    (tmp_path / "self.yaml").write_text(HEAD + "  config: &me {a: *me}\n")
    (problem,) = load([tmp_path]).problems
    assert problem.source == str(tmp_path / "self.yaml")
    assert "would make the document contain itself" in problem.message


def test_aliases_chained_past_the_depth_limit_are_refused(tmp_path: Path) -> None:
    chain = ["  config:", "    c0: &c0 [x]"]
    chain += [f"    c{i}: &c{i} [*c{i - 1}]" for i in range(1, 5000)]
    (tmp_path / "chain.yaml").write_text(HEAD + "\n".join(chain) + "\n")
    (problem,) = load([tmp_path]).problems
    assert f"more than {MAX_YAML_DEPTH} levels deep" in problem.message
    assert "its aliases nest it that deep" in problem.message


def test_validate_refuses_the_bomb_in_a_second_or_so(tmp_path: Path) -> None:
    # A process of its own, so that a validate that expands the document (it ran for minutes
    # before the fix, inside pydantic's Rust, where no thread can interrupt it) is stopped at the
    # timeout. The bound is loose for a busy machine: the interpreter's start and imports are in
    # it; the refusal itself is timed by the test above.
    (tmp_path / "bomb.yaml").write_text(bomb())
    command = [sys.executable, "-m", "distributary.cli", "validate", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{tmp_path / 'bomb.yaml'}: has aliases (*name)" in result.stdout + result.stderr
