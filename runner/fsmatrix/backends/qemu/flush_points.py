"""The host side of ``crash.mode: flush-points``: two more virtio-blk disks for the guest, fresh
sparse files: the dm-log-writes log (serial ``fsm-log``) and the scratch disk the log is replayed
onto (``fsm-scratch``), sized from ``storage.disk_size``. The guest replays and recovers every point
itself (``fsmatrix.agent.crash.flush_points``), so the VM may take the cell's timeout once for the
run and once per point.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fsmatrix.agent import storage
from fsmatrix.agent.crash import flush_points as guest_side
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu.crash_host import HostCrashMode
from fsmatrix.matrix import MatrixCell

# Tests' hooks: the flush-points log disk's size in bytes (a log too small to hold the run fails it);
# the flush point whose replayed files the guest damages before recovering (that point must fail).
FLUSH_LOG_BYTES_ENV = "FSMATRIX_FLUSH_LOG_BYTES"
FLUSH_CORRUPT_ENV = "FSMATRIX_FLUSH_CORRUPT_POINT"


def applies(cell: MatrixCell) -> bool:
    return cell.spec.crash is not None and cell.spec.crash.mode == guest_side.MODE.name


def recoveries(cell: MatrixCell) -> int:
    """How many recoveries the guest runs after the run itself (one per point; 0 for other cells)."""
    return cell.spec.crash.points if applies(cell) and cell.spec.crash is not None else 0


def test_hooks(cell: MatrixCell) -> dict[str, Any]:
    """What a test asks the guest to do on purpose (FLUSH_CORRUPT_ENV), for a flush-points cell."""
    chosen = os.environ.get(FLUSH_CORRUPT_ENV)
    if not chosen or not applies(cell):
        return {}
    return {guest_side.CORRUPT_POINT_KEY: int(chosen)}


def disks(cell: MatrixCell, run_dir: Path, *, create: bool = False) -> list[Disk]:
    """A flush-points cell's log and scratch disks (none for any other cell): sparse files in
    ``run_dir`` (zeroed, as the log must start), made when ``create``."""
    if not applies(cell):
        return []
    sizes = guest_side.disk_sizes(storage.parse_size(cell.spec.storage.disk_size))
    if os.environ.get(FLUSH_LOG_BYTES_ENV):
        sizes = (int(os.environ[FLUSH_LOG_BYTES_ENV]), sizes[1])
    found = []
    for serial, size in zip((guest_side.LOG_SERIAL, guest_side.SCRATCH_SERIAL), sizes, strict=True):
        path = run_dir / f"{serial}.img"
        if create:
            with path.open("wb") as fh:
                fh.truncate(size)
        # Not under test: the host's page cache may hold their writes (they outlive no VM).
        found.append(Disk(path, serial, cache="writeback", aio="threads", iothread=False))
    return found


class FlushPointsHost(HostCrashMode):
    """The log and scratch disks; the run's timeout once more for each point the guest recovers."""

    mode = guest_side.MODE.name

    def extra_disks(self, cell: MatrixCell, run_dir: Path, *, create: bool = False) -> list[Disk]:
        return disks(cell, run_dir, create=create)

    def timeouts(self, cell: MatrixCell) -> int:
        return 1 + recoveries(cell)

    def job_environment(self, cell: MatrixCell) -> dict[str, Any]:
        return test_hooks(cell)


HOST_SIDE = FlushPointsHost()
