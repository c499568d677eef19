"""Backends: the ways fsmatrix reaches a kernel to run a cell on (host, qemu, libvirt).

The registry is ``BACKENDS``: one entry per backend, each making its backend from the run's
work directory and the block devices the user named. ``fsmatrix run --backend`` offers exactly these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fsmatrix.matrix import MatrixCell


class Backend(Protocol):
    name: str

    def preflight(self, cells: list[MatrixCell]) -> None:
        """Refuse (UserError) before anything runs when the cells cannot run on this backend."""

    def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
        """Run one repeat of a cell and return its result document."""

    def environment(self) -> dict[str, Any]:
        """Provenance this backend adds to every result (backend, accel, ...)."""

    def close(self) -> None:
        """Release what the backend holds for the whole run (daemons it started); called once, always."""


@dataclass(frozen=True)
class BackendEntry:
    name: str
    help: str
    takes_devices: bool  # whether --device (the user's own block devices) means anything to it
    make: Callable[[Path, list[str]], Backend]  # (workdir, devices) -> backend; imports lazily
    uses_kvm: bool = False  # runs guests, under KVM where it works (Slurm asks for the kvm GRES: slurm.py)


def _host(workdir: Path, devices: list[str]) -> Backend:
    from fsmatrix.backends.host import HostBackend

    return HostBackend(devices=devices, workdir=workdir)


def _qemu(workdir: Path, devices: list[str]) -> Backend:
    from fsmatrix.backends.qemu.backend import QemuBackend

    return QemuBackend(workdir=workdir, devices=devices)


def _libvirt(workdir: Path, devices: list[str]) -> Backend:
    from fsmatrix.backends.libvirt import LibvirtBackend

    return LibvirtBackend(workdir=workdir)


BACKENDS: dict[str, BackendEntry] = {
    e.name: e
    for e in (
        BackendEntry("host", "this machine's kernel, loop devices (root)", True, _host),
        BackendEntry("qemu", "a QEMU guest from the built image, one per cell", True, _qemu, uses_kvm=True),
        BackendEntry("libvirt", "the same guest, run by libvirt", False, _libvirt, uses_kvm=True),
    )
}
