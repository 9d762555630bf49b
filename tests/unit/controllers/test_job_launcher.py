"""The local runtime's launcher of a StreamJob's own file: where the file is, how Spark is told."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from distributary.runner.job import local_path, submit_args


def test_local_and_file_urls_are_paths_on_this_machine() -> None:
    assert local_path("local:///app/job.py") == Path("/app/job.py")
    assert local_path("file:///app/job.py") == Path("/app/job.py")
    assert local_path("/app/job.py") == Path("/app/job.py")


def test_a_remote_file_is_refused_with_what_the_local_runtime_runs() -> None:
    with pytest.raises(ValueError, match=r"local:///path or file:///path"):
        local_path("s3a://bucket/job.py")


def test_spark_settings_become_pyspark_submit_arguments_quoted_as_spark_submit_reads_them() -> None:
    args = submit_args({"spark.master": "local[2]", "spark.driver.extraJavaOptions": "-Da=1 -Db=2"})
    assert shlex.split(args) == [
        "--conf",
        "spark.driver.extraJavaOptions=-Da=1 -Db=2",
        "--conf",
        "spark.master=local[2]",
        "pyspark-shell",
    ]


def test_the_launcher_runs_the_file_with_its_arguments_and_environment(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        "import os, sys\n"
        "print('args', sys.argv[1:])\n"
        "print('env', os.environ['DISTRIBUTARY_REVISION'])\n"
        "print('submit', os.environ['PYSPARK_SUBMIT_ARGS'])\n"
    )
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "namespace": "shop",
                "name": "enrich",
                "revision": 2,
                "mainFile": f"local://{script}",
                "arguments": ["--suffix", "!"],
                "env": {"DISTRIBUTARY_REVISION": "2"},
                "sparkConf": {"spark.master": "local[1]"},
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "distributary.runner.job", "--spec", str(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "args ['--suffix', '!']" in done.stdout
    assert "env 2" in done.stdout
    assert "submit --conf 'spark.master=local[1]' pyspark-shell" in done.stdout


def test_a_missing_file_fails_with_the_field_and_the_reason(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "namespace": "shop",
                "name": "enrich",
                "revision": 1,
                "mainFile": "local:///nowhere/job.py",
                "arguments": [],
                "env": {},
                "sparkConf": {},
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "distributary.runner.job", "--spec", str(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "runner: shop/enrich r1: spec.mainApplicationFile: /nowhere/job.py does not exist" in (
        done.stdout
    )
