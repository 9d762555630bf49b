"""An input's startingPosition.offsets may name only partitions its Log has: Spark refuses a
partition the topic lacks when the query starts, so `validate` refuses it first, naming the view
or job, the input, the partition and the Log's partition count."""

from __future__ import annotations

import textwrap
from pathlib import Path

from distributary.graph import Pipeline, load_pipeline

LOG = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: clicks}
spec: {partitions: 3, schema: "user STRING, n INT"}
"""


def view(offsets: str, name: str = "per-user", log: str = "clicks") -> str:
    return textwrap.dedent(f"""
        apiVersion: distributary.dev/v1alpha1
        kind: DerivedView
        metadata: {{name: {name}}}
        spec:
          inputs:
          - {{log: {log}, alias: c, startingPosition: {{from: Offsets, offsets: {offsets}}}}}
          sql: SELECT user, n FROM c
        """)


def job(offsets: str) -> str:
    return textwrap.dedent(f"""
        apiVersion: distributary.dev/v1alpha1
        kind: StreamJob
        metadata: {{name: audit}}
        spec:
          image: example.org/job:1
          mainApplicationFile: local:///app/job.py
          inputs:
          - {{log: users}}
          - {{log: clicks, startingPosition: {{from: Offsets, offsets: {offsets}}}}}
          outputs: [{{log: audit-trail}}]
        """)


OTHER_LOGS = """
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: users}
---
apiVersion: distributary.dev/v1alpha1
kind: Log
metadata: {name: audit-trail}
"""


def loaded(tmp_path: Path, *documents: str) -> Pipeline:
    (tmp_path / "pipeline.yaml").write_text("\n---\n".join(documents))
    return load_pipeline([tmp_path])


def test_a_view_starting_at_a_partition_its_log_lacks_is_refused(tmp_path: Path) -> None:
    pipeline = loaded(tmp_path, LOG, view('{"0": 5, "7": 42}'))
    (problem,) = pipeline.problems
    assert problem.resource == "DerivedView/default/per-user"
    assert problem.field == "spec.inputs[0].startingPosition.offsets"
    assert problem.message == (
        "input c names partition 7, but Log 'clicks' has 3 partitions (0 to 2): name only its "
        "partitions, or raise its spec.partitions to 8"
    )


def test_a_job_starting_at_partitions_its_log_lacks_is_refused(tmp_path: Path) -> None:
    pipeline = loaded(tmp_path, LOG, OTHER_LOGS, job('{"3": 1, "12": 2, "2": 0}'))
    (problem,) = pipeline.problems
    assert (problem.resource, problem.field) == (
        "StreamJob/default/audit",
        "spec.inputs[1].startingPosition.offsets",
    )
    assert problem.message.startswith("input clicks names partitions 3, 12, but Log 'clicks'")


def test_a_view_reading_a_view_is_held_to_the_partitions_its_output_derives(
    tmp_path: Path,
) -> None:
    # per-user's output Log is derived with its input's 3 partitions.
    pipeline = loaded(tmp_path, LOG, view("{}", "copy"), view('{"3": 0}', "second", "copy"))
    (problem,) = (p for p in pipeline.problems if "partition" in p.message)
    assert problem.resource == "DerivedView/default/second"
    assert "Log 'copy' has 3 partitions (0 to 2)" in problem.message


def test_offsets_of_partitions_the_log_has_are_accepted(tmp_path: Path) -> None:
    pipeline = loaded(tmp_path, LOG, view('{"0": 5, "2": 42}'))
    assert pipeline.ok, [str(p) for p in pipeline.problems]


def test_an_input_log_outside_the_files_is_not_checked(tmp_path: Path) -> None:
    pipeline = loaded(tmp_path, view('{"7": 42}', log="elsewhere"))
    assert not any("partition" in p.message for p in pipeline.problems)
