"""`python -m distributary.runner.job --spec FILE`: a StreamJob's own file, run locally.

Where a Spark operator would run the job's image, the local runtime runs its main file on the
operator's machine: the spec file holds the file, its arguments, the environment the operator
gives every job and the Spark settings (local master, the Kafka connector's jars). They reach
Spark through `PYSPARK_SUBMIT_ARGS`, as spark-submit would pass them, and the file runs as
`__main__` in this process, so the process's command line names the spec (the runtime finds its
processes again by it).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import shlex
import sys
from pathlib import Path
from typing import Any

PREFIX = "runner:"  # the lines the operator quotes in a failing job's condition


def local_path(main_file: str) -> Path:
    """The path on this machine of `local:///x`, `file:///x` or `/x`."""
    for scheme in ("local://", "file://"):
        if main_file.startswith(scheme):
            return Path(main_file[len(scheme) :])
    if "://" in main_file:
        raise ValueError(
            f"spec.mainApplicationFile {main_file!r}: the local runtime runs files on the "
            "operator's machine (local:///path or file:///path)"
        )
    return Path(main_file)


def submit_args(conf: dict[str, str]) -> str:
    """`PYSPARK_SUBMIT_ARGS` for `conf`: each setting as `--conf`, then `pyspark-shell`."""
    argv: list[str] = []
    for key, value in sorted(conf.items()):
        argv += ["--conf", f"{key}={value}"]
    return shlex.join([*argv, "pyspark-shell"])


def main(argv: list[str]) -> int:
    """Run the job the spec file describes."""
    parser = argparse.ArgumentParser(prog="python -m distributary.runner.job")
    parser.add_argument("--spec", required=True, help="the job's launch spec (JSON)")
    spec: dict[str, Any] = json.loads(Path(parser.parse_args(argv).spec).read_text())
    label = f"{spec['namespace']}/{spec['name']} r{spec['revision']}"
    try:
        path = local_path(spec["mainFile"])
    except ValueError as exc:
        print(f"{PREFIX} {label}: {exc}", flush=True)
        return 2
    if not path.is_file():
        print(
            f"{PREFIX} {label}: spec.mainApplicationFile: {path} does not exist on the "
            "operator's machine; the local runtime runs jobs from local files",
            flush=True,
        )
        return 2
    os.environ.update(spec["env"])
    os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args(spec["sparkConf"])
    sys.argv = [str(path), *spec["arguments"]]
    sys.path.insert(0, str(path.parent))
    print(f"{PREFIX} {label}: running {path}", flush=True)
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        print(f"{PREFIX} {label}: exited with code {code}", flush=True)
        return code
    except Exception as exc:  # the job's own error, reported as the job's failure
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        print(f"{PREFIX} {label}: failed: {type(exc).__name__}: {first}", flush=True)
        raise
    print(f"{PREFIX} {label}: ended", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
