"""Block devices: what a device is (describe_device) and whether it is safe to format.

fsmatrix runs mkfs as root, so ``check_safe_to_format`` errs on the side of refusing. It only
reads (sysfs, /proc, loop ioctls, ``blkid -p``, ``pvs``, a read-only exclusive open); nothing
changes when it refuses. A device is resolved once to its device number (``BlockDevice``) and compared
by number at every later step, so /dev/disk/by-id links, device mapper aliases, bind mounts or a
path re-pointed between the check and mkfs cannot hide a device in use. ``locked`` (BSD flock)
spans check to mkfs, ``verify_exclusive`` is the last look before mkfs, ``held_exclusive`` keeps a
VM's passthrough disk claimed while it runs.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import struct
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import proc

# Tests point these at fabricated trees to exercise md/dm holders on kernels without md/dm.
SYS_ROOT = Path("/sys")
PROC_ROOT = Path("/proc")
PROC_PID_INIT_INO = 0xEFFFFFFC  # the inode of the host's (initial) pid namespace, fixed in the kernel


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


def _names_of_st_dev(st_dev: int, mounts: list[MountEntry]) -> set[str]:
    """Kernel names of the device(s) holding the filesystem whose st_dev is ``st_dev``: the number
    itself, or for an anonymous number (btrfs, overlay) the devices of the mounts showing it."""
    number = _majmin(st_dev)
    if os.major(st_dev) != 0:
        found = name_of(number)
        return {found} if found else set()
    names: set[str] = set()
    for entry in mounts:
        if entry.major_minor == number:
            names |= _names_of_mount(entry)
    return names


def _overlay_dirs(entry: MountEntry) -> list[str]:
    """lowerdir, upperdir and workdir of an overlay mount (lowerdir may list several, ':'-separated)."""
    dirs: list[str] = []
    for option in entry.super_options:
        key, _, value = option.partition("=")
        if key in ("lowerdir", "upperdir", "workdir") and value:
            # overlayfs escapes ':' and ',' inside a path with a backslash.
            dirs += [part.replace("\\:", ":").replace("\\,", ",") for part in re.split(r"(?<!\\):", value)]
    return dirs


def _root_devices() -> set[str]:
    """Kernel names of the device(s) holding the root filesystem, of this mount namespace and of
    PID 1's (a container's root and its host's). An overlay root (containers) counts the devices
    holding its lower, upper and work directories; a tmpfs root has none. Raises UnsafeDevice
    when an overlay root's directories cannot be found: then nothing can be called safe."""
    names: set[str] = set()
    tables = [("self", read_mounts())]
    if _other_mount_namespace():
        tables.append(("1", read_mounts("1")))
    for pid, mounts in tables:
        roots = [entry for entry in mounts if entry.mount_point == "/"]
        if not roots:
            continue
        root = roots[-1]  # the last one is on top
        names |= _names_of_mount(root)
        if root.fstype != "overlay":
            continue
        dirs = _overlay_dirs(root)
        found: set[str] = set()
        for directory in dirs:
            # The paths are the mounter's: try them here and through PID 1's root (a container's
            # overlay is mounted by the host's runtime, its paths are the host's).
            for candidate in (directory, str(PROC_ROOT / pid / "root") + directory):
                try:
                    found |= _names_of_st_dev(os.stat(candidate).st_dev, mounts)
                    break
                except OSError:
                    continue
        if not found:
            raise UnsafeDevice(
                "the root filesystem is an overlay whose directories "
                f"({', '.join(dirs) or 'none listed'}) cannot be found here, so the disk under it is unknown"
            )
        names |= found
    return names


def _other_mount_namespace() -> bool:
    try:
        return os.readlink(PROC_ROOT / "1" / "ns" / "mnt") != os.readlink(PROC_ROOT / "self" / "ns" / "mnt")
    except OSError:
        return False


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
# loop devices: what backs each one, by device number and inode (not by path)

LOOP_GET_STATUS64 = 0x4C05
_LOOP_INFO64 = struct.Struct("=QQQQQIIII64s64s32sQQ")  # struct loop_info64, <linux/loop.h>


@dataclass(frozen=True)
class LoopBacking:
    """What one attached loop device serves: its backing file's st_dev and inode, and its st_rdev
    when the backing file is itself a block device (0 for a regular file)."""

    name: str
    file: str  # as sysfs shows it (the attaching process's path; " (deleted)" once unlinked)
    st_dev: int
    inode: int
    rdev: int


def _loop_status(name: str) -> tuple[int, int, int] | None:
    """(lo_device, lo_inode, lo_rdevice) from LOOP_GET_STATUS64 on /dev/<name>, None if unreadable."""
    devt = _devt(name)
    path = f"/dev/{name}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if devt is None or _majmin(os.fstat(fd).st_rdev) != devt:
            return None  # /dev is not the kernel's view here (a container's own /dev)
        buffer = bytearray(_LOOP_INFO64.size)
        fcntl.ioctl(fd, LOOP_GET_STATUS64, buffer)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = _LOOP_INFO64.unpack(bytes(buffer))
    return fields[0], fields[1], fields[2]


def is_loop(name: str) -> bool:
    """Whether kernel device ``name`` is an attached loop device."""
    return name.startswith("loop") and (_block_dir(name) / "loop").is_dir()


def loop_backings() -> list[LoopBacking]:
    """Every attached loop device and what it serves (detached ones have no loop/ in sysfs)."""
    found = []
    for name in _entries(SYS_ROOT / "class" / "block"):
        if not name.startswith("loop"):
            continue
        file = _read(_block_dir(name) / "loop" / "backing_file")
        if file is None:
            continue
        status = _loop_status(name)
        if status is None:
            # No ioctl (fabricated sysfs, foreign /dev): fall back to the path, if it still resolves.
            try:
                st = os.stat(file.removesuffix(" (deleted)"))
            except OSError:
                found.append(LoopBacking(name, file, 0, 0, 0))
                continue
            status = (st.st_dev, st.st_ino, st.st_rdev if stat.S_ISBLK(st.st_mode) else 0)
        found.append(LoopBacking(name, file, *status))
    return found


# --------------------------------------------------------------------------------------------
# processes holding a device or a file open


def _openers(rdevs: set[int], files: set[tuple[int, int]]) -> list[tuple[str, str, int | tuple[int, int]]]:
    """(pid, command, what) of every other process with a file descriptor on one of the block
    devices ``rdevs`` or the files ``files`` ((st_dev, inode)). By device number: a path, a bind
    mount or a second device node cannot hide an opener. Our own process is left out."""
    me = os.getpid()
    found: list[tuple[str, str, int | tuple[int, int]]] = []
    for pid in proc.pids(PROC_ROOT):
        if pid == me:
            continue
        pid_dir = str(pid)
        fd_dir = PROC_ROOT / pid_dir / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # exited meanwhile
        for fd in fds:
            link = fd_dir / fd
            try:
                target = os.readlink(link)
                if not target.startswith("/"):
                    continue  # socket:[…], pipe:[…], anon_inode:…
                st = os.stat(link)
            except OSError:
                continue
            what: int | tuple[int, int] | None = None
            if stat.S_ISBLK(st.st_mode) and st.st_rdev in rdevs:
                what = st.st_rdev
            elif (st.st_dev, st.st_ino) in files:
                what = (st.st_dev, st.st_ino)
            if what is not None:
                command = _read(PROC_ROOT / pid_dir / "comm") or "?"
                found.append((pid_dir, command, what))
                break
    return found


# --------------------------------------------------------------------------------------------
# on-disk signatures of storage stacks (md, LVM, other RAID, LUKS), active or not

SIGNATURE_TOOL = "blkid"
SIGNATURE_USAGES = "raid,crypto"  # blkid's usage classes: md, LVM, ZFS, DDF/IMSM RAID members; LUKS


def _stack_signatures(path: str, who: str = "it") -> list[str]:
    """Reasons from the on-disk signatures of ``path``: an md superblock (of a stopped array too),
    an LVM physical volume label, other RAID members, a LUKS header. ``blkid -p`` reads the device
    itself (no cache, no running md/LVM needed). A missing blkid refuses rather than skips."""
    if not proc.have(SIGNATURE_TOOL):
        return [f"{SIGNATURE_TOOL} not found, so md/LVM signatures on {who} cannot be ruled out (install util-linux)"]
    done = proc.run(
        [SIGNATURE_TOOL, "-p", "--no-part-details", "-u", SIGNATURE_USAGES, "-o", "export", path],
        timeout=120,
        check=False,
    )
    values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    kind = values.get("TYPE")
    # 2: nothing found; 0 without TYPE: only a partition table or partition entry (PTTYPE, PART_ENTRY_*).
    if done.returncode == 2 or (done.returncode == 0 and not kind):
        return []
    if done.returncode == 0 and kind:
        what = {
            "linux_raid_member": "an md RAID member (md superblock)",
            "LVM2_member": "an LVM physical volume (LVM2 label)",
            "crypto_LUKS": "a LUKS encrypted volume",
        }.get(kind, f"a {kind} ({values.get('USAGE', 'raid')} signature)")
        return [f"{who} carries the signature of {what} (wipefs -a it yourself if it really is unused)"]
    said = (done.stdout + done.stderr).strip() or f"status {done.returncode}"
    # 8: several signatures at once (ambivalent); anything else: blkid could not read it.
    return [f"blkid -p could not rule out md/LVM/RAID signatures on {who} ({said})"]


# --------------------------------------------------------------------------------------------
# the device, resolved once; the lock; the checks


@dataclass(frozen=True)
class BlockDevice:
    """A block device as the kernel knows it: resolved once from the path the user gave, and
    compared by device number at every later step (a path can be re-pointed, a number cannot)."""

    path: str
    rdev: int
    name: str

    @property
    def major_minor(self) -> str:
        return _majmin(self.rdev)

    def label(self) -> str:
        return self.path if self.path.endswith(self.name) else f"{self.path} ({self.name})"


def resolve(device: str) -> BlockDevice:
    """The kernel's device behind ``device`` (a /dev path, a by-id link, a second node)."""
    if not os.path.exists(device):
        raise UnsafeDevice(f"refusing to format {device}: it does not exist")
    rdev = _rdev(device)
    if rdev is None:
        raise UnsafeDevice(f"refusing to format {device}: it is not a block device")
    name = name_of(_majmin(rdev))
    if name is None:
        raise UnsafeDevice(f"refusing to format {device}: the kernel does not list {_majmin(rdev)} in sysfs")
    return BlockDevice(device, rdev, name)


def _open_same(device: BlockDevice, flags: int) -> int:
    """Open ``device.path`` with ``flags`` and make sure it is still the same device number."""
    fd = os.open(device.path, flags | os.O_CLOEXEC)
    if os.fstat(fd).st_rdev != device.rdev:
        os.close(fd)
        raise UnsafeDevice(
            f"refusing to format {device.path}: it now names a different device than the {device.major_minor} "
            "it named when checked"
        )
    return fd


# Per process: device number -> (fd holding the flock, users). flock locks belong to an open file
# description, so a second flock from this same process on a new descriptor would refuse itself.
_LOCKS: dict[int, list[int]] = {}
# Devices this process holds open with O_EXCL (passthrough for a VM): the busy probe skips them.
_EXCLUSIVE: dict[int, list[int]] = {}


@contextmanager
def _held(table: dict[int, list[int]], device: BlockDevice, acquire: Callable[[], int]) -> Iterator[None]:
    """Keep the descriptor ``acquire()`` opens for ``device`` while the block runs, shared by nested
    blocks of this process (``table``: device number -> [fd, users]); the last one out closes it."""
    held = table.get(device.rdev)
    if held is not None:
        held[1] += 1
    else:
        held = table[device.rdev] = [acquire(), 1]
    try:
        yield
    finally:
        held[1] -= 1
        if held[1] == 0:
            del table[device.rdev]
            os.close(held[0])


@contextmanager
def locked(device: BlockDevice) -> Iterator[None]:
    """Hold a BSD flock (LOCK_EX) on ``device`` while the block runs: two fsmatrix runs (or a
    partitioning tool following the same convention, udev included) never work on one device at
    once. Re-entrant within this process. An O_EXCL open cannot be held instead: mkfs opens the
    device exclusively itself."""

    def acquire() -> int:
        fd = _open_same(device, os.O_RDONLY | os.O_NONBLOCK)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise UnsafeDevice(
                    f"refusing to format {device.label()}: another process holds a lock on it "
                    "(another fsmatrix run, or a partitioning tool)"
                ) from exc
            raise
        return fd

    with _held(_LOCKS, device, acquire):
        yield


@contextmanager
def held_exclusive(device: BlockDevice) -> Iterator[None]:
    """Hold ``device`` open with O_EXCL while the block runs (a VM's passthrough disk): the kernel
    then refuses any mount, mkfs, md or swap on it by anyone else. QEMU's own open (no O_EXCL)
    still succeeds. Re-entrant within this process."""

    def acquire() -> int:
        try:
            return _open_same(device, os.O_RDONLY | os.O_EXCL)
        except OSError as exc:
            raise UnsafeDevice(
                f"refusing to use {device.label()}: cannot open it exclusively ({exc.strerror})"
            ) from exc

    with _held(_EXCLUSIVE, device, acquire):
        yield


def verify_exclusive(device: BlockDevice) -> None:
    """The last check before mkfs (or mdadm/pvcreate): the path still names the checked device and
    the kernel grants an exclusive open (no mount, swap, md, dm or mkfs appeared since the checks)."""
    if device.rdev in _EXCLUSIVE:
        return  # we hold it exclusively ourselves: nobody else can have claimed it
    try:
        fd = _open_same(device, os.O_RDONLY | os.O_EXCL)
    except OSError as exc:
        raise UnsafeDevice(
            f"refusing to format {device.label()}: the exclusive open just before mkfs failed ({exc.strerror}): "
            "something claimed it after the checks"
        ) from exc
    os.close(fd)


def host_view_problems() -> list[str]:
    """Why this process cannot see every user of a device (empty when it can): in a pid namespace
    other than the host's (a container without --pid=host), other processes' open files and mount
    namespaces are invisible; without PID 1's mount table, so are the host's mounts. Callers that
    format a device the user named refuse when this is not empty."""
    problems = []
    try:
        if os.stat(PROC_ROOT / "self" / "ns" / "pid").st_ino != PROC_PID_INIT_INO:
            problems.append("this process runs in its own pid namespace (a container without --pid=host)")
    except OSError:
        problems.append(f"{PROC_ROOT}/self/ns/pid cannot be read")
    try:
        (PROC_ROOT / "1" / "mountinfo").read_text()
    except OSError:
        problems.append("PID 1's mount table cannot be read")
    return problems


def _lvm_volume_group(device: str) -> str | None:
    """Volume group a device is an LVM physical volume of (active or not); None if none or no LVM
    tools. Only names the group: blkid's signature check is what refuses a PV without them."""
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


def _family(name: str, loops: list[LoopBacking], exclude: set[str]) -> tuple[dict[str, str], list[str]]:
    """``name`` and everything built on it, transitively, each with how it relates to ``name``
    ("it", "its partition X", "its holder X", "the loop device loopN"): partitions, holders (dm,
    md) and loop devices backed by a member (the device itself, or a file on a filesystem on it),
    with a reason for each such loop device: loop devices appear in no holders/ directory and claim
    nothing exclusively, so nothing else would notice them."""
    family: dict[str, str] = {name: "it"}
    loop_reasons: list[str] = []
    todo = [name]
    while todo:
        current = todo.pop(0)
        devt = _devt(current)
        related = [(p, f"its partition {p}" if current == name else f"its holder {p}") for p in partitions(current)]
        related += [(h, f"its holder {h}") for h in holders(current)]
        for loop in loops:
            if devt is None or loop.name in exclude:
                continue
            if loop.rdev and _majmin(loop.rdev) == devt:
                related.append((loop.name, f"the loop device {loop.name}"))
                loop_reasons.append(f"the loop device {loop.name} is backed by {family[current]}")
            elif loop.st_dev and os.major(loop.st_dev) and _majmin(loop.st_dev) == devt:
                related.append((loop.name, f"the loop device {loop.name}"))
                loop_reasons.append(
                    f"the loop device {loop.name} is backed by {loop.file}, a file on {family[current]}"
                )
        for member, description in related:
            if member not in family and member not in exclude:
                family[member] = description
                todo.append(member)
    return family, loop_reasons


def _reasons(device: BlockDevice, loops: list[LoopBacking], exclude: set[str], depth: int = 0) -> list[str]:
    """Every reason not to format ``device``; see check_safe_to_format."""
    name = device.name
    family, reasons = _family(name, loops, exclude)

    reasons += _root_reasons(name, family)

    own = [name, *partitions(name)]
    for member in own:
        reasons.extend(f"{family[member]} is used by {_describe_holder(h)}" for h in holders(member))

    by_number = {number: member for member in family if (number := _devt(member))}
    mounts = read_mounts()
    if _other_mount_namespace():
        mounts += read_mounts("1")
    seen_points: set[str] = set()
    for entry in mounts:
        hit = by_number.get(entry.major_minor)
        if hit is None:
            hit = next((m for m in sorted(_names_of_mount(entry)) if m in family), None)
        if hit is not None and entry.mount_point not in seen_points:
            seen_points.add(entry.mount_point)
            reasons.append(f"{family[hit]} is mounted at {entry.mount_point} ({entry.fstype})")

    swap_files: dict[tuple[int, int], str] = {}
    for swap in parse_swaps(_read(PROC_ROOT / "swaps") or ""):
        try:
            st = os.stat(swap)
        except OSError:
            continue
        if stat.S_ISBLK(st.st_mode) and _majmin(st.st_rdev) in by_number:
            reasons.append(f"{family[by_number[_majmin(st.st_rdev)]]} is active swap ({swap})")
        elif stat.S_ISREG(st.st_mode):
            swap_files[(st.st_dev, st.st_ino)] = swap

    # The reverse direction: a loop device is only as unused as what backs it.
    me = next((loop for loop in loops if loop.name == name), None)
    backing_file: tuple[int, int] | None = None
    if me is not None and depth < 8:
        if me.rdev:
            backing_name = name_of(_majmin(me.rdev))
            if backing_name is not None:
                backing = BlockDevice(f"/dev/{backing_name}", me.rdev, backing_name)
                below = _reasons(backing, loops, {*exclude, name}, depth + 1)
                if not below and _exclusive_open_busy(backing.path):
                    below = ["the kernel reports it busy (exclusive open failed)"]
                reasons.extend(f"its backing device {backing_name}: {why}" for why in below)
        elif me.inode:
            backing_file = (me.st_dev, me.inode)
            twins = [o.name for o in loops if o.name != name and (o.st_dev, o.inode) == backing_file]
            reasons.extend(f"its backing file {me.file} also backs the loop device {t}" for t in twins)
            if backing_file in swap_files:
                reasons.append(f"its backing file {me.file} is active swap")

    rdevs = {os.makedev(*map(int, number.split(":"))) for number in by_number}
    for pid, command, what in _openers(rdevs, {backing_file} if backing_file else set()):
        if isinstance(what, tuple):
            reasons.append(f"its backing file {me.file if me else '?'} is open by pid {pid} ({command})")
        else:
            reasons.append(f"{family[by_number[_majmin(what)]]} is open by pid {pid} ({command})")

    reasons += _signature_reasons(device, own, family)
    return reasons


def _root_reasons(name: str, family: dict[str, str]) -> list[str]:
    """Whether ``name``'s family holds the root filesystem, or the root lives on ``name``."""
    reasons: list[str] = []
    try:
        root_devices = _root_devices()
    except UnsafeDevice:
        # An overlay root whose directories this mount namespace cannot see (a container without
        # the host's pid namespace): no disk can be told apart from the root's, so none is formatted
        # — except a loop device: a filesystem on one (the root, or an overlay's upper directory) keeps
        # it mounted, which the mount checks and the exclusive open below see from any namespace, and
        # its backing file is checked on its own (in ``_reasons``). That is what lets fsmatrix's own
        # loop files work inside a container while --device stays refused there.
        if not is_loop(name):
            raise
        root_devices = set()
    root_hit = [m for m in family if m in root_devices]
    if root_hit:
        reasons.append(f"{family[root_hit[0]]} holds the root filesystem")
    else:
        beneath_root = _stacked_below(root_devices)
        if name in beneath_root:
            reasons.append(f"the root filesystem lives on it (on {', '.join(sorted(root_devices))})")
    return reasons


def _signature_reasons(device: BlockDevice, own: list[str], family: dict[str, str]) -> list[str]:
    """The device and its partitions (``own``): an LVM physical volume, or a stack's signature on them."""
    name = device.name
    reasons: list[str] = []
    for member in own:
        path = device.path if member == name else f"/dev/{member}"
        if not os.path.exists(path):
            continue
        group = _lvm_volume_group(path)
        if group:
            reasons.append(f"{family[member]} is an LVM physical volume of volume group {group}")
        reasons.extend(_stack_signatures(path, family[member]))
    return reasons


def check_safe_to_format(device: str, expected: BlockDevice | None = None) -> BlockDevice:
    """Return the resolved BlockDevice, or raise UnsafeDevice unless ``device`` is a block device that
    nothing uses. ``expected``: the BlockDevice an earlier check resolved; the path must still name it.

    Refuses: not a block device; mounted (here or in PID 1's mount namespace), itself or anything
    built on it; holding the root filesystem or being the disk it lives on (through partitions,
    dm, md, loop devices, an overlay root's directories); active swap; a holder (md, dm); a loop
    device attached to it or to a file on it; open by another process (/proc/*/fd, by device
    number); an on-disk md, LVM, other RAID or LUKS signature (blkid -p; refused when blkid is
    missing); for a loop device, whatever makes its backing device unsafe, or a backing file that
    another loop device serves, that is swap or that a process holds open; locked by another
    process (flock); busy by the kernel's own account (exclusive open fails).
    """
    resolved = resolve(device)
    if expected is not None and resolved.rdev != expected.rdev:
        raise UnsafeDevice(
            f"refusing to format {device}: it now names {resolved.major_minor}, not the {expected.major_minor} "
            "it named when first checked"
        )
    name = resolved.name
    try:
        reasons = _reasons(resolved, loop_backings(), set())
    except UnsafeDevice as exc:
        reasons = [str(exc)]
    if not reasons and resolved.rdev not in _LOCKS and resolved.rdev not in _EXCLUSIVE:
        # Another fsmatrix run (or tool) holding the lock is working on it right now.
        try:
            with locked(resolved):
                pass
        except UnsafeDevice as exc:
            reasons.append(str(exc).split(": ", 1)[1])
    if not reasons and resolved.rdev not in _EXCLUSIVE:
        for member in [name, *partitions(name)]:
            path = device if member == name else f"/dev/{member}"
            if os.path.exists(path) and _exclusive_open_busy(path):
                who = "it" if member == name else f"its partition {member}"
                reasons.append(
                    f"the kernel reports {who} busy (exclusive open failed): in use by a mount in another "
                    "mount namespace, swap, md, device-mapper or another mkfs"
                )
                break  # a busy disk makes its partitions look busy too
    if reasons:
        raise UnsafeDevice(f"refusing to format {resolved.label()}: " + "; ".join(dict.fromkeys(reasons)))
    return resolved


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
