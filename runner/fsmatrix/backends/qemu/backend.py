"""The qemu backend: every run boots the guest image once, in job mode, on fresh data disks.

Per run (repeats are separate boots): a copy-on-write overlay of the golden image (which is never
written), raw data disks with serials ``fsm-data<N>`` on the cell's bus (virtio-blk, virtio-scsi or
nvme) and throttled by its device profile (backends/qemu/profiles.py), a job disk holding the cell, and
QEMU started directly without a NIC. With ``devices`` (``fsmatrix run --device``) those block
devices are the data disks instead of fresh image files (format raw, cache none).

The guest runs the cell and powers off by itself; the host reads result.json back from the job
disk, adds its provenance and deletes everything the run made. A run that outlives the cell's
timeout plus a boot allowance is stopped (QMP ``quit``, then SIGKILL) and recorded as ``timeout``
with the tail of the guest's console.

A crash cell's mode may need the host too (more disks, a longer limit, VMs of its own before the
run's, such as one whose power is cut): its host side (``crash_host.HostCrashMode``, registered in
``host_sides.py``) says so, and this backend asks it without knowing which mode it is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fsmatrix import image_definitions, workdirs
from fsmatrix.agent import crash, fit, job, kernel, proc, storage
from fsmatrix.agent.cell import Cell
from fsmatrix.backends import host, hostinfo, image, jobdisk
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu import crash_run, kernel_boot, process, profiles, restore, run_results, snapshot
from fsmatrix.backends.qemu.console import console_tail
from fsmatrix.backends.qemu.crash_host import Cut, Launch, NotCrashed, VmRun
from fsmatrix.backends.qemu.guest_boot import GuestImage, Kernels, build_image
from fsmatrix.backends.qemu.launch import cell_vm, new_launch
from fsmatrix.backends.qemu.launch import command as launch_command
from fsmatrix.backends.qemu.run_disks import RunDisks
from fsmatrix.backends.qemu.run_results import HostView, NoResult, RunStart
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell

log = logging.getLogger("fsmatrix")

DEFAULT_WORKDIR = Path("/var/tmp/fsmatrix")
ALLOWANCE_ENV = "FSMATRIX_BOOT_ALLOWANCE"
# Boot plus job setup and power-off, on top of the cell's own timeout: a TCG boot takes 30-100 s here.
BOOT_ALLOWANCE_S = {"kvm": 60.0, "tcg": 300.0}
TOOLS = ("qemu-system-x86_64", "qemu-img", "mke2fs", "debugfs")


def _boot_allowance(given: float | None) -> float | None:
    """The boot allowance given, else FSMATRIX_BOOT_ALLOWANCE's (None: by accelerator, after preflight)."""
    if given is None and os.environ.get(ALLOWANCE_ENV):
        try:
            return float(os.environ[ALLOWANCE_ENV])
        except ValueError as exc:
            raise UserError(f"{ALLOWANCE_ENV} must be a number of seconds") from exc
    return given


class QemuBackend:
    """Runs a cell's repeats under QEMU, composing its concerns: what its guests boot (guest_boot.py),
    the data disks (run_disks.py), a VM made ready and its command line (launch.py), restoring
    saved guests (restore.py), the QEMU process (process.py), the crash mode's host side
    (crash_run.py) and the result documents (run_results.py)."""

    name = "qemu"
    # Crash modes it runs: every one (those that need the host through their host sides: host_sides.py).
    crash_modes: tuple[str, ...] = tuple(crash.MODES)
    # Boots a cell's vm.kernel (backends/qemu/kernel_boot.py) instead of the image's.
    own_kernel = True

    def __init__(
        self,
        workdir: Path = DEFAULT_WORKDIR,
        boot_allowance: float | None = None,
        echo: Callable[[str], None] = log.info,
        devices: list[str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.disks = RunDisks(devices)
        self._allowance = _boot_allowance(boot_allowance)  # None: by accelerator, known after preflight
        self._echo = echo
        # Every image the cells name (``image:``), built or found once.
        self._wanted: list[str] = [image_definitions.DEFAULT]
        self._images: dict[str, GuestImage] = {}
        self._image: GuestImage | None = None  # the cell being run's (environment() and provenance describe it)
        self._host: dict[str, Any] | None = None  # provenance.host, once the backend is prepared
        self.accel = "tcg"
        self.aio = "threads"
        # Seconds from QEMU's start to the agent having read its job, in the last run (None: not seen).
        self.boot_to_agent_s: float | None = None
        # How each run's guest starts: restored from a saved booted guest, or booted (snapshot.py).
        self.start = snapshot.start_mode()
        self.kernels = Kernels(echo)

    # ------------------------------------------------------------------ setup

    def preflight(self, cells: list[MatrixCell]) -> None:
        self._check_cells(cells)
        # Bad vm.kernel input fails here, before the image is built or any VM starts.
        self.kernels.check([c for c in cells if c.spec.vm.kernel], self.name, self.own_kernel)
        if self.disks.devices:
            self.disks.check(cells)
        for pid, name in process.running_vms():
            log.warning("a QEMU from an earlier run is still running: pid %d, %s", pid, name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.disks.devices:  # the data disks are image files under the workdir
            problem = fit.check_workdir_space([c.spec for c in cells], shutil.disk_usage(self.workdir).free, True)
            if problem is not None:
                raise UserError(f"the {self.name} backend: {problem}")
        self._wanted = list(dict.fromkeys(c.spec.image for c in cells)) or [image_definitions.DEFAULT]
        self._prepare()
        # The image's manifest describes the image's kernel: a vm.kernel cell is checked against its own.
        own = [c for c in cells if not c.spec.vm.kernel]
        warning = kernel.report([c.spec for c in own], [c.id for c in own], self.lacking)
        if warning:
            log.warning("%s", warning)

    def _check_cells(self, cells: list[MatrixCell]) -> None:
        """The host's tools, and every cell's device profile, crash mode and VM size on this machine."""
        for tool in TOOLS:
            if not proc.have(tool):
                raise UserError(f"{tool} not found: the qemu backend needs it (`make image` installs it)")
        for cell in cells:
            try:
                profiles.profile(cell.spec.device.profile)
            except ValueError as exc:
                raise UserError(f"cell {cell.id}: {exc}") from exc
        for cell in cells:
            mode = cell.spec.crash.mode if cell.spec.crash is not None else None
            if mode is not None and mode not in self.crash_modes:
                raise UserError(
                    f"cell {cell.id}: crash.mode {mode!r} is not built yet on the {self.name} backend "
                    f"(modes it runs: {', '.join(self.crash_modes)})"
                )
        # A guest bigger than this machine (checked where the cell runs: a Slurm node, a CI runner).
        memory_total, cpus = host.memory_total(), os.cpu_count() or 1
        for cell in cells:
            problem = fit.check_vm_on_host(cell.spec, memory_total, cpus)
            if problem is not None:
                raise UserError(f"cell {cell.id}: {problem}")

    def lacking(self, spec: Cell) -> str | None:
        """What the kernel of the cell's image lacks for it (from the image's manifest), or None (also
        for an image not prepared: nothing known of it yet)."""
        return kernel.lacking_in_image(spec, {name: built.manifest for name, built in self._images.items()})

    def kernel_of(self, cell: MatrixCell) -> kernel_boot.PreparedKernel | None:
        """The cell's vm.kernel, prepared for direct boot (once per content; None: the image's kernel)."""
        return self.kernels.of(cell)

    def _prepare(self) -> None:
        """Build (or find) every image in ``_wanted``; the host's view (accelerator, aio) once."""
        for name in self._wanted:
            if name not in self._images:
                self._images[name] = build_image(name, self._echo)
        self._image = self._images[self._wanted[0]]
        self.accel = image.host_accel()
        self.aio = "io_uring" if process.qemu_supports_io_uring(self.workdir) else "threads"
        if self.aio != "io_uring":
            log.warning("this QEMU cannot use aio=io_uring: data disks use aio=threads")
        self._host = hostinfo.describe(self.workdir, **self.host_software())

    @property
    def device_source(self) -> str:
        return self.disks.source

    @property
    def boot_allowance(self) -> float:
        return self._allowance if self._allowance is not None else BOOT_ALLOWANCE_S.get(self.accel, 300.0)

    def environment(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "accel": self.accel,
            "device_source": self.device_source,
            "image_name": self._image.paths.name if self._image else None,
            "image_sha256": (self._image.sha256 if self._image else "") or None,
            "host": self._host,
        }

    def host_software(self) -> dict[str, Any]:
        """Versions of the host-side software that runs the guest (``provenance.host``): QEMU, and
        the commit of the fsmatrix that drove it (``provenance.git`` is the guest agent's, from the
        image build, and stays put while host-side code changes)."""
        return {"qemu_version": hostinfo.qemu_version(), "fsmatrix_git": image.git_sha()}

    def close(self) -> None:
        """Nothing outlives a run here: each cell's VM and disks go with it."""

    # ------------------------------------------------------------------ one run

    def command(self, launch: Launch, qmp: Path) -> list[str]:
        """The QEMU command line of one run: the overlay as root disk, job disk, data disks; to
        restore, the template's devices and the disks' backends only (they are hot-plugged)."""
        prepared = self.kernel_of(launch.cell)
        boot = prepared.boot() if prepared is not None else None
        vm = cell_vm(launch.cell, self.accel, f"fsmatrix-{launch.cell.id}-r{launch.repeat}", boot)
        return launch_command(vm, launch, qmp, self.drives(launch))

    def template(self, cell: MatrixCell) -> snapshot.Template | None:
        """The saved booted guest this cell's runs restore (made on first use); None when runs boot
        (FSMATRIX_VM_START=boot) or no template could be made (then this run boots, and says so)."""
        assert self._image is not None
        if self.start != "restore":
            return None
        prepared = self.kernel_of(cell)
        vm = cell_vm(cell, self.accel, restore.TEMPLATE_NAME, prepared.boot() if prepared is not None else None)
        qemu = str((self._host or {}).get("qemu_version") or "")  # read once, when the backend was prepared
        return restore.template_for(vm, self._image, prepared, qemu, self._echo)

    def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
        if cell.spec.image not in self._images:  # run() without preflight, or a cell it did not see
            self._wanted = [*self._wanted, cell.spec.image]
            self._prepare()
        self._image = self._images[cell.spec.image]
        run_dir = self.workdir / f"vm-{cell.id}-r{repeat}-{os.getpid()}"
        vm_info = {"cpus": cell.spec.vm.cpus, "memory": cell.spec.vm.memory, "start": self.start}
        run = RunStart(cell, repeat, time.monotonic(), run_results.now(), vm_info)
        with contextlib.ExitStack() as claims:
            try:
                self.disks.claim(claims)
            except storage.UnsafeDevice as exc:
                return self._host_result(run, "error", str(exc), "")
            try:
                # Locked while the run lives: a later fsmatrix reaps it (a QEMU left running, its disks) if we die.
                with workdirs.run_directory(self.workdir, run_dir.name) as locked_dir:
                    return self._run_claimed(run, locked_dir)
            except (proc.CommandError, OSError, ValueError, RuntimeError) as exc:
                # A host-side failure (qemu-img, the job disk, a data disk file): this run failed, the matrix goes on.
                log.debug("run failed on the host:\n%s", traceback.format_exc())
                reason = f"host side of the run failed: {type(exc).__name__}: {exc}"
                return self._host_result(run, "error", reason, "")

    def _run_claimed(self, run: RunStart, run_dir: Path) -> dict[str, Any]:
        cell = run.cell
        try:
            before_template = time.monotonic()
            template = self.template(cell)  # saved on first use: a one-off cost, kept out of vm_wall_s
            vm_started = time.monotonic()
            run.vm["start"] = "boot" if template is None else "restore"
            data = self.disks.make(cell, run_dir, self.aio)
            job_doc = self.job_document(cell, run.repeat, data, run.vm)
            crash_run.make_extra_disks(cell, run_dir)
            limit = self.time_limit(cell)
            # The crash mode's VMs before the run's own (one whose power is cut): then this one recovers.
            vm_run = VmRun(self, cell, run.repeat, run_dir, template, data, job_doc, limit)
            own = crash_run.before_run(vm_run)
            if isinstance(own, NotCrashed):  # the run's result, made on the host
                not_crashed = self._host_result(run, own.status, own.reason, own.tail)
                not_crashed["crash"] = own.crash
                return not_crashed
            launch = self.launch(vm_run, own.phase, own.job_doc)
            code = self.boot_and_wait(launch, limit)
            if code is None:
                return self._timed_out(run, launch, limit, own.recovering)
            wall = time.monotonic() - vm_started
            log.info("guest powered off after %.1f s (qemu exit status %d)", wall, code)
            doc = run_results.guest_result(launch, code, lambda: self.vm_error(run_dir))
            if isinstance(doc, NoResult):
                return self._host_result(run, "error", doc.reason, doc.tail)
            self._host_view(cell).add_to(doc, run.vm)
            doc.setdefault("details", {})["vm_wall_s"] = round(wall, 1)
            own.add_details(doc)
            if vm_started - before_template > 1.0:
                doc["details"]["template_s"] = round(vm_started - before_template, 1)
            if self.boot_to_agent_s is not None:
                doc["details"]["boot_to_agent_s"] = round(self.boot_to_agent_s, 1)
            return doc
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def _timed_out(self, run: RunStart, launch: Launch, limit: float, recovering: bool) -> dict[str, Any]:
        tail = console_tail(launch.console)
        log.info("guest console (tail):\n%s", tail)
        reason = (
            f"the guest did not power off within {limit:.0f} s (timeout {run.cell.spec.timeout} s "
            f"+ boot allowance {self.boot_allowance:.0f} s){' in the recover phase' if recovering else ''}; "
            f"console tail:\n{tail}"
        )
        return self._host_result(run, "timeout", reason, tail)

    def job_document(self, cell: MatrixCell, repeat: int, data: list[Disk], vm_info: dict[str, Any]) -> dict[str, Any]:
        """The job of a run's (first) VM: the cell, its disks, the host's environment and reference."""
        return {
            "cell": cell.params,
            # timeout: auto: the limit derived on the host (the cell's JSON form says only "auto")
            "timeout": {"seconds": cell.spec.timeout, "source": cell.spec.timeout_source},
            "cell_id": cell.id,
            "repeat": repeat,
            "data_serials": [disk.serial for disk in data],  # what guests before data_disks read
            "data_disks": [{"serial": disk.serial, "bus": disk.bus} for disk in data],
            "environment": {**self.environment(), "vm": vm_info, **crash_run.job_environment(cell)},
            "reference": job.reference_for(cell.spec),  # computed here, not in the guest's time
            # A restored guest's clock stopped when its template was saved: the agent sets it from this.
            "host_time": time.time(),
        }

    def launch(self, run: VmRun, phase: str, job_doc: dict[str, Any] | None = None) -> Launch:
        """A VM of the run in ``phase``, ready to boot: a fresh root overlay and job disk (its job:
        ``job_doc``, else the run's); the data disks as they are."""
        assert self._image is not None
        return new_launch(run, phase, job_doc or run.job_doc, self._image.paths.qcow2)

    def drives(self, launch: Launch) -> list[Disk]:
        """The job disk, then the data disks (the root disk is the overlay), then the crash mode's
        extra disks."""
        job_disk = Disk(launch.job_disk, jobdisk.SERIAL, aio=self.aio, iothread=False)
        return [job_disk, *launch.data, *crash_run.extra_disks(launch.cell, launch.run_dir)]

    def time_limit(self, cell: MatrixCell) -> float:
        """Seconds a run's VM may take: the cell's timeout (as many times as its crash mode's host
        side says: once more for each recovery the guest runs) plus the boot allowance."""
        return crash_run.time_limit(cell, self.boot_allowance)

    def boot_and_wait(self, launch: Launch, limit: float, cut: Cut | None = None) -> int | None:
        """Boot the run's VM and wait for it to power off: QEMU's exit status, or None when it was
        stopped after ``limit`` seconds; with ``cut``, killed ``cut.after_s`` after the measured part
        began (``cut.fired_at_s`` records when). No VM outlives this call, whatever happens (Ctrl-C included).
        The libvirt backend overrides this; everything around it is shared."""
        qmp = snapshot.socket_path(str(launch.overlay))
        cmd = self.command(launch, qmp)
        log.info("qemu: %s", " ".join(cmd))
        vm: subprocess.Popen[bytes] | None = None
        self.boot_to_agent_s = None
        try:
            vm, started = process.start(cmd, launch.run_dir / "qemu.stderr")
            if launch.template is not None:
                restore.plug_in_and_resume(vm, qmp, self.drives(launch))
            watch = process.Watch(vm, started, launch.console, qmp)
            try:
                return watch.until_exit(limit, cut)
            finally:
                self.boot_to_agent_s = watch.boot_to_agent_s
        finally:
            process.kill(vm)
            qmp.unlink(missing_ok=True)

    def vm_error(self, run_dir: Path) -> str:
        """What the VM process said when it failed (QEMU's stderr)."""
        return (run_dir / "qemu.stderr").read_text(errors="replace").strip()

    def _host_view(self, cell: MatrixCell) -> HostView:
        """What this host adds to the provenance of the cell's runs."""
        assert self._image is not None
        return HostView(self.name, self.accel, self.device_source, self._host, self._image, self.kernels.prepared(cell))

    def _host_result(self, run: RunStart, status: str, reason: str, tail: str) -> dict[str, Any]:
        """A result document made on the host, for a run whose guest produced none."""
        doc = run_results.host_result(run, status, reason, tail)
        self._host_view(run.cell).add_to(doc, run.vm)
        return doc
