"""`distributary validate` refuses what the API server refuses: documents checked against the CRDs'
own schema (no coercion, formats, patterns, lengths, ranges), documents it cannot place, and
repeated YAML keys; every problem one line naming the file, the resource, the field and the fix.

The cases in `invalid_documents` are applied to a real API server by
tests/integration/kube/test_validate_agrees_with_the_api_server.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from tests.unit.api.invalid_documents import CEL_REFUSED, INVALID, JOB, LOG, UNPLACED, VIEW, Invalid

from distributary.api.admission import narrowed, place, schema_problems
from distributary.api.documents import yaml_documents
from distributary.cli import main
from distributary.graph import load


def _write(tmp_path: Path, *documents: dict[str, Any], name: str = "pipeline.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def _validate(path: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.stdout, result.stderr


def test_the_base_documents_are_valid(tmp_path: Path) -> None:
    code, out, err = _validate(_write(tmp_path, LOG, VIEW, JOB))
    assert (code, err) == (0, "")
    assert out.startswith("valid: 1 log, 1 view, 1 job")


@pytest.mark.parametrize("case", INVALID, ids=[c.name for c in INVALID])
def test_the_schema_refuses_each_invalid_document_naming_its_field(case: Invalid) -> None:
    problems = schema_problems(case.document)
    fields = [p.split(": ")[0] for p in problems]
    assert len(fields) == 1, problems
    assert case.named_in(fields), problems


REFUSED = INVALID + UNPLACED + CEL_REFUSED


@pytest.mark.parametrize("case", REFUSED, ids=[c.name for c in REFUSED])
def test_validate_refuses_each_invalid_document_naming_file_resource_and_field(
    tmp_path: Path, case: Invalid
) -> None:
    path = _write(tmp_path, case.document)
    loaded = load([path])
    assert loaded.resources == ()
    assert case.named_in(p.field for p in loaded.problems), loaded.problems
    code, out, err = _validate(path)
    assert code == 1
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert lines[-1].startswith("error: ")
    named = [line for line in lines if f" {case.field}" in line]
    assert named, err
    assert all(line.startswith(f"{path}: ") for line in lines[:-1])
    # one line, with a fix after the last colon
    assert all(len(line.rsplit(": ", 1)[1]) > 3 for line in named)


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("partitions", "6", "write 6 without quotes"),
        ("compaction", "yes", "write true or false"),
        ("compaction", "True", "write true without quotes"),
        ("topicName", 7, 'quote it, e.g. "7"'),
        ("deletionPolicy", "Keep", "write one of Retain, Delete"),
        ("partitions", 0, "write at least 1"),
    ],
)
def test_a_type_or_range_problem_says_how_to_fix_it(field: str, value: Any, fix: str) -> None:
    document = {**LOG, "spec": {**LOG["spec"], field: value}}
    (problem,) = schema_problems(document)
    assert problem.startswith(f"spec.{field}: ")
    assert problem.endswith(fix)


@pytest.mark.parametrize(
    "timestamp",
    ["2024-05-01T12:00:00Z", "2024-05-01T12:00:00.123+02:00", "2024-05-01t12:00:00z"],
)
def test_an_rfc_3339_timestamp_passes(tmp_path: Path, timestamp: str) -> None:
    view = {
        **VIEW,
        "spec": {
            **VIEW["spec"],
            "inputs": [
                {
                    "log": "clicks",
                    "alias": "c",
                    "startingPosition": {"from": "Timestamp", "timestamp": timestamp},
                }
            ],
        },
    }
    assert schema_problems(view) == []
    code, _, err = _validate(_write(tmp_path, LOG, view))
    assert code == 0, err


def test_an_unquoted_timestamp_is_checked_as_the_text_kubectl_sends(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        yaml.safe_dump(LOG)
        + "---\n"
        + yaml.safe_dump(VIEW).replace(
            "alias: c",
            "alias: c\n    startingPosition: {from: Timestamp, timestamp: 2024-05-01}",
        )
    )
    (problem,) = load([path]).problems
    assert problem.field == "spec.inputs[0].startingPosition.timestamp"
    assert "'2024-05-01' is not an RFC 3339 date-time" in problem.message


@pytest.mark.parametrize("case", CEL_REFUSED, ids=[c.name for c in CEL_REFUSED])
def test_a_cel_rule_is_left_to_its_pydantic_twin(case: Invalid) -> None:
    assert schema_problems(case.document) == []


@pytest.mark.parametrize(
    ("path", "message", "named"),
    [
        ("spec", "inputs: alias 'c' is used twice", ("spec.inputs", "alias 'c' is used twice")),
        ("spec", "sql may not be x", ("spec.sql", "sql may not be x")),
        ("spec.inputs[0].startingPosition", "timestamp is required", None),
        ("spec.retention", "retention.forever keeps everything", None),
        ("spec", "nothing: here", None),
        ("spec.nowhere[3]", "inputs: x", None),
    ],
)
def test_a_model_message_about_a_field_names_that_field(
    path: str, message: str, named: tuple[str, str] | None
) -> None:
    found = narrowed("DerivedView", path, message)
    if named is None:
        named = (
            (f"{path}.timestamp", message) if message.startswith("timestamp") else (path, message)
        )
    assert found == named


def test_a_whole_number_written_with_a_point_is_an_integer_as_json_has_it() -> None:
    assert schema_problems({**LOG, "spec": {**LOG["spec"], "partitions": 6.0}}) == []


def test_a_resource_without_a_name_is_refused() -> None:
    (problem,) = schema_problems({**LOG, "metadata": {"namespace": "shop"}})
    assert problem == "metadata.name: required field is missing: add it"


def test_a_defaulted_field_may_be_null_as_the_api_server_prunes_it() -> None:
    assert schema_problems({**LOG, "spec": {**LOG["spec"], "partitions": None}}) == []


@pytest.mark.parametrize(
    ("document", "ours"),
    [
        (LOG, True),
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}, False),
        ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}, False),
        ({"apiVersion": "distributary.io/v1alpha1", "kind": "Thing"}, True),
        ({"apiVersion": "distributory.dev/v1alpha1", "kind": "Thing"}, True),
        ({"apiVersion": "example.com/v1", "kind": "StreamJob"}, True),
        ({"kind": "ConfigMap"}, True),
    ],
)
def test_a_document_is_ours_by_its_group_or_kind(document: dict[str, Any], ours: bool) -> None:
    assert place(document).ours is ours


@pytest.mark.parametrize(
    ("document", "fix"),
    [
        ({**LOG, "apiVersion": "distributary.dev/v1"}, "write distributary.dev/v1alpha1"),
        (
            {**LOG, "kind": "Logs"},
            "(did you mean 'Log'?): write one of Log, DerivedView, StreamJob, Source, Sink",
        ),
        ({"kind": "Log", "metadata": {"name": "x"}}, "write apiVersion: distributary.dev/v1alpha1"),
        (
            {**LOG, "kind": None},
            "write kind: with one of Log, DerivedView, StreamJob, Source, Sink",
        ),
        (
            {**LOG, "kind": ["Log"]},
            "is not a string: write one of Log, DerivedView, StreamJob, Source, Sink",
        ),
    ],
)
def test_an_unplaced_document_is_refused_with_the_fix(document: dict[str, Any], fix: str) -> None:
    problem = place(document).problem
    assert problem is not None
    assert problem.endswith(fix)


def test_documents_of_other_apis_are_still_skipped_and_counted(tmp_path: Path) -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    code, out, err = _validate(_write(tmp_path, LOG, VIEW, config_map))
    assert (code, err) == (0, "")
    assert out.strip().endswith("; 1 other document(s) skipped")


@pytest.mark.parametrize(
    ("text", "field", "lines"),
    [
        ("a: 1\nb: 2\na: 3\n", "a", (1, 3)),
        ("spec:\n  partitions: 2\n  x: 1\n  partitions: 3\n", "spec.partitions", (2, 4)),
        ("{a: 1, a: 1}\n", "a", (1, 1)),
        ("items:\n  - {k: 1}\n  - k: 2\n    k: 3\n", "items[1].k", (3, 4)),
        ("m: {1: a, '1': b}\n", "m.1", (1, 1)),
    ],
)
def test_a_repeated_key_is_noted_with_its_field_and_lines(
    text: str, field: str, lines: tuple[int, int]
) -> None:
    ((_, _, repeated),) = list(yaml_documents(text))
    assert repeated == [
        (
            field,
            f"is written twice in one mapping (line {lines[0]} and line {lines[1]}): "
            "remove one of them (YAML would silently keep only the last)",
        )
    ]


def test_validate_refuses_a_repeated_key_naming_the_resource_field_and_lines(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pipeline.yaml"
    text = (
        yaml.safe_dump(VIEW)
        + "---\n"
        + yaml.safe_dump(LOG, sort_keys=False).replace("spec:\n", "spec:\n  partitions: 4\n")
    )
    path.write_text(text)
    first, second = (i + 1 for i, line in enumerate(text.splitlines()) if "partitions" in line)
    code, _, err = _validate(path)
    assert code == 1
    problem = err.splitlines()[0]
    assert problem == (
        f"{path}: Log/default/clicks spec.partitions: is written twice in one mapping "
        f"(line {first} and line {second}): remove one of them (YAML would silently keep only "
        "the last)"
    )


def test_an_alias_is_walked_once_and_a_merge_key_is_not_a_repeat() -> None:
    text = "base: &b {x: 1}\none: *b\ntwo:\n  <<: *b\n  <<: *b\n  y: 2\n"
    ((_, document, repeated),) = list(yaml_documents(text))
    assert repeated == []
    assert document["two"] == {"x": 1, "y": 2}


def test_the_same_key_in_different_mappings_or_documents_is_fine() -> None:
    text = "a: {k: 1}\nb: {k: 2}\n---\na: 1\n"
    assert [r for _, _, r in yaml_documents(text)] == [[], []]


def test_every_problem_in_a_file_is_reported_at_once(tmp_path: Path) -> None:
    path = _write(tmp_path, *(c.document for c in REFUSED))
    code, _, err = _validate(path)
    assert code == 1
    assert f"error: {len(REFUSED)} problems found" in err
