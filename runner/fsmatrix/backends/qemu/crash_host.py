"""The host half of a crash mode, behind one protocol a VM backend offers (``VmBackend``).

The qemu backend runs every host side. The libvirt backend offers the same protocol (it is a
``QemuBackend``) but no ``Cut``, so it refuses every mode that has a host side (its ``crash_modes``:
the modes that need nothing from the host) and takes from here only its ``boot_and_wait``'s types.

A crash mode whose guest side (``fsmatrix.agent.crash``) needs something from outside the VM has a
host side here: a module in ``backends/qemu/`` that subclasses ``HostCrashMode`` and declares
``HOST_SIDE``, and one line in the registry (``host_sides.py``). The backend asks the cell's host side,
never a mode by name, for:

- ``extra_disks``: more disks for the guest (fresh files in the run's directory);
- ``timeouts``: how many of the cell's timeouts its VM may take (the run, then each recovery);
- ``job_environment``: what goes into the job's ``environment`` (a test's hooks);
- ``before_run``: VMs of its own before the run's VM (``VmRun``: launch, boot, the ``Cut``), ending in
  ``Recover`` (the run's VM then boots in phase ``recover``) or ``NotCrashed`` (the run's result).

The defaults are a mode with no host side: the guest does everything (``NO_HOST_SIDE``).
``docs/adding-a-crash-mode.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu import snapshot
from fsmatrix.matrix import MatrixCell


@dataclass(frozen=True)
class Launch:
    """One run's VM, ready to boot: what the qemu and libvirt backends start it from."""

    cell: MatrixCell
    repeat: int
    run_dir: Path
    overlay: Path  # the root disk: a copy-on-write overlay of the golden image
    job_disk: Path
    data: list[Disk]
    console: Path  # where the guest's serial console goes
    template: snapshot.Template | None = None  # restore this saved guest instead of booting


@dataclass
class Cut:
    """Pull the VM's plug (SIGKILL: no quit, no flush) ``after_s`` seconds after its console shows
    the measured part began (``fsmatrix.agent.crash.MEASURE_START_MARKER``)."""

    after_s: float
    fired_at_s: float | None = None  # when it was cut, seconds after the marker; None: the guest ended first


class VmBackend(Protocol):
    """What a VM backend offers a crash mode's host side (its public API; nothing private)."""

    def launch(self, run: VmRun, phase: str, job_doc: dict[str, Any] | None = None) -> Launch: ...

    def boot_and_wait(self, launch: Launch, limit: float, cut: Cut | None = None) -> int | None: ...


@dataclass(frozen=True)
class VmRun:
    """One run as the backend hands it to a host side's ``before_run``."""

    backend: VmBackend
    cell: MatrixCell
    repeat: int
    run_dir: Path
    template: snapshot.Template | None
    data: list[Disk]  # the data disks: the run's VM gets the same files
    job_doc: dict[str, Any]  # the run's job, as its first VM would get it
    limit: float  # seconds one VM may take

    def launch(self, phase: str, job_doc: dict[str, Any] | None = None) -> Launch:
        """A VM of this run (fresh root overlay and job disk, the same data disks), ready to boot."""
        return self.backend.launch(self, phase, job_doc)


@dataclass(frozen=True)
class Recover:
    """``before_run`` crashed a VM: the run's VM recovers (``"phase": "recover"``, with ``crash``,
    the host's record of the crash), and ``details`` join its result's."""

    crash: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NotCrashed:
    """``before_run`` could not crash the run: its result, made on the host (``crash``: its section)."""

    status: str
    reason: str
    tail: str
    crash: dict[str, Any]


class HostCrashMode:
    """A crash mode's host side; every hook's default is "nothing to do on the host"."""

    mode: str = ""  # the crash.mode it serves (the agent's declaration's name)

    def extra_disks(self, cell: MatrixCell, run_dir: Path, *, create: bool = False) -> list[Disk]:
        """Disks the guest gets after the data disks (made in ``run_dir`` when ``create``)."""
        return []

    def timeouts(self, cell: MatrixCell) -> int:
        """How many of the cell's timeouts the run's VM may take."""
        return 1

    def job_environment(self, cell: MatrixCell) -> dict[str, Any]:
        """Added to the job's ``environment``."""
        return {}

    def before_run(self, run: VmRun) -> Recover | NotCrashed | None:
        """VMs before the run's own (None: none; the run's VM runs in phase ``run``)."""
        return None


NO_HOST_SIDE = HostCrashMode()
