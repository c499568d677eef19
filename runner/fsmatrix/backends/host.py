"""The host backend: run cells on this machine's kernel, on loop devices or on named block devices.

It takes devices as they are: a cell's ``device`` settings (bus, cache, aio, iothread, block sizes)
mean nothing here and are ignored, and a device profile other than ``native`` cannot be applied,
so such a cell is recorded as ``skipped`` (run it on a VM backend), as is a cell with a
``vm.kernel`` (the kernel is the host's). So is a cell that names a guest image other than the
default: the host runs its own system, which is no image.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fsmatrix import workdirs
from fsmatrix.agent import crash, fit, job, kernel, provenance, storage
from fsmatrix.agent.cell import DEFAULT_IMAGE, NATIVE, Cell
from fsmatrix.agent.crash import modes as crash_modes
from fsmatrix.backends import hostinfo
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell

DEFAULT_WORKDIR = Path("/var/tmp/fsmatrix")


log = logging.getLogger("fsmatrix")


class HostBackend:
    name = "host"

    def __init__(self, devices: list[str] | None = None, workdir: Path = DEFAULT_WORKDIR) -> None:
        self.devices = list(devices or [])
        self.workdir = workdir
        self._host: dict[str, Any] | None = None
        # The devices as preflight resolved them: a path that names another device later is refused.
        self._resolved: dict[str, storage.BlockDevice] = {}

    def preflight(self, cells: list[MatrixCell]) -> None:
        if os.geteuid() != 0:
            raise UserError("the host backend needs root (it runs losetup, mkfs and mount); run it as root")
        for cell in cells:
            if cell.spec.crash is None:
                continue
            mode = crash_modes.get(cell.spec.crash.mode)
            if mode.needs_vm is not None:
                here = ", ".join(repr(name) for name in crash.MODES if crash_modes.get(name).needs_vm is None)
                raise UserError(
                    f"cell {cell.id}: crash.mode {mode.name!r} needs a VM backend (--backend qemu): {mode.needs_vm}; "
                    f"crash.mode {here} runs here"
                )
        for device in self.devices:
            try:
                self._resolved[device] = storage.check_safe_to_format(device)
            except storage.UnsafeDevice as exc:
                raise UserError(f"refusing to use {device}: {exc}") from exc
        if self.devices:
            needed = max((c.spec.required_devices for c in cells), default=0)
            if needed > len(self.devices):
                raise UserError(
                    f"some cells need {needed} devices (storage.layout split-journal) but only "
                    f"{len(self.devices)} --device given"
                )
        self.workdir.mkdir(parents=True, exist_ok=True)
        specs = [c.spec for c in cells]
        problem = fit.check_host_memory(specs, memory_available())
        if problem is None and not self.devices:  # loop files under the workdir
            problem = fit.check_workdir_space(specs, shutil.disk_usage(self.workdir).free)
        if problem is not None:
            raise UserError(f"the host backend: {problem}")
        cache: dict[str, str | None] = {}
        warning = kernel.report(
            [c.spec for c in cells], [c.id for c in cells], lambda s: _not_here(s) or kernel.lacking_here(s, cache)
        )
        if warning:
            log.warning("%s", warning)

    def environment(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "accel": "none",
            "device_source": "block" if self.devices else "loop",
            "host": self.host,
        }

    @property
    def host(self) -> dict[str, Any]:
        """``provenance.host``, looked at once per matrix run."""
        if self._host is None:
            self._host = hostinfo.describe(self.workdir)
        return self._host

    def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
        why = _not_here(cell.spec)
        if why is not None:
            return self._skipped(cell, repeat, why)
        # Locked while the run lives: a later fsmatrix reaps it (loop devices, mounts, files) if we die.
        name = f"{cell.id}-r{repeat}-{os.getpid()}"
        with workdirs.run_directory(self.workdir, name) as run_dir, contextlib.ExitStack() as stack:
            needed = cell.spec.required_devices
            if self.devices:
                devices = self.devices[:needed]
                for device in devices:
                    expected = self._resolved.get(device)
                    if expected is not None and storage.resolve(device).rdev != expected.rdev:
                        raise storage.UnsafeDevice(
                            f"refusing to format {device}: it now names {storage.resolve(device).major_minor}, "
                            f"not the {expected.major_minor} it named when the run started"
                        )
            else:
                size = storage.parse_size(cell.spec.storage.disk_size)
                devices = stack.enter_context(storage.loop_devices(needed, size, run_dir)) if needed else []
            return job.run_job(
                job.Job(job.CellRepeat(cell.spec, cell.id, repeat), devices, run_dir, self.environment())
            )

    def close(self) -> None:
        """Nothing outlives a run here (each run's loop devices and mounts go with it)."""

    def _skipped(self, cell: MatrixCell, repeat: int, reason: str) -> dict[str, Any]:
        """The result document of a run this backend cannot do."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        doc = job.result_document(
            job.CellRepeat(cell.spec, cell.id, repeat),
            status="skipped",
            reason=reason,
            started_at=now,
            provenance={**provenance.collect(), **self.environment(), "tools": {}},
        )
        doc.update(finished_at=now, duration_s=0.0)
        return doc


def memory_total() -> int:
    """The host's MemTotal, bytes (what a VM on it can be given at most)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 1 << 62  # not reported: nothing to check against


def memory_available() -> int:
    """The host's MemAvailable, bytes (what it can give without swapping)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 1 << 62  # not reported (kernels before 3.14): nothing to check against


def _not_here(spec: Cell) -> str | None:
    """Why the host backend cannot run a cell at all (it is recorded as skipped), or None: what needs a VM."""
    if spec.device.profile != NATIVE:
        return (
            f"device profile {spec.device.profile!r} needs a VM backend (--backend qemu): "
            "the host backend cannot shape a device"
        )
    if spec.image != DEFAULT_IMAGE:
        return (
            f"image {spec.image!r} is a guest image: run it on a VM backend (--backend qemu); "
            "the host backend runs this machine's own system"
        )
    if spec.vm.kernel:
        return (
            f"vm.kernel {spec.vm.kernel!r} needs the qemu backend (--backend qemu): "
            "the host backend runs the host's kernel"
        )
    return None
