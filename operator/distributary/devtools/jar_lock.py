"""`make locks` for jars: an image's Maven artifacts, each pinned with its digest.

An image build downloads jars from Maven Central with curl and checks each one against a lock
file of `SHA256  PATH` lines, PATH in Maven's repository layout (`connect_image/jars.sha256`):
a jar that changed fails the build instead of slipping in. The lock is written here from Maven's
own resolution of the bundle (`artifacts.Bundle`), the same that the machine's runs use, so that
the image and `distributary run` put the same jars on their classpaths.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from distributary import artifacts
from distributary.artifacts import ArtifactError, Bundle

LOCKS = {"connect_image/jars.sha256": artifacts.CONNECT_IMAGE}
ROOT = Path(__file__).resolve().parents[3]


def locked(bundle: Bundle) -> str:
    """The lock file's text for `bundle`: one `SHA256  PATH` line per jar, sorted by path."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ArtifactError(
            "Maven (mvn) is needed to lock jars: install it (apt-get install maven)"
        )
    with tempfile.TemporaryDirectory(prefix="distributary-jar-lock-") as work:
        repository = artifacts.copy_dependencies(bundle, Path(work), mvn, repository_layout=True)
        lines = [
            f"{hashlib.sha256(jar.read_bytes()).hexdigest()}  {jar.relative_to(repository)}"
            for jar in sorted(repository.rglob("*.jar"))
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make locks", description=__doc__.splitlines()[0])
    parser.add_argument("locks", nargs="*", metavar="FILE", help=f"of {', '.join(LOCKS)}")
    names = parser.parse_args(argv).locks or list(LOCKS)
    for name in names:
        if name not in LOCKS:
            parser.error(f"no jar lock {name}: name {' or '.join(LOCKS)}")
        try:
            text = locked(LOCKS[name])
        except ArtifactError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        (ROOT / name).write_text(text)
        print(f"{name}: {len(text.splitlines())} jars")
    return 0


if __name__ == "__main__":
    sys.exit(main())
