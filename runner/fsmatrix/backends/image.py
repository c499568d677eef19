"""The guest images: build one (debootstrap base, then Packer), find it, boot it under QEMU.

Each image is built from its definition (packer/images/NAME.yaml, ``fsmatrix.image_definitions``): debian12,
the default, and the others a cell may name (``image:``). Built images live outside the repository
(``$FSMATRIX_CACHE``, default /var/cache/fsmatrix), named by a hash of their inputs: the shared
package list, the image's definition, packer/*.pkr.hcl, packer/scripts/* and the guest agent's
source. Unchanged inputs reuse the image; a changed agent reruns only the Packer stage; a changed
package list, suite or base script reruns debootstrap too (from its package cache).

    fsmatrix image build [--image NAME]   # or: make image
    fsmatrix image path [--image NAME]
    fsmatrix image probe-accel
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fsmatrix import __version__, image_definitions
from fsmatrix.agent import proc
from fsmatrix.backends import cpio, hostinfo
from fsmatrix.errors import UserError

CACHE_ENV = "FSMATRIX_CACHE"
DEFAULT_CACHE = Path("/var/cache/fsmatrix")
REPO = Path(__file__).resolve().parents[3]
PACKER_DIR = REPO / "packer"
PACKAGES_FILE = "packages.txt"
DISK_MIB = 3072  # the guest's root disk; data disks are separate
BOX_NAME = "fsmatrix/guest"
PROBE_MARKER = "FSMATRIX-PROBE-OK"
BASE_TIMEOUT = 1800
PACKER_TIMEOUT = 3600

Echo = Callable[[str], None]


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


# --------------------------------------------------------------------------------------------
# inputs and names


def input_files(repo: Path = REPO, image: str = image_definitions.DEFAULT) -> list[Path]:
    """Every file whose content goes into image ``image``, relative to ``repo``, sorted: another
    image's definition is not one of them."""
    packer = repo / "packer"
    files = [packer / PACKAGES_FILE, *packer.glob("*.pkr.hcl"), *(packer / "scripts").glob("*")]
    files += [repo / image_definitions.DEFINITIONS / f"{image}.yaml"]
    files += [repo / "runner" / "fsmatrix" / "__init__.py", *agent_files(repo)]
    return sorted(p.relative_to(repo) for p in files if p.is_file())


def agent_files(repo: Path = REPO) -> list[Path]:
    """fsmatrix.agent's source files (no caches), absolute."""
    agent = repo / "runner" / "fsmatrix" / "agent"
    return sorted(
        p for p in agent.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )


def content_hash(items: Iterable[tuple[str, bytes]]) -> str:
    """16 hex digits of SHA-256 over named contents, in order: what names a cached build (an image,
    its base, the runner's container image and its layers)."""
    sha = hashlib.sha256()
    for name, data in items:
        # Name and length first: moving bytes between files or renaming a file changes the hash.
        sha.update(f"{name}\0{len(data)}\0".encode())
        sha.update(data)
    return sha.hexdigest()[:16]


def inputs_hash(repo: Path = REPO, image: str = image_definitions.DEFAULT) -> str:
    """The hash that names an image: changes whenever anything that goes into it changes."""
    image_definitions.get(image, repo)  # an unknown name is refused, not hashed into an image of nothing
    return content_hash((str(rel), (repo / rel).read_bytes()) for rel in input_files(repo, image))


def base_hash(pubkey: bytes, repo: Path = REPO, image: str = image_definitions.DEFAULT) -> str:
    """The hash that names an image's base (debootstrap) stage: its suite and whole package list,
    the base script, the build key, the disk size (not the tools' paths: Packer's stage checks them)."""
    definition = image_definitions.get(image, repo)
    packages = definition.package_list(image_definitions.common_packages(repo))
    return content_hash(
        [
            ("suite", definition.suite.encode()),
            (PACKAGES_FILE, "\n".join(packages).encode()),
            ("base.sh", (repo / "packer" / "scripts" / "base.sh").read_bytes()),
            ("pubkey", pubkey),
            ("disk_mib", str(DISK_MIB).encode()),
        ]
    )


@dataclass(frozen=True)
class ImagePaths:
    """Where one image's files are (or will be)."""

    name: str  # fsmatrix-<inputs hash>
    qcow2: Path
    sha256: Path  # "<hex>  <file name>", as sha256sum writes it
    box: Path  # libvirt Vagrant box
    catalog: Path  # Vagrant catalog JSON for offline `vagrant box add`
    manifest: Path  # copy of the guest's /etc/fsmatrix/image.json

    @property
    def files(self) -> list[Path]:
        return [self.qcow2, self.sha256, self.box, self.catalog, self.manifest]

    def complete(self) -> bool:
        return all(p.is_file() for p in self.files)


def image_paths(
    digest: str | None = None, cache: Path | None = None, image: str = image_definitions.DEFAULT
) -> ImagePaths:
    """The files of the image with hash ``digest``, or of image ``image`` built from the current sources."""
    name = f"fsmatrix-{digest or inputs_hash(image=image)}"
    folder = (cache or cache_root()) / "images"
    return ImagePaths(
        name=name,
        qcow2=folder / f"{name}.qcow2",
        sha256=folder / f"{name}.qcow2.sha256",
        box=folder / f"{name}.box",
        catalog=folder / f"{name}.catalog.json",
        manifest=folder / f"{name}.json",
    )


def built_images(cache: Path | None = None) -> list[ImagePaths]:
    """Every image in the cache (complete or not), newest first."""
    folder = (cache or cache_root()) / "images"
    qcow2s = sorted(folder.glob("fsmatrix-*.qcow2"), key=lambda p: p.stat().st_mtime, reverse=True)
    return [image_paths(q.name.removeprefix("fsmatrix-").removesuffix(".qcow2"), cache) for q in qcow2s]


def definition_of(paths: ImagePaths) -> str | None:
    """The definition a built image was made from (its manifest's ``image``); None when its manifest
    is missing or does not say (images built before definitions, all of them Debian 12)."""
    try:
        name = json.loads(paths.manifest.read_text()).get("image")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def current_images(cache: Path | None = None) -> dict[str, ImagePaths]:
    """Image name -> its files for the current sources (built or not), for every definition."""
    return {name: image_paths(cache=cache, image=name) for name in image_definitions.names()}


def prune(keep: int, cache: Path | None = None) -> list[ImagePaths]:
    """Delete all images but the current sources' one of every definition and the ``keep`` newest
    others; return the deleted.

    Every agent change builds a new image of each definition (~0.6 GB with its box), and results
    name the image they ran on, so old ones stay until pruned. Running VMs keep their open backing
    file until they exit.
    """
    current = {paths.name for paths in current_images(cache).values()}
    older = [paths for paths in built_images(cache) if paths.name not in current]
    for paths in older[keep:]:
        for path in [*paths.files, *(paths.qcow2.parent / f"{paths.name}.{log}.log" for log in ("packer", "serial"))]:
            path.unlink(missing_ok=True)
    return older[keep:]


def ssh_key(cache: Path | None = None) -> Path:
    """The build's SSH key (private half; ``.pub`` beside it), made once per cache."""
    key = (cache or cache_root()) / "ssh" / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fsmatrix-build", "-f", str(key)], timeout=60)
    return key


def git_sha(repo: Path = REPO) -> str:
    """The commit being built, "-dirty" when tracked files have local changes; outside git, the
    commit fsmatrix's container image was built from (when running in one), else "unknown"."""
    head = None
    if proc.have("git"):
        head = proc.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=False, timeout=10)
    if head is None or head.returncode != 0:
        image = hostinfo.container_image()
        return image.get("git_sha", "unknown") if image else "unknown"
    status = proc.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"], timeout=10)
    return head.stdout.strip() + ("-dirty" if status.stdout.strip() else "")


def write_agent_tarball(dest: Path, repo: Path = REPO) -> Path:
    """fsmatrix/__init__.py and fsmatrix/agent/** as a tar file: exactly what goes into the guest."""
    package = repo / "runner" / "fsmatrix"
    with tarfile.open(dest, "w") as tar:
        for path in [package / "__init__.py", *agent_files(repo)]:
            info = tar.gettarinfo(str(path), arcname=str(Path("fsmatrix") / path.relative_to(package)))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    return dest


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the file ``path`` (created with its directory) for the ``with`` block:
    one process at a time builds what the lock guards; the others then find it built."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def sha256_file(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


# --------------------------------------------------------------------------------------------
# accelerator probe


def probe_initramfs(dest: Path, busybox: Path = Path("/bin/busybox")) -> Path:
    """An initramfs whose /init prints PROBE_MARKER on the console and powers off."""
    if not busybox.is_file():
        raise UserError(f"{busybox} not found (install busybox-static): the accelerator probe needs it")
    init = f"#!/bin/busybox sh\n/bin/busybox echo {PROBE_MARKER}\n/bin/busybox poweroff -f\n".encode()
    dest.write_bytes(
        cpio.newc(
            [
                ("bin", stat.S_IFDIR | 0o755, b"", 0),
                ("dev", stat.S_IFDIR | 0o755, b"", 0),
                ("dev/console", stat.S_IFCHR | 0o600, b"", os.makedev(5, 1)),
                ("bin/busybox", stat.S_IFREG | 0o755, busybox.read_bytes(), 0),
                ("init", stat.S_IFREG | 0o755, init, 0),
            ]
        )
    )
    return dest


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def newest_base_kernel(cache: Path | None = None) -> Path | None:
    """The kernel of the newest base stage: what the accelerator probe boots (None before any build)."""
    kernels = sorted(((cache or cache_root()) / "base").glob("base-*.vmlinuz"), key=lambda p: p.stat().st_mtime)
    return kernels[-1] if kernels else None


def host_accel() -> str:
    """kvm or tcg for the VMs of this host: the probe's answer; tcg, the safe one, before any build."""
    kernel = newest_base_kernel()
    return probe_accel(kernel) if kernel is not None else "tcg"


def probe_accel(kernel: Path, timeout: float = 30.0, cache: Path | None = None, refresh: bool = False) -> str:
    """ "kvm" when a KVM guest really boots here (a tiny kernel + initramfs prints a marker in time),
    else "tcg". /dev/kvm existing proves nothing. Cached for this host boot."""
    cached = (cache or cache_root()) / "accel.json"
    if not refresh and cached.exists():
        try:
            doc = json.loads(cached.read_text())
            if doc.get("boot_id") == _boot_id() and doc.get("accel") in ("kvm", "tcg"):
                return str(doc["accel"])
        except ValueError:
            pass
    accel = "tcg"
    if os.path.exists("/dev/kvm"):
        initrd = cached.parent / "probe-initramfs.cpio"
        cached.parent.mkdir(parents=True, exist_ok=True)
        probe_initramfs(initrd)
        cmd = [
            "qemu-system-x86_64", "-name", "fsmatrix-probe", "-accel", "kvm", "-cpu", "max", "-m", "256",
            "-kernel", str(kernel), "-initrd", str(initrd), "-append", "console=ttyS0 panic=-1 quiet",
            "-display", "none", "-monitor", "none", "-serial", "stdio", "-no-reboot", "-nodefaults",
        ]  # fmt: skip
        try:
            done = proc.run(cmd, timeout=timeout, check=False)
            seen = done.stdout + done.stderr
        except proc.CommandError as exc:  # timed out: the vCPU never got anywhere
            seen = exc.output
        if PROBE_MARKER in seen:
            accel = "kvm"
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps({"boot_id": _boot_id(), "accel": accel}) + "\n")
    return accel


# --------------------------------------------------------------------------------------------
# building


def log_run(
    cmd: Sequence[str], log_file: Path, timeout: float, env: dict[str, str] | None = None, cwd: Path | None = None
) -> None:
    """Run a long build step with its output in ``log_file``; on failure, the error carries the tail."""
    try:
        done = proc.run(cmd, timeout=timeout, env=env, cwd=cwd, check=False)
        log_file.write_text(done.stdout + done.stderr)
    except proc.CommandError as exc:
        log_file.write_text(exc.output)
        raise
    if done.returncode != 0:
        raise proc.CommandError(cmd, done.returncode, done.stdout + done.stderr)


def write_package_list(dest: Path, definition: image_definitions.Definition) -> Path:
    """The image's whole package list (the shared one, its kernel, its tools', its own), one a line."""
    packages = definition.package_list(image_definitions.common_packages(REPO))
    dest.write_text(f"# the packages of image {definition.name}\n" + "".join(f"{p}\n" for p in packages))
    return dest


def build_base(
    cache: Path, key: Path, echo: Echo = print, definition: image_definitions.Definition | None = None
) -> tuple[Path, Path]:
    """The base stage (debootstrap) of an image: (qcow2, kernel), reused when its inputs are unchanged."""
    definition = definition or image_definitions.get(image_definitions.DEFAULT)
    digest = base_hash(key.with_suffix(".pub").read_bytes(), image=definition.name)
    base_dir = cache / "base"
    qcow2, kernel = base_dir / f"base-{digest}.qcow2", base_dir / f"base-{digest}.vmlinuz"
    if qcow2.exists() and kernel.exists():
        echo(f"base: reusing {qcow2}")
        return qcow2, kernel
    work = base_dir / f"work-{digest}"
    base_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    echo(f"base: debootstrap {definition.name} ({definition.suite}) into {work} (log: {work}.log)")
    package_list = write_package_list(base_dir / f"packages-{digest}.txt", definition)
    # One package cache for every suite: a .deb's file name carries its version, and debootstrap
    # checks each cached file against the suite's checksums before it uses it.
    cmd = [
        "bash", str(PACKER_DIR / "scripts" / "base.sh"), str(package_list), str(cache / "debootstrap"), str(work),
        str(key.with_suffix(".pub")), str(qcow2), str(kernel), str(DISK_MIB), definition.suite,
    ]  # fmt: skip
    try:
        log_run(cmd, Path(f"{work}.log"), BASE_TIMEOUT)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the unpacked root (~1 GB); the .debs stay cached
        package_list.unlink(missing_ok=True)
    echo(f"base: done in {time.monotonic() - started:.0f} s")
    return qcow2, kernel


def _write_json(dest: Path, doc: dict[str, Any]) -> Path:
    dest.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return dest


def _catalog(paths: ImagePaths, version: str, box_sha: str) -> dict[str, object]:
    return {
        "name": BOX_NAME,
        "description": f"fsmatrix guest image {paths.name}",
        "versions": [
            {
                "version": version,
                "providers": [
                    {
                        "name": "libvirt",
                        "url": paths.box.as_uri(),
                        "checksum_type": "sha256",
                        "checksum": box_sha,
                    }
                ],
            }
        ],
    }


def build(
    force: bool = False, echo: Echo = print, cache: Path | None = None, image: str = image_definitions.DEFAULT
) -> ImagePaths:
    """Build image ``image`` for the current inputs, or reuse it when it exists (unless ``force``)."""
    cache = cache or cache_root()
    definition = image_definitions.get(image)
    paths = image_paths(cache=cache, image=image)
    if paths.complete() and not force:
        echo(f"image: reusing {paths.qcow2}")
        return paths
    paths.qcow2.parent.mkdir(parents=True, exist_ok=True)
    # One build at a time per cache (CI jobs on the same machine share it); the winner's image is
    # then reused by the others.
    with (cache / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if paths.complete() and not force:
            echo(f"image: reusing {paths.qcow2} (built meanwhile)")
            return paths
        return _build(paths, cache, echo, definition)


def _build(paths: ImagePaths, cache: Path, echo: Echo, definition: image_definitions.Definition) -> ImagePaths:
    for tool in ("debootstrap", "packer", "qemu-system-x86_64", "qemu-img", "grub-mkimage", "mke2fs", "sfdisk"):
        if not proc.have(tool):
            raise UserError(
                f"{tool} not found: run `make image` (it installs the Debian packages) or apt-get install it"
            )
    key = ssh_key(cache)
    base, kernel = build_base(cache, key, echo, definition)
    accel = probe_accel(kernel, cache=cache)
    echo(f"image: accelerator {accel}")

    build_dir = paths.qcow2.parent / f".build-{paths.name}"
    shutil.rmtree(build_dir, ignore_errors=True)
    build_dir.mkdir(parents=True)
    serial_log = paths.qcow2.parent / f"{paths.name}.serial.log"  # beside the packer log: kept for a failure
    try:  # an interrupted build (^C, a timeout, packer failing) leaves no half-built directory
        now = datetime.now(UTC)
        build_time = now.isoformat(timespec="seconds")
        output = build_dir / "output"
        variables = {
            "base_image": str(base),
            "disk_size": f"{DISK_MIB}M",
            "accelerator": accel,
            "output_directory": str(output),
            "vm_name": paths.qcow2.name,
            "ssh_private_key_file": str(key),
            "agent_tarball": str(write_agent_tarball(build_dir / "fsmatrix-agent.tar")),
            # Fixed names: the guest finds them in /tmp/ (scripts/provision.sh).
            "packages_file": str(write_package_list(build_dir / "packages.txt", definition)),
            "definition_file": str(_write_json(build_dir / "image-definition.json", definition.manifest_fields())),
            "manifest_out": str(build_dir / paths.manifest.name),
            "box_out": str(build_dir / paths.box.name),
            "serial_log": str(serial_log),
            "git_sha": git_sha(),
            "build_time": build_time,
            "fsmatrix_version": __version__,
            "image_name": paths.name,
        }
        cmd = ["packer", "build", "-force", "-color=false"]
        for name, value in variables.items():
            cmd += ["-var", f"{name}={value}"]
        env = {
            **os.environ,
            "CHECKPOINT_DISABLE": "1",  # no update check: the build is offline
            "PACKER_CACHE_DIR": str(cache / "packer_cache"),
            "PACKER_NO_COLOR": "1",
        }
        started = time.monotonic()
        log_file = paths.qcow2.parent / f"{paths.name}.packer.log"
        echo(f"packer: building {paths.name}, image {definition.name} (log: {log_file}, guest console: {serial_log})")
        log_run([*cmd, "."], log_file, PACKER_TIMEOUT, env=env, cwd=PACKER_DIR)
        echo(f"packer: done in {time.monotonic() - started:.0f} s")

        os.replace(output / paths.qcow2.name, paths.qcow2)
        os.replace(build_dir / paths.box.name, paths.box)
        os.replace(build_dir / paths.manifest.name, paths.manifest)
        paths.sha256.write_text(f"{sha256_file(paths.qcow2)}  {paths.qcow2.name}\n")
        # Vagrant wants a newer version for a newer box: the build time makes it monotonic.
        version = f"{__version__}.{now:%Y%m%d%H%M%S}"
        paths.catalog.write_text(json.dumps(_catalog(paths, version, sha256_file(paths.box)), indent=1) + "\n")
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
    echo(f"image: {paths.qcow2}")
    return paths
