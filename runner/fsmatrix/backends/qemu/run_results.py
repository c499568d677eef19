"""A run's result document as the host finishes it: the guest's, with the host's provenance and the
VM's timings added (``guest_result``); or, when the guest wrote none (a timeout, a VM that did not
start, a host-side failure), one made on the host (``host_result``) with the console's tail."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fsmatrix import __version__
from fsmatrix.agent import job, provenance
from fsmatrix.backends import jobdisk
from fsmatrix.backends.qemu import kernel_boot
from fsmatrix.backends.qemu.console import console_tail
from fsmatrix.backends.qemu.crash_host import Launch
from fsmatrix.backends.qemu.guest_boot import GuestImage
from fsmatrix.matrix import MatrixCell

log = logging.getLogger("fsmatrix")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunStart:
    """One run as it began: what every result document of it says whoever writes it."""

    cell: MatrixCell
    repeat: int
    started: float  # time.monotonic()
    started_at: str  # now()
    vm: dict[str, Any] = field(default_factory=dict)  # provenance.vm: cpus, memory, how it started


@dataclass(frozen=True)
class HostView:
    """What the host adds to a run's ``provenance``, replacing whatever the guest was told."""

    backend: str
    accel: str
    device_source: str
    host: dict[str, Any] | None  # provenance.host
    image: GuestImage
    kernel: kernel_boot.PreparedKernel | None  # the cell's vm.kernel (None: the image's)

    def add_to(self, doc: dict[str, Any], vm: dict[str, Any]) -> None:
        prov = doc.setdefault("provenance", {})
        prov.update(backend=self.backend, accel=self.accel, device_source=self.device_source, vm=vm)
        prov["host"] = self.host  # the host's own view; whatever the guest was told is replaced
        prov["image"] = {
            **(prov.get("image") or provenance.image_summary(self.image.manifest) or {}),
            "name": self.image.paths.name,
            "sha256": self.image.sha256,
        }
        if self.kernel is not None:  # the kernel the guest booted: its file's sha256 and its release
            prov["kernel_source"] = self.kernel.source


def host_result(run: RunStart, status: str, reason: str, tail: str) -> dict[str, Any]:
    """A result document made on the host, for a run whose guest produced none (no provenance of
    the host yet: ``HostView.add_to``)."""
    cell = run.cell
    doc = job.result_document(
        job.CellRepeat(cell.spec, cell.id, run.repeat),
        status=status,
        reason=reason,
        started_at=run.started_at,
        provenance={"fsmatrix_version": __version__, "git": provenance.git_source()},
    )
    doc.update(finished_at=now(), duration_s=round(time.monotonic() - run.started, 3), details={"console_tail": tail})
    return doc


@dataclass(frozen=True)
class NoResult:
    """Why the guest wrote no result, and its console's tail."""

    reason: str
    tail: str


def guest_result(launch: Launch, code: int, vm_error: Callable[[], str]) -> dict[str, Any] | NoResult:
    """The guest's result document from the job disk of a VM that exited with status ``code``
    (logged with the guest's agent.log and console); without one, why not (``vm_error``: what the VM
    process said)."""
    console, cell = launch.console, launch.cell
    agent_log = jobdisk.read_log(launch.job_disk)
    log.info("guest agent.log:\n%s", agent_log or "(none)")
    log.info("guest console:\n%s", console.read_text(encoding="utf-8", errors="replace").replace("\r", ""))
    doc = jobdisk.read_result(launch.job_disk)
    if doc is not None:
        return doc
    tail = console_tail(console)
    why = f"the VM exited with status {code}: {vm_error()}" if code else "the guest powered off without a result"
    # A vm.kernel guest that never started says why in one line (its /init, or a panic).
    said = kernel_boot.guest_error(console.read_text(encoding="utf-8", errors="replace"))
    if said and cell.spec.vm.kernel:
        why = f"the guest did not start with vm.kernel {cell.spec.vm.kernel!r}: {said}"
    return NoResult(f"{why}; console tail:\n{tail}", tail)
