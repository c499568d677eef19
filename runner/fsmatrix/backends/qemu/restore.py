"""A run's guest restored from a saved booted one (backends/qemu/snapshot.py): the template a cell's
runs restore, found or saved on first use and keyed by what its saved state depends on; and a
restored guest's disks hot-plugged before it resumes."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from fsmatrix.agent import proc
from fsmatrix.backends import image
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu import cmdline, kernel_boot, snapshot
from fsmatrix.backends.qemu.guest_boot import GuestImage

log = logging.getLogger("fsmatrix")

TEMPLATE_NAME = "fsmatrix-template"  # the template VM's -name


def template_for(
    vm: cmdline.QemuVm,
    golden: GuestImage,
    kernel: kernel_boot.PreparedKernel | None,
    qemu_version: str,
    echo: Callable[[str], None],
) -> snapshot.Template | None:
    """The saved booted guest of ``vm`` (a cell's VM named TEMPLATE_NAME, no disks: ``launch.cell_vm``)
    on ``golden`` with ``kernel`` (None: the image's), made on first use; None when none could be
    made (then the run boots, and says so)."""

    def command_for(overlay: Path, console: Path, qmp: Path) -> list[str]:
        return cmdline.qemu_command(dataclasses.replace(vm, image=overlay, serial_log=console, qmp_socket=qmp))

    placeholder = Path("/template")
    # A vm.kernel's files by content (its digests), not by path: the key's command has placeholders.
    stand_in = None
    if vm.boot is not None:
        boot = vm.boot
        stand_in = cmdline.DirectBoot(placeholder, placeholder, boot.append, boot.modules_disk and placeholder)
    key_vm = dataclasses.replace(vm, image=placeholder, serial_log=placeholder, qmp_socket=placeholder, boot=stand_in)
    digests = kernel.digests if kernel is not None else None
    key = snapshot.template_key(cmdline.qemu_command(key_vm), golden.sha256, qemu_version, digests)
    try:
        return snapshot.ensure_template(
            image.cache_root(),
            key,
            golden.paths.qcow2,
            command_for,
            echo,
            kernel=kernel.directory if kernel is not None else None,
        )
    except (RuntimeError, OSError, proc.CommandError) as exc:
        log.warning("cannot save a booted guest to restore (%s): this run boots", exc)
        return None


def plug_in_and_resume(vm: subprocess.Popen[bytes], qmp: Path, drives: Sequence[Disk]) -> None:
    """A restored guest: plug in the data disks, then the job disk (``drives[0]``, which starts the
    job), and resume."""
    order = [*range(1, len(drives)), 0]  # the job disk comes first in drives: plug it last
    ordered = [device for index in order for device in cmdline.disk_devices(drives[index], index)]
    monitor = snapshot.connect(qmp, vm)
    try:
        snapshot.attach_and_resume(monitor, vm, ordered)
    finally:
        snapshot.close(monitor)
