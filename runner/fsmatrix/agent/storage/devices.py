"""Block devices: what a device is (describe_device) and whether it is safe to format.

fsmatrix runs mkfs as root, so ``check_safe_to_format`` errs on the side of refusing. It only
reads (sysfs, /proc, a read-only exclusive open, ``pvs``); nothing changes when it refuses.
Devices are compared by major:minor, never by path strings, so /dev/disk/by-id links, device
mapper aliases and bind mounts cannot hide a mounted device.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import proc

# Tests point these at fabricated trees to exercise md/dm holders on kernels without md/dm.
SYS_ROOT = Path("/sys")
PROC_ROOT = Path("/proc")


class UnsafeDevice(Exception):
    """Refusing to format a device; the message names the device and every reason found."""


# --------------------------------------------------------------------------------------------
# /proc parsers


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/<pid>/mountinfo."""

    mount_id: int
    parent_id: int
    major_minor: str
    root: str
    mount_point: str
    mount_options: list[str]
    optional_fields: list[str]
    fstype: str
    source: str
    super_options: list[str]


def _unescape(field: str) -> str:
    # The kernel writes space, tab, newline and backslash in paths as \040, \011, \012, \134.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Parse /proc/<pid>/mountinfo (see proc(5)): fields, optional fields, ``-``, fs fields."""
    entries = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        entries.append(
            MountEntry(
                mount_id=int(fields[0]),
                parent_id=int(fields[1]),
                major_minor=fields[2],
                root=_unescape(fields[3]),
                mount_point=_unescape(fields[4]),
                mount_options=fields[5].split(","),
                optional_fields=fields[6:dash],
                fstype=fields[dash + 1],
                source=_unescape(fields[dash + 2]),
                super_options=fields[dash + 3].split(",") if len(fields) > dash + 3 else [],
            )
        )
    return entries


def read_mounts(pid: str = "self") -> list[MountEntry]:
    """The mount table of a process's mount namespace; [] if it cannot be read."""
    try:
        return parse_mountinfo((PROC_ROOT / pid / "mountinfo").read_text())
    except OSError:
        return []


def parse_swaps(text: str) -> list[str]:
    """Paths of the active swap areas listed in /proc/swaps."""
    lines = text.splitlines()
    return [_unescape(line.split()[0]) for line in lines[1:] if line.strip()]


# --------------------------------------------------------------------------------------------
# sysfs navigation: everything by kernel name ("loop3", "vda1", "dm-0", "md127")


def _block_dir(name: str) -> Path:
    return SYS_ROOT / "class" / "block" / name


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _entries(path: Path) -> list[str]:
    try:
        return sorted(p.name for p in path.iterdir())
    except OSError:
        return []


def _rdev(path: str) -> int | None:
    """The device number of a block special file, None when ``path`` is not one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_rdev if stat.S_ISBLK(st.st_mode) else None


def _majmin(rdev: int) -> str:
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def name_of(major_minor: str) -> str | None:
    """Kernel name of the block device with this major:minor (via /sys/dev/block)."""
    link = SYS_ROOT / "dev" / "block" / major_minor
    try:
        return Path(os.readlink(link)).name
    except OSError:
        return None


def kernel_name(device: str) -> str:
    """Kernel name ("loop3", "vdb", "dm-0") of a device path such as /dev/disk/by-id/virtio-x."""
    rdev = _rdev(device)
    if rdev is None:
        raise ValueError(f"{device} is not a block device")
    name = name_of(_majmin(rdev))
    if name is None:
        raise ValueError(f"{device}: no /sys/dev/block/{_majmin(rdev)} entry")
    return name


def partitions(name: str) -> list[str]:
    return [child for child in _entries(_block_dir(name)) if (_block_dir(name) / child / "partition").exists()]


def holders(name: str) -> list[str]:
    return _entries(_block_dir(name) / "holders")


def slaves(name: str) -> list[str]:
    return _entries(_block_dir(name) / "slaves")


def parent_disk(name: str) -> str | None:
    """The whole disk a partition belongs to; None for a whole disk."""
    if not (_block_dir(name) / "partition").exists():
        return None
    try:
        return _block_dir(name).resolve().parent.name
    except OSError:
        return None


def _devt(name: str) -> str | None:
    return _read(_block_dir(name) / "dev")


def _stacked_above(name: str) -> list[str]:
    """``name``, its partitions and everything built on them (dm, md), transitively."""
    seen: list[str] = []
    todo = [name]
    while todo:
        current = todo.pop(0)
        if current in seen:
            continue
        seen.append(current)
        todo.extend(partitions(current))
        todo.extend(holders(current))
    return seen


def _stacked_below(names: Iterable[str]) -> set[str]:
    """The given devices and everything they are built from: slaves (dm, md) and parent disks."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        todo.extend(slaves(current))
        parent = parent_disk(current)
        if parent:
            todo.append(parent)
    return seen


def _btrfs_members() -> dict[str, str]:
    """Kernel name -> fsid for every device of every mounted btrfs (sysfs lists only mounted ones)."""
    members: dict[str, str] = {}
    for fsid in _entries(SYS_ROOT / "fs" / "btrfs"):
        for device in _entries(SYS_ROOT / "fs" / "btrfs" / fsid / "devices"):
            members[device] = fsid
    return members


def _names_of_mount(entry: MountEntry) -> set[str]:
    """Kernel names of the block devices behind a mount, as far as they can be known."""
    names: set[str] = set()
    by_number = name_of(entry.major_minor)
    if by_number and not entry.major_minor.startswith("0:"):
        names.add(by_number)
    # btrfs (and other multi-device filesystems) report an anonymous 0:N device number.
    rdev = _rdev(entry.source) if entry.source.startswith("/") else None
    if rdev is not None:
        source_name = name_of(_majmin(rdev))
        if source_name:
            names.add(source_name)
    if entry.fstype == "btrfs" and names:
        members = _btrfs_members()
        fsids = {members[n] for n in names if n in members}
        names |= {n for n, fsid in members.items() if fsid in fsids}
    return names


def _root_devices() -> set[str]:
    """Kernel names of the device(s) holding the root filesystem of this mount namespace."""
    roots = [entry for entry in read_mounts() if entry.mount_point == "/"]
    return _names_of_mount(roots[-1]) if roots else set()


def _describe_holder(name: str) -> str:
    if name.startswith("md"):
        return f"the md array {name}"
    dm_name = _read(_block_dir(name) / "dm" / "name")
    if dm_name is not None:
        uuid = _read(_block_dir(name) / "dm" / "uuid") or ""
        if uuid.startswith("LVM-"):
            kind = "LVM logical volume"
        elif uuid.startswith("CRYPT-"):
            kind = "dm-crypt mapping"
        else:
            kind = "device-mapper device"
        return f"the {kind} {dm_name} ({name})"
    return name


# --------------------------------------------------------------------------------------------
# the checks and the description


def _lvm_volume_group(device: str) -> str | None:
    """Volume group a device is an LVM physical volume of (active or not); None if none or no LVM."""
    if not proc.have("pvs"):
        return None
    env = dict(os.environ, LVM_SUPPRESS_FD_WARNINGS="1")
    done = proc.run(["pvs", "--readonly", "--noheadings", "-o", "vg_name", device], timeout=60, env=env, check=False)
    if done.returncode != 0:  # not a physical volume
        return None
    return done.stdout.strip() or None


def _exclusive_open_busy(path: str) -> bool:
    """Whether the kernel refuses an exclusive open: the catch-all for any in-kernel user
    (mounts in other mount namespaces, swap, md, dm, a running mkfs). Read-only: changes nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC)
    except OSError as exc:
        return exc.errno == errno.EBUSY
    os.close(fd)
    return False


def check_safe_to_format(device: str) -> None:
    """Raise UnsafeDevice unless ``device`` is a block device nothing uses.

    Refuses: not a block device; mounted (here or in PID 1's mount namespace) or with a mounted
    partition or holder; holding the root filesystem or being the disk it lives on (through
    partitions, dm or md); active swap, itself or a partition; member of an md array or of
    device-mapper (LVM, dm-crypt) through holders; an LVM physical volume of a volume group;
    busy by the kernel's own account (exclusive open fails).
    """
    if not os.path.exists(device):
        raise UnsafeDevice(f"refusing to format {device}: it does not exist")
    rdev = _rdev(device)
    if rdev is None:
        raise UnsafeDevice(f"refusing to format {device}: it is not a block device")
    name = name_of(_majmin(rdev))
    if name is None:
        raise UnsafeDevice(f"refusing to format {device}: the kernel does not list {_majmin(rdev)} in sysfs")
    family = _stacked_above(name)  # the device, its partitions, their holders

    def whose(member: str) -> str:
        if member == name:
            return "it"
        return f"its partition {member}" if member in partitions(name) else f"its holder {member}"

    reasons: list[str] = []

    root_devices = _root_devices()
    root_hit = [m for m in family if m in root_devices]
    if root_hit:
        reasons.append(f"{whose(root_hit[0])} holds the root filesystem")
    else:
        beneath_root = _stacked_below(root_devices)
        if name in beneath_root:
            reasons.append(f"the root filesystem lives on it (on {', '.join(sorted(root_devices))})")

    for member in [name, *partitions(name)]:
        reasons.extend(f"{whose(member)} is used by {_describe_holder(h)}" for h in holders(member))

    by_number = {number: member for member in family if (number := _devt(member))}
    mounts = read_mounts()
    try:
        if os.readlink(PROC_ROOT / "1" / "ns" / "mnt") != os.readlink(PROC_ROOT / "self" / "ns" / "mnt"):
            mounts += read_mounts("1")
    except OSError:
        pass
    seen_points: set[str] = set()
    for entry in mounts:
        hit = by_number.get(entry.major_minor)
        if hit is None:
            hit = next((m for m in sorted(_names_of_mount(entry)) if m in family), None)
        if hit is not None and entry.mount_point not in seen_points:
            seen_points.add(entry.mount_point)
            reasons.append(f"{whose(hit)} is mounted at {entry.mount_point} ({entry.fstype})")

    swaps_text = _read(PROC_ROOT / "swaps") or ""
    for swap in parse_swaps(swaps_text):
        swap_rdev = _rdev(swap)
        if swap_rdev is not None and _majmin(swap_rdev) in by_number:
            reasons.append(f"{whose(by_number[_majmin(swap_rdev)])} is active swap ({swap})")

    for member in [name, *partitions(name)]:
        path = device if member == name else f"/dev/{member}"
        group = _lvm_volume_group(path) if os.path.exists(path) else None
        if group:
            reasons.append(f"{whose(member)} is an LVM physical volume of volume group {group}")

    if not reasons:
        for member in [name, *partitions(name)]:
            path = device if member == name else f"/dev/{member}"
            if os.path.exists(path) and _exclusive_open_busy(path):
                reasons.append(
                    f"the kernel reports {whose(member)} busy (exclusive open failed): in use by a mount "
                    "in another mount namespace, swap, md, device-mapper or another mkfs"
                )
                break  # a busy disk makes its partitions look busy too
    if reasons:
        label = device if device.endswith(name) else f"{device} ({name})"
        raise UnsafeDevice(f"refusing to format {label}: " + "; ".join(dict.fromkeys(reasons)))


def describe_device(device: str) -> dict[str, Any]:
    """What a block device is, from sysfs: enough to tell later what a result was measured on."""
    name = kernel_name(device)
    block = _block_dir(name)
    disk = parent_disk(name) or name  # queue settings and model live on the whole disk
    queue = _block_dir(disk) / "queue"
    sectors = _read(block / "size")
    scheduler = _read(queue / "scheduler")
    chosen = re.search(r"\[(\S+)\]", scheduler or "")
    rotational = _read(queue / "rotational")
    logical = _read(queue / "logical_block_size")
    physical = _read(queue / "physical_block_size")
    dio = _read(block / "loop" / "dio")
    return {
        "path": device,
        "resolved_path": os.path.realpath(device),
        "kernel_name": name,
        "major_minor": _devt(name),
        "parent": parent_disk(name),
        "size_bytes": int(sectors) * 512 if sectors is not None else None,  # sysfs counts 512-byte units
        "model": _read(_block_dir(disk) / "device" / "model"),
        "serial": _read(_block_dir(disk) / "serial") or _read(_block_dir(disk) / "device" / "serial"),
        "dm_name": _read(block / "dm" / "name"),
        "rotational": rotational == "1" if rotational is not None else None,
        "scheduler": chosen.group(1) if chosen else scheduler,
        "logical_block_size": int(logical) if logical else None,
        "physical_block_size": int(physical) if physical else None,
        "backing_file": _read(block / "loop" / "backing_file"),
        "direct_io": dio == "1" if dio is not None else None,
    }
