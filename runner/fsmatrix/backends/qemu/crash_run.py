"""A run as its crash mode's host side shapes it (``crash_host.py``; registered in ``host_sides.py``),
asked without knowing which mode it is: its extra disks, how long its VM may take, what its job's
environment gets, and the VMs before the run's own (``before_run``), which decide the phase the
run's own VM boots in."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu.crash_host import NotCrashed, Recover, VmRun
from fsmatrix.backends.qemu.host_sides import host_side
from fsmatrix.matrix import MatrixCell


def make_extra_disks(cell: MatrixCell, run_dir: Path) -> None:
    """The crash mode's extra disks, made in ``run_dir`` before any VM of the run starts."""
    host_side(cell).extra_disks(cell, run_dir, create=True)


def extra_disks(cell: MatrixCell, run_dir: Path) -> list[Disk]:
    """The crash mode's extra disks (made already), which every VM of the run gets after its data disks."""
    return host_side(cell).extra_disks(cell, run_dir)


def time_limit(cell: MatrixCell, boot_allowance: float) -> float:
    """Seconds a run's VM may take: the cell's timeout (as many times as its crash mode's host
    side says: once more for each recovery the guest runs) plus the boot allowance."""
    return float(cell.spec.timeout) * host_side(cell).timeouts(cell) + boot_allowance


def job_environment(cell: MatrixCell) -> dict[str, Any]:
    """What the crash mode's host side adds to the job's ``environment``."""
    return host_side(cell).job_environment(cell)


@dataclass(frozen=True)
class RunVm:
    """The run's own VM, as the VMs before it left it: its job, its phase (``run``, or ``recover``
    after a crash) and, when it recovers, the record of the crash."""

    job_doc: dict[str, Any]
    phase: str
    recover: Recover | None = None

    @property
    def recovering(self) -> bool:
        return self.recover is not None

    def add_details(self, doc: dict[str, Any]) -> None:
        """The crash's details join the result's (``details`` present)."""
        if self.recover is not None:
            doc["details"].update(self.recover.details)


def before_run(run: VmRun) -> RunVm | NotCrashed:
    """The crash mode's VMs before the run's own (one whose power is cut): the run's VM, or, when
    the mode could not crash the run, its result (``NotCrashed``)."""
    before = host_side(run.cell).before_run(run)
    if isinstance(before, NotCrashed):
        return before
    if isinstance(before, Recover):
        job_doc = {**run.job_doc, "phase": "recover", "crash": before.crash, "host_time": time.time()}
        return RunVm(job_doc, "recover", before)
    return RunVm(run.job_doc, "run")
