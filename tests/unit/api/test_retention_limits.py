"""Sizes and times a Log converts to a Kafka topic config must fit the Java long Kafka reads them
into: `retention.bytes: 9000000000Pi` is refused naming the Log, the field, the limit and the fix,
and the largest retention time a Duration can say still fits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from distributary.api import parse_resource
from distributary.api.common import GROUP_VERSION, Duration, duration_ms
from distributary.api.topic_configs import LONG_MAX
from distributary.graph import load_pipeline


def log_file(tmp_path: Path, retention: str) -> Path:
    (tmp_path / "log.yaml").write_text(
        f"apiVersion: {GROUP_VERSION}\nkind: Log\nmetadata: {{name: clicks}}\n"
        f"spec:\n  retention: {retention}\n"
    )
    return tmp_path


@pytest.mark.parametrize(
    "size", ['"9000000000Pi"', '"8192Pi"', "9223372036854775808", '"9223372036854775808"']
)
def test_validate_refuses_retention_bytes_beyond_a_java_long(tmp_path: Path, size: str) -> None:
    pipeline = load_pipeline([log_file(tmp_path, f"{{bytes: {size}}}")])
    (problem,) = pipeline.problems
    assert (problem.resource, problem.field) == ("Log/default/clicks", "spec.retention.bytes")
    assert f"at most {LONG_MAX} bytes" in problem.message
    assert "write at most 8191Pi" in problem.message
    assert "retention.forever: true to keep everything" in problem.message


@pytest.mark.parametrize("size", ["8191Pi", LONG_MAX, str(LONG_MAX), "10Gi"])
def test_retention_bytes_up_to_a_java_long_is_accepted(size: Any) -> None:
    body = {
        "apiVersion": GROUP_VERSION,
        "kind": "Log",
        "metadata": {"name": "clicks"},
        "spec": {"retention": {"bytes": size}},
    }
    configs = parse_resource(body).spec.topic_configs()
    assert int(configs["retention.bytes"]) <= LONG_MAX


def test_the_longest_retention_time_fits_a_java_long() -> None:
    # retention.time (and a view's dead-letter retention) is a Duration: at most nine digits
    # of weeks, which Kafka's retention.ms (a Java long) holds.
    assert duration_ms("999999999w") <= LONG_MAX
    with pytest.raises(ValidationError):
        TypeAdapter(Duration).validate_python("9999999999w")
