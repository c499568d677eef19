"""The machine a run's numbers came from: ``provenance.host`` in every result.

A guest's own provenance describes the guest (its kernel, "QEMU TCG CPU", its memory), which is the
same on every host; what makes two VM results comparable or not is the host under the guest: its
CPU, kernel, memory, QEMU, the storage under the work directory (where the data disks' image files
live) and the CPU frequency governor. ``compare`` refuses results from different hosts and
calibrations are keyed by them (results/verdict/environment.py, ``ENV_KEYS``).

The machine id is a hash, never the raw id. It comes from the hardware's DMI product UUID when that
is readable (the same inside a container as outside), else from ``/etc/machine-id`` (which in a
container is the container's: ``machine_id_source`` says which was used; fsmatrix's container image
has none of its own, and its runs mount the host's read-only).

In fsmatrix's own container image (``fsmatrix container build``), ``container_image`` names the
image: the identity baked into it at build time (its name, the hash of its inputs, version, git sha);
an image cannot know its registry digest, and two images with the same inputs hash hold the same
toolchain and source.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

from fsmatrix.agent import proc

SYS = Path("/sys")
PROC = Path("/proc")
ID_SOURCES = (Path("/sys/class/dmi/id/product_uuid"), Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
CONTAINER_MARKERS = {"podman": Path("/run/.containerenv"), "docker": Path("/.dockerenv")}
CONTAINER_IDENTITY = Path("/etc/fsmatrix/container.json")
IDENTITY_KEYS = ("name", "inputs_hash", "version", "git_sha", "source", "base", "built")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _first_field(path: Path, key: str) -> str | None:
    for line in (_read(path) or "").splitlines():
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return None


def machine_id(sources: tuple[Path, ...] = ID_SOURCES) -> tuple[str | None, str | None]:
    """(a short hash of the first readable machine identity, the file it came from)."""
    for path in sources:
        raw = _read(path)
        if raw:
            return hashlib.sha256(f"fsmatrix:{raw}".encode()).hexdigest()[:16], str(path)
    return None, None


def container() -> str | None:
    """The container engine this process runs under, if any (podman and docker leave a marker file)."""
    for engine, marker in CONTAINER_MARKERS.items():
        if marker.exists():
            return engine
    return None


def container_image(path: Path = CONTAINER_IDENTITY) -> dict[str, str] | None:
    """The fsmatrix container image this process runs in (its baked identity), or None outside one."""
    raw = _read(path)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    return {key: str(doc[key]) for key in IDENTITY_KEYS if key in doc}


def _mount_of(st_dev: int, mountinfo: str) -> tuple[str, str] | None:
    """(fstype, source) of the mount whose device is ``st_dev``, from /proc/self/mountinfo text."""
    wanted = f"{os.major(st_dev)}:{os.minor(st_dev)}"
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 3 and len(tail) >= 2 and fields[2] == wanted:
            return tail[0], tail[1]
    return None


def _scheduler(text: str | None) -> str | None:
    """The active scheduler in /sys/block/X/queue/scheduler ("mq-deadline" in "[mq-deadline] none")."""
    if not text:
        return None
    for word in text.split():
        if word.startswith("["):
            return word.strip("[]")
    return text


def block_device(st_dev: int, sys_root: Path = SYS) -> dict[str, Any] | None:
    """The whole disk behind a filesystem's device number: name, model, rotational, scheduler.
    None for devices without a block device (tmpfs, overlay)."""
    node = sys_root / "dev" / "block" / f"{os.major(st_dev)}:{os.minor(st_dev)}"
    try:
        resolved = node.resolve(strict=True)
    except OSError:
        return None
    disk = resolved.parent if (resolved / "partition").exists() else resolved
    queue = disk / "queue"
    rotational = _read(queue / "rotational")
    return {
        "name": disk.name,
        "model": _read(disk / "device" / "model"),
        "rotational": None if rotational is None else rotational == "1",
        "scheduler": _scheduler(_read(queue / "scheduler")),
    }


def workdir_storage(workdir: Path) -> dict[str, Any]:
    """Where the work directory (VM disk images, loop files) lives: filesystem and backing disk."""
    path = workdir
    while not path.exists() and path != path.parent:
        path = path.parent  # not made yet: the filesystem it will be made on
    st_dev = path.stat().st_dev
    mount = _mount_of(st_dev, _read(PROC / "self" / "mountinfo") or "")
    return {
        "fstype": mount[0] if mount else None,
        "source": mount[1] if mount else None,
        "disk": block_device(st_dev),
    }


def _version_line(command: list[str]) -> str | None:
    if not proc.have(command[0]):
        return None
    result = proc.run(command, check=False, timeout=30)
    lines = result.stdout.strip().splitlines()
    return lines[0].strip() if result.returncode == 0 and lines else None


def qemu_version() -> str | None:
    return _version_line(["qemu-system-x86_64", "--version"])


def describe(workdir: Path, **extra: Any) -> dict[str, Any]:
    """``provenance.host``: this machine, as far as it can change a number. ``extra``: what the
    backend knows besides (``qemu_version``, ``libvirt_version``)."""
    memory = _first_field(PROC / "meminfo", "MemTotal")
    ident, ident_source = machine_id()
    return {
        "cpu_model": _first_field(PROC / "cpuinfo", "model name") or platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
        "memory_kib": int(memory.split()[0]) if memory else None,
        "machine_id": ident,
        "machine_id_source": ident_source,
        "container": container(),
        "container_image": container_image(),
        "cpu_governor": _read(SYS / "devices" / "system" / "cpu" / "cpu0" / "cpufreq" / "scaling_governor"),
        "workdir": workdir_storage(workdir),
        **extra,
    }
