"""The runner as a container image: fsmatrix and everything the host side of a matrix needs.

Built offline in two stages, each named by a hash of its inputs and reused when they are unchanged
(like the guest image, backends/image.py):

- the base, ``fsmatrix-base:<hash>``: a debootstrap (minbase) root of Debian 12 with the Makefile's
  CONTAINER_PACKAGES, imported with ``podman import`` (there is no registry to pull a base from).
  The .debs are cached in ``$FSMATRIX_CACHE/debootstrap``, as the guest image's are;
- the image, ``fsmatrix:<version>-<hash>``: ``podman build --network=none`` of
  packer/container/Containerfile on that base, with a build context holding fsmatrix's source and a
  wheelhouse prepared on the host beforehand (``pip wheel``: libvirt-python is built here, against
  libvirt-dev), so that no step of the build needs the network.

The image carries its identity in /etc/fsmatrix/container.json (name, inputs hash, version, git
sha); results record it in ``provenance.host.container_image`` (backends/hostinfo.py).

    fsmatrix container build      # or: make container; prints the image's name last
    fsmatrix container tag        # the name for the current sources; exit 1 when not built
    fsmatrix container prune      # remove the others (fsmatrix:* and fsmatrix-base:*)
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from fsmatrix import __version__
from fsmatrix.agent import proc
from fsmatrix.agent.storage.devices import read_mounts
from fsmatrix.backends.image import Echo, cache_root, content_hash, git_sha, log_run
from fsmatrix.errors import UserError

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "packer" / "container" / "Containerfile"
IMAGE_REPOSITORY = "fsmatrix"
BASE_REPOSITORY = "fsmatrix-base"
SUITE = "bookworm"
# What makes the base besides its package list: bump when the debootstrap recipe below changes.
BASE_RECIPE = f"debootstrap --variant=minbase {SUITE}; docs, man pages, locales, apt lists, machine id removed; v2"
# Emptied in the base: nothing in the image reads them (and apt has no network to use its lists).
JUNK = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale")
# The build context's source: what the image runs and what `fsmatrix image build` inside it reads.
SOURCE_DIRS = ("runner/fsmatrix", "packer", "matrix")
SOURCE_FILES = ("pyproject.toml",)
IMAGE_PYTHON = (3, 11)  # Debian 12's python3: the wheels made on the host must fit it
BASE_TIMEOUT = 3600
BUILD_TIMEOUT = 1800


# --------------------------------------------------------------------------------------------
# inputs and names


def engine(name: str | None = None) -> str:
    """The container engine to build with: ``name``, else podman, else docker; a clear error without."""
    for candidate in [name] if name else ["podman", "docker"]:
        if proc.have(candidate):
            return candidate
    wanted = name or "podman (or docker)"
    raise UserError(f"{wanted} not found: run `make deps` (it installs podman and runc)")


def packages(repo: Path = REPO) -> list[str]:
    """The image's Debian packages: the Makefile's CONTAINER_PACKAGES (registry-derived), deduplicated."""
    if not proc.have("make"):
        raise UserError("make not found: the container's package list comes from the Makefile (apt-get install make)")
    done = proc.run(["make", "-s", "--no-print-directory", "-C", str(repo), "print-container-packages"], timeout=60)
    names = list(dict.fromkeys(done.stdout.split()))
    if not names:
        raise UserError(f"{repo}/Makefile: print-container-packages printed no packages")
    return names


def source_files(repo: Path = REPO) -> list[Path]:
    """Every source file that goes into the image, relative to ``repo``, sorted (no caches)."""
    files = [repo / name for name in SOURCE_FILES]
    for directory in SOURCE_DIRS:
        files += [
            p
            for p in (repo / directory).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
        ]
    return sorted(p.relative_to(repo) for p in files if p.is_file())


def base_hash(package_names: Iterable[str]) -> str:
    return content_hash([("packages", " ".join(package_names).encode()), ("recipe", BASE_RECIPE.encode())])


def inputs_hash(package_names: Iterable[str], repo: Path = REPO) -> str:
    """The hash that names the image: the base's inputs and every source file (the Containerfile too)."""
    items = [("base", base_hash(package_names).encode())]
    items += [(str(rel), (repo / rel).read_bytes()) for rel in source_files(repo)]
    return content_hash(items)


def image_name(digest: str) -> str:
    return f"{IMAGE_REPOSITORY}:{__version__}-{digest}"


def base_name(digest: str) -> str:
    return f"{BASE_REPOSITORY}:{digest}"


def source_url(repo: Path = REPO) -> str:
    """Where the source is (the OCI source label): $FSMATRIX_SOURCE_URL, the GitHub repository in
    Actions, the checkout's origin, else "unknown"."""
    if url := os.environ.get("FSMATRIX_SOURCE_URL"):
        return url
    if os.environ.get("GITHUB_REPOSITORY"):
        return f"{os.environ.get('GITHUB_SERVER_URL', 'https://github.com')}/{os.environ['GITHUB_REPOSITORY']}"
    if proc.have("git"):
        done = proc.run(["git", "-C", str(repo), "remote", "get-url", "origin"], check=False, timeout=10)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    return "unknown"


def image_exists(tool: str, name: str) -> bool:
    return proc.run([tool, "image", "inspect", "--format", "{{.Id}}", name], check=False, timeout=60).returncode == 0


def current_name(repo: Path = REPO) -> str:
    """The image name for the current sources (whether or not it is built)."""
    return image_name(inputs_hash(packages(repo), repo))


# --------------------------------------------------------------------------------------------
# building


def build_base(tool: str, package_names: list[str], cache: Path, echo: Echo) -> str:
    """The base image (debootstrap root, imported): its name; reused when it exists."""
    digest = base_hash(package_names)
    name = base_name(digest)
    if image_exists(tool, name):
        echo(f"container: base: reusing {name}")
        return name
    if os.geteuid() != 0:
        raise UserError("building the container's base needs root (debootstrap): run `make container` as root")
    for needed in ("debootstrap", "tar"):
        if not proc.have(needed):
            raise UserError(f"{needed} not found: run `make deps` or apt-get install {needed}")
    work = cache / "container" / f"base-{digest}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rootfs, log = work / "rootfs", work.with_suffix(".log")
    mirror = os.environ.get("FSMATRIX_MIRROR") or "http://deb.debian.org/debian"
    debs = cache / "debootstrap"
    debs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    echo(f"container: base: debootstrap {SUITE} with {len(package_names)} packages (.debs: {debs}, log: {log})")
    try:
        cmd = [
            "debootstrap", "--variant=minbase", f"--include={','.join(package_names)}", f"--cache-dir={debs}",
            SUITE, str(rootfs), mirror,
        ]  # fmt: skip
        try:
            log_run(cmd, log, BASE_TIMEOUT)
        except proc.CommandError:
            # Its own log says which package failed; the root goes, the log stays.
            inner = rootfs / "debootstrap" / "debootstrap.log"
            if inner.is_file():
                shutil.copy2(inner, work.with_suffix(".debootstrap.log"))
                echo(f"container: base: debootstrap failed; its log: {work.with_suffix('.debootstrap.log')}")
            raise
        echo(f"container: base: debootstrap took {time.monotonic() - started:.0f} s; importing as {name}")
        for junk in JUNK:
            for path in (rootfs / junk).glob("*"):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                elif path.name not in ("lock", "partial"):
                    path.unlink()
        # A podman/docker container gets its own hostname, hosts and resolv.conf.
        for name_file in ("etc/hostname", "etc/resolv.conf", "var/lib/dbus/machine-id"):
            (rootfs / name_file).unlink(missing_ok=True)
        # No machine id of its own: debootstrap made one, which every host running the image would
        # share (provenance.host.machine_id). Runs mount the host's (-v /etc/machine-id:...:ro).
        (rootfs / "etc" / "machine-id").write_text("")
        tarball = work / "rootfs.tar"
        proc.run(["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(tarball), "."], timeout=1800)
        shutil.rmtree(rootfs)
        proc.run(
            [tool, "import", "--change", 'CMD ["/bin/bash"]', "--message", BASE_RECIPE, str(tarball), name],
            timeout=1800,
        )
    finally:
        _unmount_under(rootfs)  # debootstrap mounts /proc and /sys in the root; a failure can leave them
        shutil.rmtree(work, ignore_errors=True)  # the root (~1.5 GB) and its tarball; the .debs stay cached
    echo(f"container: base: {name} in {time.monotonic() - started:.0f} s")
    return name


def _unmount_under(root: Path) -> None:
    """Unmount everything mounted under ``root``, deepest first."""
    inside = [m.mount_point for m in read_mounts() if Path(m.mount_point).is_relative_to(root)]
    for point in sorted(inside, key=len, reverse=True):
        proc.run(["umount", "--lazy", point], check=False, timeout=60)


def wheelhouse(cache: Path, repo: Path, echo: Echo) -> Path:
    """Wheels of fsmatrix's dependencies (and the build backend), made on this host with pip; reused
    while pyproject.toml and the Python version are unchanged."""
    key = content_hash([("pyproject", (repo / "pyproject.toml").read_bytes()), ("python", sys.version.encode())])
    wheels = cache / "container" / f"wheels-{key}"
    if (wheels / ".complete").exists():
        echo(f"container: wheels: reusing {wheels}")
        return wheels
    if sys.version_info[:2] != IMAGE_PYTHON:
        wanted = ".".join(map(str, IMAGE_PYTHON))
        raise UserError(f"the wheelhouse is made with this Python, which must be the image's {wanted} (Debian 12's)")
    started = time.monotonic()
    partial = wheels.with_name(wheels.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    echo(f"container: wheels: pip wheel fsmatrix's dependencies into {wheels}")
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--use-pep517"]
    cmd += ["--wheel-dir", str(partial)]
    log_run([*cmd, str(repo), "setuptools>=61", "wheel"], partial / "pip.log", BUILD_TIMEOUT)
    for own in partial.glob("fsmatrix-*.whl"):
        own.unlink()  # fsmatrix itself is installed from its source in the image
    (partial / ".complete").touch()
    shutil.rmtree(wheels, ignore_errors=True)
    partial.rename(wheels)
    echo(f"container: wheels: done in {time.monotonic() - started:.0f} s")
    return wheels


def stage_context(context: Path, wheels: Path, identity: dict[str, str], repo: Path) -> None:
    """The build context: Containerfile, src/ (the source files), wheels/, container.json."""
    shutil.rmtree(context, ignore_errors=True)
    (context / "src").mkdir(parents=True)
    for rel in source_files(repo):
        dest = context / "src" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, dest)
    # pyproject names a readme; the real one is not an input (a README edit needs no new image).
    (context / "src" / "README.md").write_text(f"fsmatrix {identity['version']} ({identity['source']})\n")
    shutil.copytree(wheels, context / "wheels", ignore=shutil.ignore_patterns(".complete", "pip.log"))
    shutil.copy2(repo / CONTAINERFILE.relative_to(REPO), context / "Containerfile")
    (context / "container.json").write_text(json.dumps(identity, indent=1, sort_keys=True) + "\n")


def build(force: bool = False, echo: Echo = print, cache: Path | None = None, tool_name: str | None = None) -> str:
    """Build the image for the current sources, or reuse it (unless ``force``): its name."""
    tool = engine(tool_name)
    cache = cache or cache_root()
    package_names = packages()
    digest = inputs_hash(package_names)
    name = image_name(digest)
    if image_exists(tool, name) and not force:
        echo(f"container: reusing {name}")
        return name
    (cache / "container").mkdir(parents=True, exist_ok=True)
    with (cache / "container" / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per cache; the others then reuse it
        if image_exists(tool, name) and not force:
            echo(f"container: reusing {name} (built meanwhile)")
            return name
        started = time.monotonic()
        base = build_base(tool, package_names, cache, echo)
        wheels = wheelhouse(cache, REPO, echo)
        identity = {
            "name": name,
            "inputs_hash": digest,
            "version": __version__,
            "git_sha": git_sha(REPO),
            "source": source_url(REPO),
            "base": base,
            "built": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        context = cache / "container" / f"context-{digest}"
        log = cache / "container" / f"fsmatrix-{digest}.build.log"
        try:
            stage_context(context, wheels, identity, REPO)
            cmd = [tool, "build", "--network=none", "-f", str(context / "Containerfile"), "-t", name]
            if tool == "podman":
                cmd.append("--pull=never")
            args = {
                "BASE": base,
                "FSMATRIX_VERSION": __version__,
                "FSMATRIX_GIT_SHA": identity["git_sha"],
                "FSMATRIX_INPUTS_HASH": digest,
                "FSMATRIX_SOURCE": identity["source"],
            }
            for key, value in args.items():
                cmd += ["--build-arg", f"{key}={value}"]
            echo(f"container: {tool} build --network=none {name} (log: {log})")
            log_run([*cmd, str(context)], log, BUILD_TIMEOUT)
        finally:
            shutil.rmtree(context, ignore_errors=True)
        echo(f"container: built {name} in {time.monotonic() - started:.0f} s")
        return name


def prune(tool: str, keep: set[str]) -> tuple[list[str], list[str]]:
    """Remove fsmatrix's images (both repositories) other than ``keep``: (removed, still in use)."""
    listed = proc.run([tool, "images", "--format", "{{.Repository}}:{{.Tag}}"], timeout=60).stdout.split()
    ours = sorted(
        name.removeprefix("localhost/")
        for name in listed
        if name.removeprefix("localhost/").split(":")[0] in (IMAGE_REPOSITORY, BASE_REPOSITORY)
    )
    removed: list[str] = []
    in_use: list[str] = []
    for name in ours:
        if name in keep:
            continue
        done = proc.run([tool, "rmi", name], check=False, timeout=300)
        (removed if done.returncode == 0 else in_use).append(name)
    return removed, in_use
