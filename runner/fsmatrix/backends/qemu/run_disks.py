"""A run's data disks: fresh raw image files in the run's directory, with serials ``fsm-data<N>`` on
the cell's bus and throttled by its device profile (backends/qemu/profiles.py); or, with ``devices``
(``fsmatrix run --device``), those block devices (or raw image files, for vmbench) as they are
(format raw, cache none), checked safe to format in preflight and claimed again before every run."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from fsmatrix.agent import storage
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu import profiles
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell

DATA_SERIAL = "fsm-data{}"


class RunDisks:
    """The data disks of every run: image files, or the passthrough ``devices``."""

    def __init__(self, devices: list[str] | None = None) -> None:
        # Passthrough: these block devices (or raw image files, for vmbench) are every run's data disks.
        self.devices = list(devices or [])
        # Each passthrough block device as preflight resolved it: every run re-checks that the path
        # still names this device and that it is still unused (it may have been mounted meanwhile).
        self._resolved: dict[str, storage.BlockDevice] = {}

    @property
    def source(self) -> str:
        # "virtio" (image files) as the vagrant backend says it; "block" as the host backend says it.
        return "block" if self.devices else "virtio"

    def check(self, cells: list[MatrixCell]) -> None:
        """Passthrough: every device safe to format (as the host backend checks), one per data disk."""
        resolved = [os.path.realpath(d) for d in self.devices]
        if len(set(resolved)) != len(resolved):
            raise UserError(f"--device names the same device twice: {' '.join(self.devices)}")
        for device in self.devices:
            if Path(device).is_file():
                continue  # a raw image file (vmbench); the command line passes block devices only
            try:
                self._resolved[device] = storage.check_safe_to_format(device)
            except storage.UnsafeDevice as exc:
                raise UserError(f"refusing to use {device}: {exc}") from exc
        wrong = [c.id for c in cells if c.spec.required_devices != len(self.devices)]
        if wrong:
            needs = sorted({c.spec.required_devices for c in cells})
            raise UserError(
                f"{len(self.devices)} --device given, but the cells need {' or '.join(map(str, needs))} data "
                f"disks each ({', '.join(wrong[:5])}{' ...' if len(wrong) > 5 else ''} do not match); "
                "select cells of one storage layout with --only"
            )

    def claim(self, claims: contextlib.ExitStack) -> None:
        """Before every run: hold each passthrough block device open with O_EXCL for the VM's whole
        life (the kernel then refuses any mount, mkfs, md or swap on it by anyone else; QEMU's own
        open, without O_EXCL, still works) and check it again, by device number, as in preflight."""
        for device in self.devices:
            if Path(device).is_file():
                continue
            expected = self._resolved.get(device) or storage.resolve(device)
            storage.check_safe_to_format(device, expected)  # every reason, before the claim hides them
            claims.enter_context(storage.held_exclusive(expected))

    def make(self, cell: MatrixCell, run_dir: Path, aio: str) -> list[Disk]:
        """The cell's data disks: fresh image files in ``run_dir``, or the passthrough devices
        (``aio``: what this QEMU uses where the cell asks for io_uring)."""
        size = storage.parse_size(cell.spec.storage.disk_size)
        preallocate = cell.spec.storage.disk_allocation == "preallocated"
        device = cell.spec.device
        throttle = profiles.throttle(device.profile)
        needed = cell.spec.required_devices
        if self.devices and len(self.devices) != needed:
            raise UserError(f"cell {cell.id} needs {needed} data disks; {len(self.devices)} --device given")
        disks = []
        for index in range(needed):
            if self.devices:
                path, cache = Path(self.devices[index]), "none"  # the device as it is: no host page cache
            else:
                path, cache = run_dir / f"data{index}.img", device.cache
                _fresh_file(path, size, preallocate)
            disks.append(
                Disk(
                    path,
                    DATA_SERIAL.format(index),
                    bus=device.bus,
                    cache=cache,
                    # io_uring falls back where this QEMU lacks it
                    aio=aio if device.aio == "io_uring" else device.aio,
                    iothread=device.iothread,
                    logical_block_size=device.logical_block_size,
                    physical_block_size=device.physical_block_size,
                    throttle=throttle,
                )
            )
        return disks


def _fresh_file(path: Path, size: int, preallocate: bool) -> None:
    with path.open("wb") as fh:
        if preallocate:
            os.posix_fallocate(fh.fileno(), 0, size)
        else:
            fh.truncate(size)
