"""Prepare a cell's storage: check, mkfs, mount, read back what the kernel made of it, clean up."""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fsmatrix.agent import declare, proc
from fsmatrix.agent.declare import parse_size
from fsmatrix.agent.storage import devices as _devices
from fsmatrix.agent.storage import filesystems, stripe
from fsmatrix.agent.storage._cleanup import close_uninterrupted
from fsmatrix.agent.storage.devices import check_safe_to_format, describe_device, kernel_name
from fsmatrix.agent.storage.settings import Storage
from fsmatrix.agent.storage.settings import required_devices as devices_for

log = logging.getLogger("fsmatrix.storage")

FILESYSTEMS = filesystems.FILESYSTEMS
MKFS_TIMEOUT = 1800  # zeroing inode tables of a large slow disk takes a while
UMOUNT_ATTEMPTS = 5


class Skipped(Exception):
    """This cell cannot run here (kernel lacks the filesystem, a tool is missing): str() says why."""


class StorageError(RuntimeError):
    """Storage could not be set up or torn down cleanly (e.g. a mount point stays busy)."""


# --------------------------------------------------------------------------------------------
# small pure helpers


class CellStorage(Protocol):
    """What prepare reads of a cell: a ``Cell`` (``agent/cell.py``, which sits above storage: its
    storage block is declared here) or a ``StorageSpec``."""

    @property
    def filesystem(self) -> str: ...

    @property
    def mkfs_options(self) -> str: ...

    @property
    def mount_options(self) -> str: ...

    @property
    def storage(self) -> Storage: ...


@dataclass(frozen=True)
class StorageSpec:
    """What prepare needs of a cell: the filesystem, its options and the storage block, typed."""

    filesystem: str
    mkfs_options: str
    mount_options: str
    storage: Storage

    @classmethod
    def of(cls, cell: CellStorage) -> StorageSpec:
        """What prepare needs of a parsed cell."""
        if isinstance(cell, StorageSpec):
            return cell
        return cls(cell.filesystem, cell.mkfs_options, cell.mount_options, cell.storage)

    @classmethod
    def from_dict(cls, cell: Mapping[str, Any]) -> StorageSpec:
        """From a cell's JSON form, storage alone (its storage block checked and defaulted here):
        what storage is set up from outside a matrix (tests, the interactive session)."""
        name = cell["filesystem"]
        if name not in FILESYSTEMS:
            raise ValueError(f"unknown filesystem {name!r}; known: {', '.join(FILESYSTEMS)}")
        values = dict(cell.get("storage") or {})
        # Storage alone may put a journal on any filesystem that mounts (tmpfs too); a matrix offers
        # only those with a device (Storage's choices), where a journal means something.
        journal = values.pop("journal_filesystem", None)
        storage = declare.parse(Storage, values, "storage")
        if journal is not None:
            if journal not in FILESYSTEMS or not filesystems.get(journal).mounts:
                raise ValueError(f"storage.journal_filesystem {journal!r} is not a filesystem that mounts")
            storage = dataclasses.replace(storage, journal_filesystem=journal)
        return cls(name, str(cell.get("mkfs_options") or ""), str(cell.get("mount_options") or ""), storage)


def stripe_geometry(storage: Storage) -> tuple[int, int]:
    """(disks, stripe size in bytes) of a striped layout: storage.stripe_disks and stripe_size."""
    return storage.stripe_disks, stripe.stripe_bytes(parse_size(storage.stripe_size))


def required_devices(cell: CellStorage) -> int:
    """Block devices a cell needs: tmpfs none; md-raid0 / lvm-stripe storage.stripe_disks;
    single one (raw included); split-journal two (one when the journal is on tmpfs)."""
    spec = StorageSpec.of(cell)
    if spec.storage.striped:
        return stripe_geometry(spec.storage)[0]
    return devices_for(spec.filesystem, spec.storage)


def parse_proc_filesystems(text: str) -> set[str]:
    """Filesystem types the running kernel has registered (/proc/filesystems: "[nodev]\\tname")."""
    return {line.split()[-1] for line in text.splitlines() if line.strip()}


def _kernel_filesystems() -> set[str]:
    return parse_proc_filesystems((_devices.PROC_ROOT / "filesystems").read_text())


def filesystem_availability(name: str) -> str | None:
    """None when filesystem ``name`` can be made and mounted here, else the reason it cannot.

    Checks /proc/filesystems, tries ``modprobe`` when the kernel lacks it, then the tools.
    """
    fs = filesystems.get(name)
    if name not in _kernel_filesystems():
        if not proc.have("modprobe"):
            tried = "modprobe is not available"
        else:
            # The module alias "fs-<type>" finds whichever module registers the type.
            modules = [m for m in (fs.kernel_module, f"fs-{name}") if m]
            for module in modules:
                proc.run(["modprobe", "-q", module], timeout=60, check=False)
            tried = f"modprobe {' / '.join(modules)} did not add it"
        if name not in _kernel_filesystems():
            return (
                f"the running kernel ({os.uname().release}) does not support {name}: not in /proc/filesystems, {tried}"
            )
    missing = [tool for tool in fs.tools if not proc.have(tool)]
    if missing:
        return f"{', '.join(missing)} not found" + (f" (install {fs.package})" if fs.package else "")
    return None


def _split_options(options: str | None) -> list[str]:
    return [o.strip() for o in (options or "").split(",") if o.strip()]


# --------------------------------------------------------------------------------------------
# mkfs, mount, unmount


def format_device(
    filesystem: str, device: str, mkfs_options: str = "", expected: _devices.BlockDevice | None = None
) -> dict[str, Any]:
    """mkfs ``device`` with the filesystem's defaults plus ``mkfs_options``; read its geometry back.

    Under a flock on the device: check_safe_to_format (the path must still name ``expected``, the
    device an earlier check resolved), then an exclusive open just before mkfs. Returns the
    readback fields of the mkfs step: filesystem, device, mkfs_command, mkfs_version, geometry.
    """
    resolved = _devices.resolve(device)
    with _devices.locked(expected or resolved):
        checked = check_safe_to_format(device, expected or resolved)
        fs = filesystems.get(filesystem)
        command = fs.mkfs_command(device, shlex.split(mkfs_options or ""))
        log.info("mkfs: %s", shlex.join(command))
        _devices.verify_exclusive(checked)
        proc.run(command, timeout=MKFS_TIMEOUT, input="")  # input="": a question gets EOF, not a hang
    return {
        "filesystem": filesystem,
        "device": device,
        "mkfs_command": command,
        "mkfs_version": fs.mkfs_version(),
        "geometry": fs.read_geometry(device, None),
    }


def _mount_entry(mount_point: Path) -> _devices.MountEntry | None:
    found = [m for m in _devices.read_mounts() if m.mount_point == str(mount_point)]
    return found[-1] if found else None  # the last one is on top


def processes_using(path: Path) -> list[str]:
    """ "pid N (command)" of every process with a file, cwd, root or mapping under ``path``."""
    prefix = str(path).rstrip("/") + "/"

    def under(target: str) -> bool:
        return target == str(path) or target.startswith(prefix)

    root = _devices.PROC_ROOT
    users = []
    for pid in proc.pids(root):
        targets = proc.links(pid, ("cwd", "root", "exe"), proc_root=root) + proc.mapped(pid, root)
        if any(under(t.removesuffix(" (deleted)")) for t in targets):
            users.append(f"pid {pid} ({proc.command(pid, root)})")
    return users


def unmount(mount_point: Path) -> None:
    """Unmount ``mount_point`` (retrying briefly); if it stays busy, raise StorageError naming
    the processes that hold it."""
    error = ""
    for attempt in range(UMOUNT_ATTEMPTS):
        if _mount_entry(mount_point) is None:
            return
        done = proc.run(["umount", str(mount_point)], timeout=600, check=False)
        if done.returncode == 0 and _mount_entry(mount_point) is None:
            return
        error = (done.stdout + done.stderr).strip()
        time.sleep(0.2 * (attempt + 1))
    users = processes_using(mount_point)
    held = (
        f"in use by {', '.join(users)}"
        if users
        else "no process here holds it (a kernel user or another mount namespace?)"
    )
    raise StorageError(f"cannot unmount {mount_point}: {error or 'still mounted'}; {held}")


def _make_dir(path: Path, stack: ExitStack) -> None:
    """Create ``path`` (and missing parents), removing on exit only what was created here."""
    if path.exists():
        if not path.is_dir():
            raise StorageError(f"{path} exists and is not a directory")
        return
    missing = [path, *(p for p in path.parents if not p.exists())]
    for directory in reversed(missing):
        directory.mkdir()
        stack.callback(_remove_mount_dir, directory)


def _remove_mount_dir(path: Path) -> None:
    try:
        path.rmdir()  # only ever an empty directory: never delete what might be data
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno == errno.ENOTEMPTY:
            # A parent made here that other files now share (the job's scratch space): keep it, quietly.
            log.info("keeping %s: not empty", path)
        else:
            log.warning("leaving %s in place: %s", path, exc)


def _mount(fstype: str, source: str, mount_point: Path, options: list[str], stack: ExitStack) -> None:
    if _mount_entry(mount_point) is not None:
        raise StorageError(f"{mount_point} is already a mount point")
    if any(mount_point.iterdir()):
        raise StorageError(f"mount point {mount_point} is not empty")
    # Registered before mounting: if mount is interrupted after the kernel mounted, still unmount.
    stack.callback(unmount, mount_point)
    command = ["mount", "-t", fstype, *(["-o", ",".join(options)] if options else []), source, str(mount_point)]
    log.info("mount: %s", shlex.join(command))
    proc.run(command, timeout=300)


@dataclass(frozen=True)
class PlannedFilesystem:
    """One filesystem of a cell's storage as ``prepare`` makes it: its role (data, journal), the
    filesystem, its mkfs and mount options, and the size of a filesystem without a device (tmpfs)."""

    role: str
    filesystem: str
    mkfs_options: str
    mount_options: str
    tmpfs_size: int | None


def _set_up(
    planned: PlannedFilesystem,
    device: str | None,
    checked: _devices.BlockDevice | None,
    mount_root: Path,
    stack: ExitStack,
    reuse: bool = False,
) -> dict[str, Any]:
    """mkfs (when the filesystem has a device; not when ``reuse``) and mount one filesystem on
    ``mount_root``/its role; return its readback, with the seconds the mount took (``mount_s``: a
    journal replay after a crash)."""
    mount_point = mount_root / planned.role
    fs_name = planned.filesystem
    fs = filesystems.get(fs_name)
    _make_dir(mount_point, stack)
    options = [*fs.mount_options]
    made: dict[str, Any]
    if device is not None and reuse:
        made = {"filesystem": fs_name, "device": device, "mkfs_command": [], "mkfs_version": None, "reused": True}
        source = device
    elif device is not None:
        made = format_device(fs_name, device, planned.mkfs_options, checked)
        source = device
    else:
        made = {"filesystem": fs_name, "device": None, "mkfs_command": [], "mkfs_version": None}
        source = f"fsmatrix-{fs_name}"  # tmpfs has no device; the name marks the mount as ours
        if planned.tmpfs_size is not None:
            options.append(f"size={planned.tmpfs_size}")
    options += _split_options(planned.mount_options)
    t0 = time.monotonic()
    _mount(fs_name, source, mount_point, options, stack)
    mount_s = round(time.monotonic() - t0, 3)
    entry = _mount_entry(mount_point)
    if entry is None:
        raise StorageError(f"mount reported success but {mount_point} is not in mountinfo")
    if "geometry" not in made:
        made["geometry"] = fs.read_geometry(made["device"], mount_point)
    return {
        **made,
        "mount_point": str(mount_point),
        "mount_s": mount_s,
        "mount_options_requested": ",".join(options),
        "mountinfo": {
            "mount_options": entry.mount_options,
            "super_options": entry.super_options,
            "fstype": entry.fstype,
            "source": entry.source,
            "major_minor": entry.major_minor,
        },
    }


# --------------------------------------------------------------------------------------------
# the whole thing


@dataclass
class PreparedStorage:
    data: Path  # mount point of the filesystem under test (raw: an empty directory, nothing mounted)
    journal: Path  # == data for layout single; mount point of the journal filesystem for split-journal
    # {"data": {...}, "journal": {...}?, "stripe": {...}?}: what mkfs, mdadm/LVM and the kernel made
    readback: dict[str, Any]
    devices: list[dict[str, Any]]  # describe_device() of each disk used (the components of a stripe)
    # Kernel names to sample in /proc/diskstats, the data device first: for a stripe the md / dm
    # device the filesystem (or raw workload) sees, not its components.
    diskstat_names: list[str]
    data_device: str | None = None  # the block device holding the data (single disk, md array, LV)
    bare_device: bool = False  # no filesystem (raw): the workload uses data_device itself
    component_diskstat_names: list[str] = field(default_factory=list)  # a stripe's disks


@contextmanager
def prepare(
    cell: CellStorage,
    devices: Sequence[str],
    mount_root: Path,
    *,
    reuse: bool = False,
    wrap_data: Callable[[str, ExitStack], str] | None = None,
) -> Iterator[PreparedStorage]:
    """mkfs and mount the cell's storage under ``mount_root``/data (and /journal); undo it on exit.

    Before touching anything: every device is checked (UnsafeDevice) and the filesystems and the
    layout (md, device-mapper) must be usable here (Skipped). Striped layouts first assemble an
    md RAID 0 array or a striped LVM volume over the devices and put the filesystem on that;
    filesystem "raw" skips mkfs and mount (PreparedStorage.data_device is what the workload uses).
    On exit, whatever happened (KeyboardInterrupt included), the filesystems are unmounted, the
    array / volume group torn down and the directories created here removed, in reverse order.

    ``reuse``: mount the filesystems the devices already hold, do NOT mkfs them (the recover phase
    of a crash cell, ``job.run_recovery``: the crashed filesystem as the disk kept it). The same
    checks run first; striped layouts and filesystems without a device (tmpfs) cannot be reused.

    ``wrap_data``: called with the data device and the teardown stack before mkfs; returns the
    device to make the filesystem on instead (``crash.mode: flush-points`` puts a dm-log-writes
    target there), registering its own removal on the stack (it runs after the unmount).
    """
    spec = StorageSpec.of(cell)
    storage = spec.storage
    used, resolved = _devices_to_use(spec, devices, reuse)
    locks, stripe_size = _locked_and_checked(spec, resolved)
    mount_root = Path(os.path.realpath(mount_root))  # mountinfo shows resolved paths
    stack = ExitStack()
    try:
        checked = {device.path: device for device in resolved}
        _make_dir(mount_root, stack)
        readback: dict[str, Any] = {}
        components: list[str] = []
        if storage.striped:
            components = used
            for device in resolved:
                _devices.verify_exclusive(device)
            locks.close()
            assembled = stripe.assemble(storage.layout, components, stripe_size, stack)
            readback["stripe"] = {**assembled.readback, "device_info": describe_device(assembled.device)}
            remaining = iter([assembled.device])
        else:
            remaining = iter(used)
        used_by_role: list[str] = []  # the devices the filesystems (or the raw workload) sit on
        data_device: str | None = None
        for planned in _planned(spec):
            role_device = next(remaining) if filesystems.get(planned.filesystem).device else None
            if planned.role == "data" and role_device is not None and wrap_data is not None:
                role_device = wrap_data(role_device, stack)
            if role_device is not None:
                used_by_role.append(role_device)
            if planned.role == "data":
                data_device = role_device
            if filesystems.get(planned.filesystem).mounts:
                readback[planned.role] = _set_up(
                    planned, role_device, checked.get(role_device or ""), mount_root, stack, reuse
                )
            else:
                assert role_device is not None
                readback[planned.role] = _bare(planned.filesystem, role_device, checked)
        locks.close()  # mkfs is done: from here on the mounts (or the raw workload) hold the devices
        # No filesystem (raw): nothing is mounted; the workload gets the empty mount root as its directory.
        bare = not filesystems.get(spec.filesystem).mounts
        data = mount_root if bare else mount_root / "data"
        yield PreparedStorage(
            data=data,
            journal=mount_root / "journal" if storage.journal_on_own_filesystem is not None else data,
            readback=readback,
            devices=[describe_device(d) for d in (components or used_by_role)],
            diskstat_names=[kernel_name(d) for d in used_by_role],
            data_device=data_device,
            bare_device=bare,
            component_diskstat_names=[kernel_name(d) for d in components],
        )
    finally:
        locks.close()
        close_uninterrupted(stack)


def _devices_to_use(
    spec: StorageSpec, devices: Sequence[str], reuse: bool
) -> tuple[list[str], list[_devices.BlockDevice]]:
    """The devices the cell's storage takes (the first it needs), resolved; ValueError for storage
    that cannot be made (or, ``reuse``, reused) or devices that do not do for it."""
    storage = spec.storage
    data_fs = spec.filesystem
    journal_fs = storage.journal_on_own_filesystem
    if not filesystems.get(data_fs).mounts and journal_fs is not None:
        raise ValueError(f"filesystem {data_fs} cannot be combined with layout split-journal")
    if reuse:
        kept = [n for n in (data_fs, journal_fs) if n and not filesystems.get(n).device]
        if storage.striped or kept:
            what = f"layout {storage.layout}" if storage.striped else f"filesystem {kept[0]} (no device keeps it)"
            raise ValueError(f"cannot reuse the existing filesystem of {what}")
    needed = required_devices(spec)
    if len(devices) < needed:
        raise ValueError(f"this cell needs {needed} block device(s), got {len(devices)}")
    used = list(devices[:needed])
    resolved = [_devices.resolve(d) for d in used]
    if len({d.rdev for d in resolved}) != len(used):
        raise ValueError(f"the same device was given twice: {used}")
    return used, resolved


def _locked_and_checked(spec: StorageSpec, resolved: list[_devices.BlockDevice]) -> tuple[ExitStack, int]:
    """Each device locked and checked safe to format (UnsafeDevice), and the filesystems and the
    layout usable here (Skipped): the locks (the caller closes them) and the stripe size (0 when
    not striped).

    Each device is locked from its first check through mkfs (or, striped, until mdadm / pvcreate,
    which open the components exclusively themselves: holding a lock there would only make udev
    postpone their events), and compared by device number at every step."""
    storage = spec.storage
    stripe_size = 0
    locks = ExitStack()
    try:
        for device in resolved:
            locks.enter_context(_devices.locked(device))
            check_safe_to_format(device.path, device)
        names = (spec.filesystem, storage.journal_on_own_filesystem)
        for name in dict.fromkeys(n for n in names if n and filesystems.get(n).mounts):
            reason = filesystem_availability(name)
            if reason:
                raise Skipped(f"{name}: {reason}")
        if storage.striped:
            stripe_size = stripe_geometry(storage)[1]
            reason = stripe.availability(storage.layout)
            if reason:
                raise Skipped(f"{storage.layout}: {reason}")
    except BaseException:
        locks.close()
        raise
    return locks, stripe_size


def _planned(spec: StorageSpec) -> list[PlannedFilesystem]:
    """The cell's filesystems: data's, and the journal's when it has one of its own."""
    tmpfs_size = parse_size(spec.storage.disk_size)  # a filesystem without a device is sized by disk_size
    planned = [PlannedFilesystem("data", spec.filesystem, spec.mkfs_options, spec.mount_options, tmpfs_size)]
    journal_fs = spec.storage.journal_on_own_filesystem
    if journal_fs is not None:
        planned.append(PlannedFilesystem("journal", journal_fs, "", spec.storage.journal_mount_options, tmpfs_size))
    return planned


def _bare(fs_name: str, device: str, checked: dict[str, _devices.BlockDevice]) -> dict[str, Any]:
    """The readback of a filesystem that is not made (raw): the device, checked still unused."""
    _devices.verify_exclusive(checked.get(device) or _devices.resolve(device))
    return {"filesystem": fs_name, "device": device, "size_bytes": describe_device(device)["size_bytes"]}
