"""Programs built once from the project's own Go modules, and cached per machine.

The test beds run real upstream programs (kube-apiserver, the Spark operator's controller, kwok)
that publish no binaries for every machine, so each is built from a small Go module at the root
of the checkout (`controlplane/`, `sparkoperator/`, `testbed/`) that pins one exact release and
commits its go.sum. A build is cached under a key of the release, the machine and a digest of the
module's sources and the build flags: editing them builds afresh, nothing else ever does. It is
built in a copy outside the checkout and published only when complete, and two sessions starting
at once build it once. A first build downloads modules and compiles for minutes, so it prints a
progress line every `PROGRESS_EVERY` seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from distributary.artifacts import cache_root
from distributary.errors import DistributaryError

PROGRESS_EVERY = 20.0  # seconds between progress lines
_BARE_PACKAGE = re.compile(r"^[\w.~/-]+$")  # what `go build -v` prints per package compiled
# How every test-bed program is built: reproducible paths, and no debugging information, which
# the binaries strip anyway (`-ldflags=-s -w`): the compiler skips making it, about a tenth of a
# build's CPU (kwok from an empty build cache: 186 CPU-s instead of 209). tools/helm.sh builds
# with the same compiler flags, so that helm and kwok share their compiled packages.
GO_BUILD = ("build", "-v", "-trimpath", "-gcflags=all=-dwarf=false")
# The compiler and linker are Go programs that spend a quarter of their CPU collecting garbage:
# with the collector off until a process holds 2 GiB (no process of the control plane's build
# passes 1.6 GB), etcd builds from an empty build cache in 114 CPU-s instead of 152. The binaries
# are the same; a GOGC or GOMEMLIMIT of the caller's own wins.
GO_MEMORY = {"GOGC": "off", "GOMEMLIMIT": "2GiB"}


class GoBuildError(DistributaryError, RuntimeError):
    """A program could not be built from its Go module; the message says why and what to do."""


def say(part: str, message: str) -> None:
    """A progress line for people, on stderr (test runners let it through)."""
    print(f"{part}: {message}", file=sys.stderr, flush=True)


def elapsed(since: float) -> str:
    """`since` (a time.monotonic() reading) until now, as 3m07s."""
    seconds = int(time.monotonic() - since)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def checkout_module(name: str) -> Path:
    """The Go module `name/` at the root of the checkout this package runs from (an editable
    install)."""
    src = Path(__file__).resolve().parents[3] / name
    if not (src / "go.mod").is_file():
        raise GoBuildError(
            f"the Go sources of {name} are not at {src}: run from a Distributary checkout "
            "installed with `pip install -e .` (make install)"
        )
    return src


@dataclass(frozen=True)
class GoPrograms:
    """The commands `./cmd/...` of the Go module `src`, pinned to `release`; `part` names them in
    progress lines, `cache` is their folder in the cache; `go_build` are the arguments of
    `go build` before `-o`."""

    part: str
    cache: str
    src: Path
    release: str
    binaries: Sequence[str]
    go_build: Sequence[str]
    needs: str  # which Go, for the message when there is none

    def source_files(self) -> list[Path]:
        """What the cache key digests: go.mod, go.sum and the commands' sources."""
        src = self.src
        return sorted([src / "go.mod", src / "go.sum", *src.glob("cmd/**/*.go")])

    def target(self) -> Path:
        """Where the binaries are cached, keyed by release, machine, sources and flags."""
        digest = hashlib.sha256(" ".join(self.go_build).encode())
        for path in self.source_files():
            name = path.relative_to(self.src).as_posix().encode()
            digest.update(name + b"\0" + path.read_bytes())
        key = f"{self.release}-{platform.machine()}-{digest.hexdigest()[:12]}"
        return cache_root() / self.cache / key

    def build(self, *, quiet: bool = False) -> Path:
        """The folder holding the binaries, building them on first use."""
        target = self.target()
        if (target / ".complete").exists():
            return target
        go = shutil.which("go")
        if go is None:
            raise GoBuildError(
                f"Go is needed once to build {', '.join(self.binaries)} ({self.release}) into "
                f"{target}: install {self.needs} (https://go.dev/dl/) so that `go` is on PATH, "
                "and run again"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        with _exclusive(target.parent / f".{target.name}.lock", self.part, quiet):
            if not (target / ".complete").exists():
                self._build_into(go, target, quiet)
        return target

    def _build_into(self, go: str, target: Path, quiet: bool) -> None:
        started = time.monotonic()
        if not quiet:
            say(
                self.part,
                f"building {' and '.join(self.binaries)} ({self.release}) into {target}, once: "
                "the first build downloads Go modules and compiles for minutes",
            )
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as work:
            tree, out = Path(work) / "src", Path(work) / "bin"
            for path in self.source_files():
                copy = tree / path.relative_to(self.src)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, copy)
            # A copy outside the checkout: -mod=mod may complete go.sum without touching the repo.
            env = {**GO_MEMORY, **os.environ}
            env.update(GOFLAGS="-mod=mod", GOWORK="off", CGO_ENABLED="0")
            listing = run_go(
                go, ["list", "-deps", "./cmd/..."], tree, env, self.part, "downloading modules",
                quiet=quiet,
            )  # fmt: skip
            total = len(listing.splitlines())
            command = [*self.go_build, "-o", f"{out}/", "./cmd/..."]
            run_go(
                go, command, tree, env, self.part, f"compiling about {total} packages", quiet=quiet
            )
            for name in self.binaries:
                if not (out / name).is_file():
                    raise GoBuildError(f"`go build` produced no {name} in {out}")
            (out / ".complete").write_text(f"{self.release}\n")
            shutil.rmtree(target, ignore_errors=True)
            out.rename(target)
        if not quiet:
            say(self.part, f"built in {elapsed(started)}")


@contextlib.contextmanager
def _exclusive(lock: Path, part: str, quiet: bool) -> Iterator[None]:
    with open(lock, "w") as handle:  # two test sessions may start at once: one builds
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not quiet:
                say(part, "waiting for another process that is building the same binaries ...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def run_go(
    go: str,
    args: list[str],
    cwd: Path,
    env: dict[str, str],
    part: str,
    doing: str,
    *,
    quiet: bool,
) -> str:
    """Run `go args` in `cwd`, printing a progress line every PROGRESS_EVERY seconds; its stdout.
    Its output goes to files beside `cwd`, which must be a scratch folder."""
    started, last = time.monotonic(), time.monotonic()
    out, err = cwd.parent / f"go-{args[0]}.out", cwd.parent / f"go-{args[0]}.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        process = subprocess.Popen([go, *args], cwd=cwd, env=env, stdout=stdout, stderr=stderr)
    try:
        while process.poll() is None:
            time.sleep(1)
            if not quiet and time.monotonic() - last >= PROGRESS_EVERY:
                last = time.monotonic()
                done = len(err.read_text(errors="replace").splitlines())  # a line per package
                say(part, f"{doing}: {elapsed(started)}, {done} done so far")
    except BaseException:
        process.kill()
        process.wait()
        raise
    if process.returncode != 0:
        lines = err.read_text(errors="replace").splitlines()
        tail = "\n".join([line for line in lines if not _BARE_PACKAGE.match(line)][-25:])
        raise GoBuildError(f"`go {' '.join(args)}` failed in {cwd}:\n{tail}")
    return out.read_text()
