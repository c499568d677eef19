"""How a VM backend attaches one disk: the settings both the qemu and the libvirt backend translate.

A run's disks are the job disk plus the cell's data disks. Each data disk carries the cell's
``device`` settings (bus, cache, aio, iothread, block sizes) and the QEMU block throttling of its
device profile (backends/qemu/profiles.py); the guest finds every disk by its serial alone, under the
/dev/disk/by-id name its bus gives it (see fsmatrix.agent.storage.data_disks.BY_ID_NAMES).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# virtio-blk: one PCI device per disk; virtio-scsi: a virtio-scsi-pci controller per disk with one
# scsi-hd on it; nvme: one NVMe controller per disk (namespace 1).
BUSES = ("virtio-blk", "virtio-scsi", "nvme")


@dataclass(frozen=True)
class Disk:
    path: Path  # an image file or a block device
    serial: str  # <= 20 characters: what virtio-blk passes to the guest
    format: str = "raw"
    bus: str = "virtio-blk"  # virtio-blk, virtio-scsi or nvme
    cache: str = "none"
    aio: str = "io_uring"  # io_uring, native or threads
    iothread: bool = True
    logical_block_size: int = 512
    physical_block_size: int = 512
    # QEMU block throttling, as -drive throttling.<key>=<value> (iops-total, bps-total, ...).
    throttle: dict[str, int] = field(default_factory=dict)
