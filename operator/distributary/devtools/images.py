"""`make images`: the operator image, the job image and the Connect image, built on a machine with
no Docker engine and no registry, from the same Dockerfiles that `docker build` reads where a
registry is.

The Dockerfiles (`operator_image/`, `spark_images/`, `connect_image/`) stand on
`debian:bookworm-slim` and install everything else from Debian's packages, PyPI and Maven Central.
Here:

1. **The base** is made from Debian's packages: `debootstrap --variant=minbase` of bookworm into
   a buildah container, tidied as Debian's slim images are (no package lists, logs, manuals or
   documentation; dpkg told to leave them out of later installs too), committed as
   `BASE_IMAGE` and passed to the Dockerfiles as their `BASE` build argument.
2. **Each image** is `buildah build` of its Dockerfile from the repository root: RUN steps in a
   chroot on the host's network (apt reaches Debian's mirror, pip PyPI, curl Maven Central), the
   machine's certificate authorities as the build secret `ca`, and one timestamp for every file
   of every layer and for the image itself (`--timestamp`), so that the same inputs make the same
   layers: building twice gives the same image digest. No step's layer is kept for another
   build (`--layers=false`): buildah names each kept step's parent in the image's history, and
   those names differ from build to build, so the digest would too. pip's cache of the machine
   is bound in, so that nothing is downloaded or built twice (pyspark's wheel, above all): a
   build takes about a minute per image once the base is made.
3. **The result** is an OCI archive per image in the cache,
   `~/.cache/distributary/images/<image>-<key>.tar`, `key` a digest of everything the build
   reads (the Dockerfile, the files it copies, the base's recipe). An archive that exists is
   never built again; a changed input builds a new one. containerd (`ctr images import`) and
   Docker (`docker load`) load it without a registry.

buildah keeps its images in its own storage under the cache (`--root`), apart from the machine's.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from distributary.artifacts import cache_root
from distributary.errors import DistributaryError

ROOT = Path(__file__).resolve().parents[3]
RELEASE = "bookworm"
BASE_IMAGE = f"localhost/distributary-debian:{RELEASE}-slim"
MIRROR = os.environ.get("DISTRIBUTARY_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get(
    "DISTRIBUTARY_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security"
)
# Every file of every layer, and each image's creation time: the same for every build, so that
# the digest depends on the contents only (1970-01-01, as reproducible builds commonly use).
TIMESTAMP = 0
# The machine's certificate authorities, given to the builds as the secret `ca` (a proxy that
# intercepts TLS has its authority there).
CA_BUNDLE = Path(os.environ.get("DISTRIBUTARY_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"))
PACKAGES = ("buildah", "debootstrap", "runc")  # Debian's, installed when missing
KEY_LABEL = "dev.distributary.inputs"  # on each image: the digest of what it was built from
PIP_CACHE = Path(os.environ.get("PIP_CACHE_DIR") or Path.home() / ".cache" / "pip")
PIP_CACHE_IN_BUILD = "/var/cache/distributary-pip"

# What Debian's slim images leave out, for dpkg to leave out of every later install too.
DPKG_EXCLUDES = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
"""
# After debootstrap: what a running container provides or a build must not keep.
TIDY = (
    "etc/resolv.conf",
    "etc/hostname",
    "var/cache/ldconfig/aux-cache",
    "var/lib/dpkg/status-old",
    "var/lib/dpkg/diversions-old",
    "var/cache/debconf/config.dat-old",
    "var/cache/debconf/templates.dat-old",
)
TIDY_CONTENTS = (
    "var/lib/apt/lists",
    "var/cache/apt",
    "var/log",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
)


class ImageError(DistributaryError, RuntimeError):
    """An image could not be built; the message says why and what to do."""


@dataclass(frozen=True)
class Image:
    """One image the project builds: its name, its Dockerfile and what the build copies."""

    name: str
    dockerfile: str  # from the repository root
    inputs: tuple[str, ...]  # files and folders the build reads, from the repository root

    @property
    def tag(self) -> str:
        from distributary import __version__

        return f"{self.name}:{__version__}"


OPERATOR = Image(
    "distributary-operator",
    "operator_image/Dockerfile",
    ("operator_image", "pyproject.toml", "README.md", "operator/distributary"),
)
SPARK = Image(
    "distributary-spark",
    "spark_images/Dockerfile",
    ("spark_images", "pyproject.toml", "README.md", "operator/distributary"),
)
CONNECT = Image(
    "distributary-connect",
    "connect_image/Dockerfile",
    ("connect_image", "spark_images/java_cacerts.py", "spark_images/fetch_jars.sh"),
)
IMAGES = {"operator": OPERATOR, "spark": SPARK, "connect": CONNECT}


def say(message: str) -> None:
    print(f"images: {message}", file=sys.stderr, flush=True)


def images_root() -> Path:
    return cache_root() / "images"


def buildah(*args: str) -> list[str]:
    """A buildah command on the project's own storage (overlay, under the cache)."""
    root = images_root()
    return [
        "buildah",
        "--root",
        str(root / "storage"),
        "--runroot",
        str(root / "run"),
        "--storage-driver",
        "overlay",
        *args,
    ]


def run(command: Sequence[str], what: str, *, env: dict[str, str] | None = None) -> str:
    """Run `command`, its output kept; an ImageError with its last lines when it fails."""
    result = subprocess.run(list(command), capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-25:]
        raise ImageError(f"{what} failed (exit {result.returncode}):\n" + "\n".join(tail))
    return result.stdout


def require_tools() -> None:
    """buildah, debootstrap and runc, from Debian's packages when missing."""
    missing = [p for p in PACKAGES if shutil.which(p) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageError(
            f"{', '.join(missing)} not found: install Debian's packages {' '.join(PACKAGES)} "
            "(apt-get install), or build with Docker (see spark_images/README.md)"
        )
    say(f"installing Debian's {' '.join(missing)} ...")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], "apt-get update", env=env)
    run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        f"apt-get install {' '.join(missing)}",
        env=env,
    )


def digest_of(paths: Iterable[str], extra: str = "") -> str:
    """A digest of the files under `paths` (names and contents, caches left out) and `extra`."""
    digest = hashlib.sha256(extra.encode())
    files: list[Path] = []
    for name in paths:
        path = ROOT / name
        files += [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        relative = file.relative_to(ROOT).as_posix()
        if "__pycache__" in relative or relative.endswith((".pyc", ".pyo")):
            continue
        digest.update(relative.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def base_recipe() -> str:
    """What makes the base: the release, the mirrors and the tidying, as one text."""
    return json.dumps(
        [RELEASE, MIRROR, SECURITY_MIRROR, DPKG_EXCLUDES, TIDY, TIDY_CONTENTS, TIMESTAMP]
    )


def base_key() -> str:
    return hashlib.sha256(base_recipe().encode()).hexdigest()[:16]


def image_label(image: str, label: str) -> str | None:
    """A label of an image in the project's storage, or None when there is no such image."""
    result = subprocess.run(
        buildah("inspect", "--type", "image", image),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return None
    labels = json.loads(result.stdout).get("OCIv1", {}).get("config", {}).get("Labels") or {}
    value = labels.get(label)
    return str(value) if value is not None else None


def sources_list() -> str:
    return (
        f"deb {MIRROR} {RELEASE} main\n"
        f"deb {MIRROR} {RELEASE}-updates main\n"
        f"deb {SECURITY_MIRROR} {RELEASE}-security main\n"
    )


def make_base(*, again: bool = False) -> str:
    """The Debian base, from Debian's packages by debootstrap, unless it is made already
    (`again` makes it anyway); its digest."""
    key = base_key()
    if not again and image_label(BASE_IMAGE, "dev.distributary.base") == key:
        return image_digest(BASE_IMAGE)
    started = time.monotonic()
    say(f"making {BASE_IMAGE} from Debian's packages (debootstrap {RELEASE}, {MIRROR}) ...")
    container = run(buildah("from", "scratch"), "buildah from scratch").strip()
    try:
        mount = Path(run(buildah("mount", container), "buildah mount").strip())
        run(
            ["debootstrap", "--variant=minbase", RELEASE, str(mount), MIRROR],
            f"debootstrap {RELEASE} from {MIRROR} (set DISTRIBUTARY_DEBIAN_MIRROR for another)",
        )
        (mount / "etc/apt/sources.list").write_text(sources_list())
        (mount / "etc/dpkg/dpkg.cfg.d/slim").write_text(DPKG_EXCLUDES)
        for name in TIDY:
            (mount / name).unlink(missing_ok=True)
        for name in TIDY_CONTENTS:
            folder = mount / name
            for child in folder.iterdir() if folder.is_dir() else ():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        run(buildah("umount", container), "buildah umount")
        run(
            buildah(
                "config",
                "--cmd",
                '["bash"]',
                "--env",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--label",
                f"dev.distributary.base={key}",
                container,
            ),
            "buildah config",
        )
        run(
            buildah("commit", "--timestamp", str(TIMESTAMP), "--rm", container, BASE_IMAGE),
            f"committing {BASE_IMAGE}",
        )
    except BaseException:
        subprocess.run(buildah("rm", container), capture_output=True, check=False)
        raise
    digest = image_digest(BASE_IMAGE)
    say(f"{BASE_IMAGE} made in {time.monotonic() - started:.0f} s ({digest})")
    return digest


def image_key(image: Image) -> str:
    return digest_of((image.dockerfile, *image.inputs), extra=base_recipe())[:16]


def archive_path(image: Image) -> Path:
    return images_root() / f"{image.name}-{image_key(image)}.tar"


def image_digest(name: str) -> str:
    """The digest of the manifest of the image `name` in the project's storage."""
    text = run(
        buildah("inspect", "--type", "image", "--format", "{{.FromImageDigest}}", name),
        f"reading {name}",
    )
    return text.strip()


def build(image: Image, *, again: bool = False) -> str:
    """Build the image into the project's storage unless it holds one of the same inputs
    (`again` builds anyway, to check that the same inputs give the same digest); its digest."""
    key = image_key(image)
    if not again and image_label(image.tag, KEY_LABEL) == key:
        return image_digest(image.tag)
    make_base()
    started = time.monotonic()
    say(f"building {image.tag} from {image.dockerfile} ...")
    command = buildah(
        "build",
        "--isolation",
        "chroot",
        "--network",
        "host",
        "--pull=false",
        "--layers=false",
        "--timestamp",
        str(TIMESTAMP),
        "--build-arg",
        f"BASE={BASE_IMAGE}",
        "--label",
        f"{KEY_LABEL}={key}",
        "--file",
        image.dockerfile,
        "--tag",
        image.tag,
    )
    if again:
        command.append("--no-cache")  # every step run again, no layer reused
    if CA_BUNDLE.is_file():
        command += ["--secret", f"id=ca,src={CA_BUNDLE}"]
    # pip's cache of this machine (make install filled it: pyspark's wheel, built once from its
    # source archive, and every download), bound in for the RUN steps; it is no part of a layer.
    PIP_CACHE.mkdir(parents=True, exist_ok=True)
    command += ["--volume", f"{PIP_CACHE}:{PIP_CACHE_IN_BUILD}"]
    command += ["--build-arg", f"PIP_CACHE_DIR={PIP_CACHE_IN_BUILD}"]
    lines: list[str] = []
    with subprocess.Popen(
        [*command, "."], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:  # the steps, as progress
            lines.append(line.rstrip())
            if "STEP " in line or " COMMIT " in line:
                say(f"{image.name}: {line.strip()[:110]}")
    if process.returncode != 0:
        raise ImageError(
            f"building {image.tag} from {image.dockerfile} failed:\n" + "\n".join(lines[-30:])
        )
    digest = image_digest(image.tag)
    say(f"{image.tag} built in {time.monotonic() - started:.0f} s ({digest})")
    return digest


def export(image: Image) -> Path:
    """The image's OCI archive in the cache, written from the storage unless it is there."""
    archive = archive_path(image)
    if archive.exists():
        return archive
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    run(
        buildah("push", "--quiet", image.tag, f"oci-archive:{partial}:{image.tag}"),
        f"writing {image.tag} to {partial}",
    )
    partial.replace(archive)
    for older in images_root().glob(f"{image.name}-*.tar"):  # of earlier inputs
        if older != archive:
            older.unlink()
    return archive


def build_all(names: Sequence[str], *, again: bool = False) -> dict[str, str]:
    """Build each named image unless built; their digests. One build at a time on this
    machine (a lock)."""
    require_tools()
    images_root().mkdir(parents=True, exist_ok=True)
    with open(images_root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return {name: build(IMAGES[name], again=again) for name in names}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make images", description="Build the operator and job images here (buildah)."
    )
    parser.add_argument("images", nargs="*", metavar="IMAGE", help=f"of {', '.join(IMAGES)}")
    parser.add_argument(
        "--again",
        action="store_true",
        help="build even when built, and say whether the digest is the same as before",
    )
    options = parser.parse_args(argv)
    names = options.images or list(IMAGES)
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        parser.error(f"no image {', '.join(unknown)}: name {' or '.join(IMAGES)}")
    try:
        before = {n: build_all([n])[n] for n in names} if options.again else {}
        if options.again:
            base = make_base()
            if make_base(again=True) != base:
                print(f"{BASE_IMAGE}: NOT as before", file=sys.stderr)
        digests = build_all(names, again=options.again)
        archives = {n: export(IMAGES[n]) for n in names}
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name in names:
        same = ""
        if name in before:
            same = " (the same as before)" if before[name] == digests[name] else " (NOT as before)"
        print(f"{IMAGES[name].tag} {digests[name]} {archives[name]}{same}")
    return 1 if any(before.get(n, digests[n]) != digests[n] for n in names) else 0


if __name__ == "__main__":
    sys.exit(main())
