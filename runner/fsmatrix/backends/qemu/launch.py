"""A VM of a run made ready to boot (``Launch``): a fresh copy-on-write overlay of the golden image
(or of a saved guest's frozen overlay) as its root disk, which is never written itself, and a job
disk holding its job; and its QEMU command line, which boots it or restores a saved guest into it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fsmatrix.agent import proc
from fsmatrix.backends import jobdisk
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu import cmdline, snapshot
from fsmatrix.backends.qemu.crash_host import Launch, VmRun
from fsmatrix.matrix import MatrixCell


def new_launch(run: VmRun, phase: str, job_doc: dict[str, Any], golden: Path) -> Launch:
    """A VM of ``run`` in ``phase``, ready to boot: a fresh root overlay (of ``golden``, or of the
    run's template's overlay, the disk its saved memory expects) and job disk; the data disks as they are."""
    suffix = "" if phase == "run" else f"-{phase}"
    overlay = run.run_dir / f"root{suffix}.qcow2"
    backing = golden if run.template is None else run.template.overlay
    proc.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(backing), "-F", "qcow2", str(overlay)],
        timeout=60,
    )
    job_disk = jobdisk.make_job_disk(run.run_dir / f"job{suffix}.img", job_doc)
    console = run.run_dir / f"console{suffix}.log"
    return Launch(run.cell, run.repeat, run.run_dir, overlay, job_disk, run.data, console, run.template)


def cell_vm(cell: MatrixCell, accel: str, name: str, boot: cmdline.DirectBoot | None) -> cmdline.QemuVm:
    """The cell's VM under QEMU named ``name``, before its paths and disks (placeholders here):
    its size, the accelerator, the kernel it boots (``boot``; None: the image's)."""
    placeholder = Path()
    return cmdline.QemuVm(
        placeholder,
        accel=accel,
        name=name,
        serial_log=placeholder,
        memory_mib=cell.spec.vm.memory_mib,
        cpus=cell.spec.vm.cpus,
        snapshot=False,  # the overlay takes the writes; the golden image is its read-only backing file
        boot=boot,
    )


def command(vm: cmdline.QemuVm, launch: Launch, qmp: Path, drives: Sequence[Disk]) -> list[str]:
    """The QEMU command line of one run's VM: the overlay as root disk, then ``drives``; to restore,
    the template's devices and the disks' backends only (they are hot-plugged)."""
    vm = dataclasses.replace(vm, image=launch.overlay, serial_log=launch.console, qmp_socket=qmp)
    if launch.template is None:
        return cmdline.qemu_command(dataclasses.replace(vm, drives=drives))
    cmd = cmdline.qemu_command(vm)
    for index, disk in enumerate(drives):
        cmd += cmdline.disk_backend(disk, index)
    return cmd + snapshot.restore_arguments(launch.template)
