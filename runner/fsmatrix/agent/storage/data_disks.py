"""The guest's data disks, found by the serial the host gave them (``/dev/disk/by-id``), never by
a kernel name that could be another disk. Standard library only: this runs in the guest."""

from __future__ import annotations

import re
import stat
import time
from pathlib import Path

BY_ID = Path("/dev/disk/by-id")
JOB_SERIAL = "fsmatrix-job"  # the job disk's serial: never a data disk
DEVICE_WAIT_S = 30.0  # udev creates the by-id links shortly after boot

# QEMU passes at most 20 bytes of a virtio-blk (or NVMe) serial to the guest.
_SERIAL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,19}$")
# The by-id link udev (Debian 12, systemd 252) makes for a QEMU disk with serial S on each bus, as
# seen in the guest: virtio-S, scsi-0QEMU_QEMU_HARDDISK_S (scsi-hd's vendor, model and S), and
# nvme-QEMU_NVMe_Ctrl_S (model and S; the _1 and EUI links name the same namespace).
BY_ID_NAMES = {
    "virtio-blk": "virtio-{serial}",
    "virtio-scsi": "scsi-0QEMU_QEMU_HARDDISK_{serial}",
    "nvme": "nvme-QEMU_NVMe_Ctrl_{serial}",
}
# The kernel's name for a disk on each bus: a link leading anywhere else is refused.
_KERNEL_NAME = {"virtio-blk": re.compile(r"^vd[a-z]+$"), "virtio-scsi": re.compile(r"^sd[a-z]+$"),
                "nvme": re.compile(r"^nvme[0-9]+n1$")}  # fmt: skip


class DataDiskError(Exception):
    """A data disk serial that names no usable disk; str() says why."""


def resolve_data_disks(
    serials: list[str], by_id: Path = BY_ID, wait_s: float = DEVICE_WAIT_S, buses: list[str] | None = None
) -> list[str]:
    """The block devices behind the by-id links of ``serials`` on ``buses`` (default: all
    virtio-blk), in order; DataDiskError for anything else.

    A serial must be a plain name (no path), not the job disk's; its link is the one its bus gets
    (BY_ID_NAMES) and must lead to a block device with that bus's kernel name (vdX, sdX,
    nvmeNn1); each device may be used once. Waits up to ``wait_s`` for udev to create the links.
    """
    buses = ["virtio-blk"] * len(serials) if buses is None else buses
    if len(buses) != len(serials):
        raise DataDiskError(f"{len(serials)} data disk serials but {len(buses)} buses")
    devices: list[str] = []
    for serial, bus in zip(serials, buses, strict=True):
        if not _SERIAL.match(serial):
            raise DataDiskError(f"data disk serial {serial!r} is not a plain virtio serial (letters, digits, . _ -)")
        if serial == JOB_SERIAL:
            raise DataDiskError(f"data disk serial {serial!r} is the job disk")
        if bus not in BY_ID_NAMES:
            raise DataDiskError(f"data disk {serial!r}: unknown bus {bus!r} (one of {', '.join(BY_ID_NAMES)})")
        link = by_id / BY_ID_NAMES[bus].format(serial=serial)
        deadline = time.monotonic() + wait_s
        while not link.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        if not link.exists():
            seen = sorted(p.name for p in by_id.glob(f"*{serial}*")) if by_id.is_dir() else []
            raise DataDiskError(
                f"no {bus} disk with serial {serial!r}: {link} does not exist"
                + (f" (by-id has {', '.join(seen)})" if seen else "")
            )
        target = link.resolve()
        if not stat.S_ISBLK(target.stat().st_mode):
            raise DataDiskError(f"{link} leads to {target}, which is not a block device")
        if not _KERNEL_NAME[bus].match(target.name):
            raise DataDiskError(f"{link} leads to {target}, which is not a {bus} disk")
        if str(target) in devices:
            raise DataDiskError(f"data disk serial {serial!r} names a device already in the job ({target})")
        devices.append(str(target))
    return devices
