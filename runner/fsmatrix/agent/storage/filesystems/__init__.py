"""One small module per filesystem, in the style of xfstests-bld's per-filesystem configs.

Each module declares a ``FILESYSTEM``: its name, mkfs tool and default (non-interactive) options,
the kernel module that provides it, default mount options, and a geometry reader that runs the
filesystem's own inspection tool and parses its output in one function. What makes tmpfs (no
device) and raw (no filesystem) special is in their fields, not in rules elsewhere. This package
holds the shared description and the registry, the ``FILESYSTEMS`` tuple: adding a filesystem is
one module and one line there (docs/adding-a-filesystem.md).
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fsmatrix.agent import declare, proc

FILESYSTEMS: tuple[str, ...] = (
    "ext2",
    "ext3",
    "ext4",
    "xfs",
    "btrfs",
    "jfs",
    "reiserfs",
    "nilfs2",
    "f2fs",
    "tmpfs",
    "raw",
)

# Where layout split-journal puts a database journal unless the cell says otherwise: a filesystem
# without a journal of its own, so the database's journal is not journaled twice.
DEFAULT_JOURNAL_FILESYSTEM = "ext2"

GeometryReader = Callable[[str | None, Path | None], dict[str, Any]]


def device_geometry(name: str, parse: Callable[[str], dict[str, Any]], *command: str) -> GeometryReader:
    """The ``read_geometry`` of a filesystem whose inspection tool reads it off the device:
    ``command`` with the device last, its output through ``parse``; ValueError without a device."""

    def read_geometry(device: str | None, mount_point: Path | None = None) -> dict[str, Any]:
        if device is None:
            raise ValueError(f"{name} geometry needs the device")
        return parse(proc.output([*command, device], timeout=120))

    return read_geometry


def append_options(defaults: Sequence[str], extra: Sequence[str]) -> list[str]:
    """Default mkfs arguments followed by the cell's: the later option wins for most mkfs tools."""
    return [*defaults, *extra]


@dataclass(frozen=True)
class Filesystem:
    """What fsmatrix needs to know to format, mount and describe one filesystem type."""

    name: str
    package: str | None  # Debian package with the tools, for "install X" hints
    mkfs: tuple[str, ...]  # tool + default options; () when there is nothing to format (tmpfs, raw)
    kernel_module: str | None  # module that registers the type; None = always built in
    read_geometry: GeometryReader  # (device, mount point) -> parsed geometry, always with block_size
    geometry_tool: str | None = None
    version_command: tuple[str, ...] = ()
    mount_options: tuple[str, ...] = ()
    # The mkfs tool's getopt string (a letter followed by ':' takes a value), as in its source: how
    # a cell's mkfs_options are parsed to check they are options only (agent/options.py).
    mkfs_getopt: str = ""
    min_device_bytes: int = 0  # mkfs refuses a smaller device (checked by matrix expand)
    # How the cell's mkfs options combine with the defaults (ext merges its -E lists).
    combine_mkfs_options: Callable[[Sequence[str], Sequence[str]], list[str]] = field(default=append_options)
    device: bool = True  # needs a block device (False: tmpfs, sized by storage.disk_size instead)
    mounts: bool = True  # a filesystem is mounted (False: raw, the workload uses the device itself)
    host_packages: tuple[str, ...] = ()  # Debian packages the host needs beyond ``package``
    # What of a data disk the workload cannot fill (metadata, journal, reserved blocks; for the
    # copy-on-write and log-structured ones the space rewrites take before it is reclaimed): a
    # fraction of the disk plus a fixed amount, conservative. Used by the fit check (agent/fit.py).
    overhead_fraction: float = 0.10
    overhead_bytes: int = 64 << 20

    def usable_bytes(self, size: int) -> int:
        """What a workload can write to a filesystem made on ``size`` bytes of disk."""
        return max(0, int(size * (1 - self.overhead_fraction)) - self.overhead_bytes)

    @property
    def packages(self) -> tuple[str, ...]:
        """Debian packages with this filesystem's tools (guest image and host)."""
        return ((self.package,) if self.package else ()) + self.host_packages

    @property
    def tools(self) -> tuple[str, ...]:
        """External programs this filesystem needs on PATH."""
        wanted = [self.mkfs[0]] if self.mkfs else []
        if self.geometry_tool:
            wanted.append(self.geometry_tool)
        return tuple(wanted)

    def mkfs_command(self, device: str, extra: Sequence[str] = ()) -> list[str]:
        if not self.mkfs:
            raise ValueError(f"{self.name} has no mkfs step")
        return [self.mkfs[0], *self.combine_mkfs_options(self.mkfs[1:], extra), device]

    def mkfs_version(self) -> str | None:
        if not self.version_command:
            return None
        return parse_version_banner(_combined_output(proc.run(self.version_command, timeout=60, check=False, input="")))


def _combined_output(done: subprocess.CompletedProcess[str]) -> str:
    # mke2fs and mkfs.jfs print their version on stderr, the others on stdout.
    return done.stdout + "\n" + done.stderr


def parse_version_banner(text: str) -> str | None:
    """The version banner of a mkfs tool: its first non-empty line, e.g. "mke2fs 1.47.0 (5-Feb-2023)"."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return None


def colon_fields(text: str) -> dict[str, str]:
    """``Key:   value`` lines (dumpe2fs -h, nilfs-tune -l, jfs_tune -l) as a dict; the first colon splits."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith((" ", "\t")):
            fields[key.strip()] = value.strip()
    return fields


def leading_int(text: str | None) -> int | None:
    """The integer a value starts with ("4096 bytes" -> 4096); None when there is none."""
    if text is None:
        return None
    words = text.split()
    if not words:
        return None
    word = words[0]
    try:
        return int(word, 16) if word.lower().startswith("0x") else int(word)
    except ValueError:
        return None


def all_filesystems() -> list[Filesystem]:
    return [get(name) for name in FILESYSTEMS]


@functools.cache
def get(name: str) -> Filesystem:
    """The description of filesystem ``name``; ValueError for names fsmatrix does not know."""
    if name not in FILESYSTEMS:
        raise ValueError(f"unknown filesystem {name!r}; known: {', '.join(FILESYSTEMS)}")
    return declare.member(f"{__name__}.{name}", "FILESYSTEM", Filesystem, name)
