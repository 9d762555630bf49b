"""The class-data archive of Spark's classes is kept per install of Spark's jars: the JVM refuses
an archive made with jars of another path, size or modification time and starts without it, so
a new checkout's environment used the archive of an earlier one and every Spark driver of the
suite started without it (an integration run took 49 minutes instead of 45)."""

from __future__ import annotations

import os
from pathlib import Path

from distributary.devtools.spark_cds import class_path_fingerprint


def jars(folder: Path) -> Path:
    folder.mkdir()
    for name in ("spark-core.jar", "spark-sql.jar"):
        (folder / name).write_bytes(b"classes")
        os.utime(folder / name, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    return folder


def test_the_same_jars_give_the_same_key(tmp_path: Path) -> None:
    folder = jars(tmp_path / "jars")
    assert class_path_fingerprint(folder) == class_path_fingerprint(folder)


def test_another_install_gives_another_key(tmp_path: Path) -> None:
    first, second = jars(tmp_path / "a"), jars(tmp_path / "b")
    assert class_path_fingerprint(first) != class_path_fingerprint(second)  # another path
    before = class_path_fingerprint(first)
    os.utime(first / "spark-sql.jar")  # installed again: the same bytes, a new time
    assert class_path_fingerprint(first) != before
