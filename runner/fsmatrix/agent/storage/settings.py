"""A cell's ``storage`` block, typed: the layout of its data disks (one disk, the journal on a second,
or a stripe), their size, and how many block devices that takes. Part of the cell (``Cell.storage``)
and all that ``storage.prepare`` needs of it besides the filesystem and its options."""

from __future__ import annotations

from dataclasses import dataclass

from fsmatrix.agent.declare import setting
from fsmatrix.agent.storage import filesystems, stripe

SINGLE = "single"
SPLIT_JOURNAL = "split-journal"
LAYOUTS = (SINGLE, SPLIT_JOURNAL, *stripe.LAYOUTS)
STRIPED_LAYOUTS = stripe.LAYOUTS
# A split-off journal needs a filesystem on a device of its own.
JOURNAL_FILESYSTEMS = tuple(
    n for n in filesystems.FILESYSTEMS if filesystems.get(n).device and filesystems.get(n).mounts
)


@dataclass(frozen=True)
class Storage:
    layout: str = setting(SINGLE, choices=LAYOUTS, help="one disk, journal on a second disk, or a stripe")
    disk_size: str = setting("8G", size=True, help="each data disk (loop file, VM disk); tmpfs: its size")
    journal_filesystem: str = setting(
        filesystems.DEFAULT_JOURNAL_FILESYSTEM, choices=JOURNAL_FILESYSTEMS, help="split-journal: the journal disk's"
    )
    journal_mount_options: str = setting("", help="split-journal: the journal filesystem's mount options")
    # VM backend: sparse data disks fill as the guest writes; preallocated ones are fallocated
    # first, so the host filesystem's allocation does not land inside the measurement.
    disk_allocation: str = setting("sparse", choices=("sparse", "preallocated"), help="VM data disk images")
    # md-raid0 / lvm-stripe: how many disks, and the md chunk / LVM stripe size (seed 004: -i 4 -I 64).
    stripe_disks: int = setting(4, minimum=2, maximum=16, help="md-raid0 / lvm-stripe: disks")
    stripe_size: str = setting("64K", size=True, help="md chunk / LVM stripe size")

    @property
    def journal_on_own_filesystem(self) -> str | None:
        """The journal's filesystem when the layout splits it off, else None."""
        return self.journal_filesystem if self.layout == SPLIT_JOURNAL else None

    @property
    def striped(self) -> bool:
        return self.layout in STRIPED_LAYOUTS


def required_devices(filesystem: str, storage: Storage) -> int:
    """Block devices a cell needs: a stripe's disks; else one per filesystem that has a device."""
    if storage.striped:
        return storage.stripe_disks
    needed = 1 if filesystems.get(filesystem).device else 0
    journal = storage.journal_on_own_filesystem
    if journal is not None and filesystems.get(journal).device:
        needed += 1
    return needed
