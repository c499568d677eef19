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
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from qemu.qmp.legacy import QEMUMonitorProtocol

from fsmatrix import __version__, images, workdirs
from fsmatrix.agent import crash, fit, job, kernel, proc, provenance, storage
from fsmatrix.agent.cell import Cell
from fsmatrix.backends import host, hostinfo, image, jobdisk
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu import cmdline, kernel_boot, profiles, snapshot
from fsmatrix.backends.qemu.console import ConsoleWatcher, console_tail
from fsmatrix.backends.qemu.crash_host import Cut, Launch, NotCrashed, Recover, VmRun
from fsmatrix.backends.qemu.host_sides import host_side
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell

log = logging.getLogger("fsmatrix")

DEFAULT_WORKDIR = Path("/var/tmp/fsmatrix")
ALLOWANCE_ENV = "FSMATRIX_BOOT_ALLOWANCE"
# Boot plus job setup and power-off, on top of the cell's own timeout: a TCG boot takes 30-100 s here.
BOOT_ALLOWANCE_S = {"kvm": 60.0, "tcg": 300.0}
QUIT_GRACE_S = 15.0  # after QMP quit, before SIGKILL
QMP_CONNECT_S = 10.0
DATA_SERIAL = "fsm-data{}"
TOOLS = ("qemu-system-x86_64", "qemu-img", "mke2fs", "debugfs")
# The guest agent's first log line (fsmatrix.agent.guest.main), which systemd copies to the serial
# console: the moment the guest has booted and job mode has started.
# The agent logs this once it has read the run's job and found its disks: boot-to-agent ends here.
AGENT_MARKER = b" INFO job "
CONSOLE_POLL_S = 0.25
CUT_POLL_S = 0.02  # once the measured part began, until the cut


def running_vms(prefix: str = "fsmatrix-") -> list[tuple[int, str]]:
    """QEMU processes whose -name starts with ``prefix``: (pid, name). Finds leftovers."""
    found = []
    for pid in proc.pids():
        args = proc.cmdline(pid)
        if not args or not os.path.basename(args[0]).startswith(b"qemu-system"):
            continue
        for flag, value in itertools.pairwise(args):
            if flag == b"-name" and value.decode(errors="replace").startswith(prefix):
                found.append((pid, value.decode(errors="replace")))
    return found


def parent_death_prefix() -> list[str]:
    """A command prefix that makes the VM die with its runner: setpriv (util-linux) sets the
    parent-death signal and execs QEMU, which keeps it (QEMU 7.2 has no -run-with exit-with-parent;
    a preexec_fn is unsafe while rich's refresh thread runs). Empty when setpriv is missing."""
    return ["setpriv", "--pdeathsig", "KILL", "--"] if proc.have("setpriv") else []


def qemu_supports_io_uring(scratch: Path) -> bool:
    """Whether this host's QEMU opens a disk with aio=io_uring (a build or a kernel may lack it)."""
    scratch.mkdir(parents=True, exist_ok=True)
    probe = scratch / f"aio-probe-{os.getpid()}.img"
    try:
        probe.write_bytes(b"\0" * 4096)
        cmd = [
            "qemu-system-x86_64", "-machine", "none", "-nodefaults", "-display", "none", "-qmp", "stdio",
            "-drive", f"file={probe},if=none,id=probe,format=raw,cache=none,aio=io_uring",
        ]  # fmt: skip
        done = proc.run(cmd, input='{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n', timeout=30, check=False)
        return done.returncode == 0
    except proc.CommandError:
        return False
    finally:
        probe.unlink(missing_ok=True)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class QemuBackend:
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
        # Passthrough: these block devices (or raw image files, for vmbench) are every run's data disks.
        self.devices = list(devices or [])
        # Each passthrough block device as preflight resolved it: every run re-checks that the path
        # still names this device and that it is still unused (it may have been mounted meanwhile).
        self._resolved: dict[str, storage.BlockDevice] = {}
        if boot_allowance is None and os.environ.get(ALLOWANCE_ENV):
            try:
                boot_allowance = float(os.environ[ALLOWANCE_ENV])
            except ValueError as exc:
                raise UserError(f"{ALLOWANCE_ENV} must be a number of seconds") from exc
        self._allowance = boot_allowance  # None: by accelerator, known after preflight
        self._echo = echo
        # Every image the cells name (``image:``), built or found once: its files, sha256 and manifest.
        self._wanted: list[str] = [images.DEFAULT]
        self._images: dict[str, tuple[image.ImagePaths, str, dict[str, Any]]] = {}
        # The image of the cell being run (environment() and provenance describe it).
        self._image: image.ImagePaths | None = None
        self._sha256 = ""
        self._host: dict[str, Any] | None = None  # provenance.host, once the backend is prepared
        self._manifest: dict[str, Any] = {}
        self.accel = "tcg"
        self.aio = "threads"
        # Seconds from QEMU's start to the agent having read its job, in the last run (None: not seen).
        self.boot_to_agent_s: float | None = None
        # How each run's guest starts: restored from a saved booted guest, or booted (snapshot.py).
        self.start = snapshot.start_mode()
        # vm.kernel (and vm.modules) as a cell says them -> that kernel, prepared for direct boot.
        self._kernels: dict[tuple[str, str], kernel_boot.Prepared] = {}

    # ------------------------------------------------------------------ setup

    def preflight(self, cells: list[MatrixCell]) -> None:
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
        # Bad vm.kernel input fails here, before the image is built or any VM starts.
        self._check_kernels([c for c in cells if c.spec.vm.kernel])
        if self.devices:
            self._check_devices(cells)
        for pid, name in running_vms():
            log.warning("a QEMU from an earlier run is still running: pid %d, %s", pid, name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.devices:  # the data disks are image files under the workdir
            problem = fit.check_workdir_space([c.spec for c in cells], shutil.disk_usage(self.workdir).free, True)
            if problem is not None:
                raise UserError(f"the {self.name} backend: {problem}")
        self._wanted = list(dict.fromkeys(c.spec.image for c in cells)) or [images.DEFAULT]
        self._prepare()
        # The image's manifest describes the image's kernel: a vm.kernel cell is checked against its own.
        own = [c for c in cells if not c.spec.vm.kernel]
        warning = kernel.report([c.spec for c in own], [c.id for c in own], self.lacking)
        if warning:
            log.warning("%s", warning)

    def lacking(self, spec: Cell) -> str | None:
        """What the kernel of the cell's image lacks for it (from the image's manifest), or None (also
        for an image not prepared: nothing known of it yet)."""
        return kernel.lacking_in_image(spec, {name: prepared[2] for name, prepared in self._images.items()})

    def _check_kernels(self, cells: list[MatrixCell]) -> None:
        """Prepare every vm.kernel of ``cells`` before any VM starts, and refuse (exit 2) one that is
        missing, no kernel, or without a module a cell needs."""
        if cells and not self.own_kernel:
            raise UserError(
                f"cell {cells[0].id}: vm.kernel is booted by the qemu backend only, not by {self.name}; "
                "run it with --backend qemu"
            )
        for cell in cells:
            try:
                prepared = self.kernel_of(cell)
            except UserError as exc:
                raise UserError(f"cell {cell.id}: {exc}") from exc
            assert prepared is not None
            missing = prepared.lacking(cell.spec)
            if missing:
                raise UserError(
                    f"cell {cell.id}: vm.kernel {cell.spec.vm.kernel!r} ({prepared.release}) has no module "
                    f"{missing}, loadable or built in; the cell needs it (give a kernel that has it, "
                    "or leave the cell out)"
                )

    def kernel_of(self, cell: MatrixCell) -> kernel_boot.Prepared | None:
        """The cell's vm.kernel, prepared for direct boot (once per content; None: the image's kernel)."""
        vm = cell.spec.vm
        if not vm.kernel:
            return None
        key = (vm.kernel, vm.modules)
        if key not in self._kernels:
            try:
                self._kernels[key] = kernel_boot.prepare(vm.kernel, vm.modules, image.cache_root(), self._echo)
            except proc.CommandError as exc:
                raise UserError(f"cannot prepare vm.kernel {vm.kernel!r}: {exc}") from exc
        return self._kernels[key]

    def _check_devices(self, cells: list[MatrixCell]) -> None:
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

    def _prepare(self) -> None:
        """Build (or find) every image in ``_wanted``; the host's view (accelerator, aio) once."""
        for name in self._wanted:
            if name in self._images:
                continue
            try:
                paths = image.build(echo=self._echo, image=name)  # reuses a cached image in well under a second
            except proc.CommandError as exc:
                raise UserError(f"cannot build the guest image {name}: {exc}") from exc
            self._images[name] = (paths, paths.sha256.read_text().split()[0], json.loads(paths.manifest.read_text()))
        self._select(self._wanted[0])
        self.accel = image.host_accel()
        self.aio = "io_uring" if qemu_supports_io_uring(self.workdir) else "threads"
        if self.aio != "io_uring":
            log.warning("this QEMU cannot use aio=io_uring: data disks use aio=threads")
        self._host = hostinfo.describe(self.workdir, **self.host_software())

    def _select(self, name: str) -> None:
        """Make image ``name`` (prepared) the one runs boot and results describe."""
        self._image, self._sha256, self._manifest = self._images[name]

    @property
    def device_source(self) -> str:
        # "virtio" (image files) as the vagrant backend says it; "block" as the host backend says it.
        return "block" if self.devices else "virtio"

    @property
    def boot_allowance(self) -> float:
        return self._allowance if self._allowance is not None else BOOT_ALLOWANCE_S.get(self.accel, 300.0)

    def environment(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "accel": self.accel,
            "device_source": self.device_source,
            "image_name": self._image.name if self._image else None,
            "image_sha256": self._sha256 or None,
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
        name = f"fsmatrix-{launch.cell.id}-r{launch.repeat}"
        prepared = self.kernel_of(launch.cell)
        boot = prepared.boot() if prepared is not None else None
        if launch.template is None:
            return self._vm_command(launch.cell, launch.overlay, launch.console, qmp, name, self.drives(launch), boot)
        cmd = self._vm_command(launch.cell, launch.overlay, launch.console, qmp, name, (), boot)
        for index, disk in enumerate(self.drives(launch)):
            cmd += cmdline.disk_backend(disk, index)
        return cmd + snapshot.restore_arguments(launch.template)

    def _vm_command(
        self,
        cell: MatrixCell,
        overlay: Path,
        console: Path,
        qmp: Path,
        name: str,
        drives: Sequence[Disk],
        boot: cmdline.DirectBoot | None = None,
    ) -> list[str]:
        vm = cell.spec.vm
        return cmdline.qemu_command(
            overlay,
            accel=self.accel,
            name=name,
            serial_log=console,
            memory_mib=vm.memory_mib,
            cpus=vm.cpus,
            drives=drives,
            snapshot=False,  # the overlay takes the writes; the golden image is its read-only backing file
            qmp_socket=qmp,
            boot=boot,
        )

    def template(self, cell: MatrixCell) -> snapshot.Template | None:
        """The saved booted guest this cell's runs restore (made on first use); None when runs boot
        (FSMATRIX_VM_START=boot) or no template could be made (then this run boots, and says so)."""
        assert self._image is not None
        if self.start != "restore":
            return None

        prepared = self.kernel_of(cell)
        boot = prepared.boot() if prepared is not None else None

        def command_for(overlay: Path, console: Path, qmp: Path) -> list[str]:
            return self._vm_command(cell, overlay, console, qmp, "fsmatrix-template", (), boot)

        placeholder = Path("/template")
        qemu = str((self._host or {}).get("qemu_version") or "")  # read once, when the backend was prepared
        # A vm.kernel's files by content (its digests), not by path: the key's command has placeholders.
        stand_in = None
        if boot is not None:
            stand_in = cmdline.DirectBoot(placeholder, placeholder, boot.append, boot.modules_disk and placeholder)
        key_command = self._vm_command(cell, placeholder, placeholder, placeholder, "fsmatrix-template", (), stand_in)
        digests = prepared.digests if prepared is not None else None
        key = snapshot.template_key(key_command, self._sha256, qemu, digests)
        try:
            return snapshot.ensure_template(
                image.cache_root(),
                key,
                self._image.qcow2,
                command_for,
                self._echo,
                kernel=prepared.directory if prepared is not None else None,
            )
        except (RuntimeError, OSError, proc.CommandError) as exc:
            log.warning("cannot save a booted guest to restore (%s): this run boots", exc)
            return None

    def run(self, cell: MatrixCell, repeat: int) -> dict[str, Any]:
        if cell.spec.image not in self._images:  # run() without preflight, or a cell it did not see
            self._wanted = [*self._wanted, cell.spec.image]
            self._prepare()
        self._select(cell.spec.image)
        assert self._image is not None
        run_dir = self.workdir / f"vm-{cell.id}-r{repeat}-{os.getpid()}"
        started, started_at = time.monotonic(), _now()
        vm_info = {"cpus": cell.spec.vm.cpus, "memory": cell.spec.vm.memory, "start": self.start}
        with contextlib.ExitStack() as claims:
            try:
                self._claim_devices(claims)
            except storage.UnsafeDevice as exc:
                return self._host_result(cell, repeat, started, started_at, "error", str(exc), "", vm_info)
            try:
                # Locked while the run lives: a later fsmatrix reaps it (a QEMU left running, its disks) if we die.
                with workdirs.run_directory(self.workdir, run_dir.name) as locked_dir:
                    return self._run_claimed(cell, repeat, locked_dir, started, started_at, vm_info)
            except (proc.CommandError, OSError, ValueError, RuntimeError) as exc:
                # A host-side failure (qemu-img, the job disk, a data disk file): this run failed, the matrix goes on.
                log.debug("run failed on the host:\n%s", traceback.format_exc())
                reason = f"host side of the run failed: {type(exc).__name__}: {exc}"
                return self._host_result(cell, repeat, started, started_at, "error", reason, "", vm_info)

    def _claim_devices(self, claims: contextlib.ExitStack) -> None:
        """Before every run: hold each passthrough block device open with O_EXCL for the VM's whole
        life (the kernel then refuses any mount, mkfs, md or swap on it by anyone else; QEMU's own
        open, without O_EXCL, still works) and check it again, by device number, as in preflight."""
        for device in self.devices:
            if Path(device).is_file():
                continue
            expected = self._resolved.get(device) or storage.resolve(device)
            storage.check_safe_to_format(device, expected)  # every reason, before the claim hides them
            claims.enter_context(storage.held_exclusive(expected))

    def _run_claimed(
        self, cell: MatrixCell, repeat: int, run_dir: Path, started: float, started_at: str, vm_info: dict[str, Any]
    ) -> dict[str, Any]:
        assert self._image is not None
        try:
            before_template = time.monotonic()
            template = self.template(cell)  # saved on first use: a one-off cost, kept out of vm_wall_s
            vm_started = time.monotonic()
            vm_info["start"] = "boot" if template is None else "restore"
            data = self._data_disks(cell, run_dir)
            job_doc = self.job_document(cell, repeat, data, vm_info)
            side = host_side(cell)
            side.extra_disks(cell, run_dir, create=True)
            limit = self.time_limit(cell)
            # The crash mode's VMs before the run's own (one whose power is cut): then this one recovers.
            before = side.before_run(VmRun(self, cell, repeat, run_dir, template, data, job_doc, limit))
            if isinstance(before, NotCrashed):  # the run's result, made on the host
                not_crashed = self._host_result(
                    cell, repeat, started, started_at, before.status, before.reason, before.tail, vm_info
                )
                not_crashed["crash"] = before.crash
                return not_crashed
            recovering = isinstance(before, Recover)
            if isinstance(before, Recover):
                job_doc = {**job_doc, "phase": "recover", "crash": before.crash, "host_time": time.time()}
            launch = self.launch(cell, repeat, run_dir, template, data, job_doc, "recover" if recovering else "run")
            code = self.boot_and_wait(launch, limit)
            console, job_disk = launch.console, launch.job_disk
            if code is None:
                tail = console_tail(console)
                log.info("guest console (tail):\n%s", tail)
                return self._host_result(
                    cell, repeat, started, started_at, "timeout",
                    f"the guest did not power off within {limit:.0f} s (timeout {cell.spec.timeout} s "
                    f"+ boot allowance {self.boot_allowance:.0f} s){' in the recover phase' if recovering else ''}; "
                    f"console tail:\n{tail}",
                    tail, vm_info,
                )  # fmt: skip
            wall = time.monotonic() - vm_started
            log.info("guest powered off after %.1f s (qemu exit status %d)", wall, code)
            agent_log = jobdisk.read_log(job_disk)
            log.info("guest agent.log:\n%s", agent_log or "(none)")
            log.info("guest console:\n%s", console.read_text(encoding="utf-8", errors="replace").replace("\r", ""))
            doc = jobdisk.read_result(job_disk)
            if doc is None:
                tail = console_tail(console)
                why = (
                    f"the VM exited with status {code}: {self.vm_error(run_dir)}"
                    if code
                    else "the guest powered off without a result"
                )
                # A vm.kernel guest that never started says why in one line (its /init, or a panic).
                said = kernel_boot.guest_error(console.read_text(encoding="utf-8", errors="replace"))
                if said and cell.spec.vm.kernel:
                    why = f"the guest did not start with vm.kernel {cell.spec.vm.kernel!r}: {said}"
                return self._host_result(
                    cell, repeat, started, started_at, "error", f"{why}; console tail:\n{tail}", tail, vm_info
                )
            self._add_provenance(doc, vm_info, cell)
            doc.setdefault("details", {})["vm_wall_s"] = round(wall, 1)
            if isinstance(before, Recover):
                doc["details"].update(before.details)
            if vm_started - before_template > 1.0:
                doc["details"]["template_s"] = round(vm_started - before_template, 1)
            if self.boot_to_agent_s is not None:
                doc["details"]["boot_to_agent_s"] = round(self.boot_to_agent_s, 1)
            return doc
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

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
            "environment": {**self.environment(), "vm": vm_info, **host_side(cell).job_environment(cell)},
            "reference": job.reference_for(cell.spec),  # computed here, not in the guest's time
            # A restored guest's clock stopped when its template was saved: the agent sets it from this.
            "host_time": time.time(),
        }

    def launch(
        self,
        cell: MatrixCell,
        repeat: int,
        run_dir: Path,
        template: snapshot.Template | None,
        data: list[Disk],
        job_doc: dict[str, Any],
        phase: str,
    ) -> Launch:
        """A VM of the run, ready to boot: a fresh root overlay and job disk; ``data`` as they are."""
        assert self._image is not None
        suffix = "" if phase == "run" else f"-{phase}"
        overlay = run_dir / f"root{suffix}.qcow2"
        backing = self._image.qcow2 if template is None else template.overlay  # the disk the saved memory expects
        proc.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(backing), "-F", "qcow2", str(overlay)],
            timeout=60,
        )
        job_disk = jobdisk.make_job_disk(run_dir / f"job{suffix}.img", job_doc)
        return Launch(cell, repeat, run_dir, overlay, job_disk, data, run_dir / f"console{suffix}.log", template)

    def drives(self, launch: Launch) -> list[Disk]:
        """The job disk, then the data disks (the root disk is the overlay), then the crash mode's
        extra disks."""
        job_disk = Disk(launch.job_disk, jobdisk.SERIAL, aio=self.aio, iothread=False)
        return [job_disk, *launch.data, *host_side(launch.cell).extra_disks(launch.cell, launch.run_dir)]

    def time_limit(self, cell: MatrixCell) -> float:
        """Seconds a run's VM may take: the cell's timeout (as many times as its crash mode's host
        side says: once more for each recovery the guest runs) plus the boot allowance."""
        return float(cell.spec.timeout) * host_side(cell).timeouts(cell) + self.boot_allowance

    def boot_and_wait(self, launch: Launch, limit: float, cut: Cut | None = None) -> int | None:
        """Boot the run's VM and wait for it to power off: QEMU's exit status, or None when it was
        stopped after ``limit`` seconds; with ``cut``, killed ``cut.after_s`` after the measured part
        began (``cut.fired_at_s`` records when). No VM outlives this call, whatever happens (Ctrl-C included).
        The libvirt backend overrides this; everything around it is shared."""
        run_dir, console = launch.run_dir, launch.console
        qmp = snapshot.socket_path(str(launch.overlay))
        cmd = self.command(launch, qmp)
        log.info("qemu: %s", " ".join(cmd))
        vm: subprocess.Popen[bytes] | None = None
        self.boot_to_agent_s = None
        try:
            with (run_dir / "qemu.stderr").open("wb") as stderr:
                started = time.monotonic()
                vm = subprocess.Popen(
                    [*parent_death_prefix(), *cmd], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
                )
            if launch.template is not None:
                self._resume_restored(launch, vm, qmp)
            watcher = ConsoleWatcher(console, AGENT_MARKER)
            cut_after = cut.after_s if cut is not None else None
            if cut is not None:
                cut.fired_at_s = None
            measure = ConsoleWatcher(console, crash.MEASURE_START_MARKER.encode()) if cut_after is not None else None
            measure_seen: float | None = None
            while (code := vm.poll()) is None:
                now = time.monotonic()
                if measure is not None and cut is not None and cut_after is not None:
                    if measure_seen is None and measure.seen():
                        measure_seen = now
                        log.info("the cut: the measured part began; cutting in %g s", cut_after)
                    if measure_seen is not None and now - measure_seen >= cut_after:
                        # The cut: no QMP quit, no flush; what the guest had not written is lost.
                        vm.send_signal(signal.SIGKILL)
                        code = vm.wait()
                        cut.fired_at_s = round(now - measure_seen, 3)
                        return code
                if now - started >= limit:
                    self._stop(vm, qmp)
                    return None
                if self.boot_to_agent_s is None and watcher.seen():
                    self.boot_to_agent_s = now - started
                pause = CONSOLE_POLL_S if measure_seen is None else CUT_POLL_S  # the cut lands close to after_s
                time.sleep(min(pause, max(0.0, limit - (now - started))))
            if self.boot_to_agent_s is None and watcher.seen():  # the marker came in the last poll interval
                self.boot_to_agent_s = time.monotonic() - started
            return code
        finally:
            if vm is not None and vm.poll() is None:
                vm.kill()  # an exception on the way: no QEMU may outlive its run
                vm.wait()
            qmp.unlink(missing_ok=True)

    def _resume_restored(self, launch: Launch, vm: subprocess.Popen[bytes], qmp: Path) -> None:
        """A restored guest: plug in the data disks, then the job disk (which starts the job), and resume."""
        drives = self.drives(launch)
        order = [*range(1, len(drives)), 0]  # the job disk comes first in drives(): plug it last
        ordered = [device for index in order for device in cmdline.disk_devices(drives[index], index)]
        monitor = snapshot.connect(qmp, vm)
        try:
            snapshot.attach_and_resume(monitor, vm, ordered)
        finally:
            snapshot.close(monitor)

    def vm_error(self, run_dir: Path) -> str:
        """What the VM process said when it failed (QEMU's stderr)."""
        return (run_dir / "qemu.stderr").read_text(errors="replace").strip()

    def _data_disks(self, cell: MatrixCell, run_dir: Path) -> list[Disk]:
        """The cell's data disks: fresh image files in ``run_dir``, or the passthrough devices."""
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
                with path.open("wb") as fh:
                    if preallocate:
                        os.posix_fallocate(fh.fileno(), 0, size)
                    else:
                        fh.truncate(size)
            disks.append(
                Disk(
                    path,
                    DATA_SERIAL.format(index),
                    bus=device.bus,
                    cache=cache,
                    # io_uring falls back where this QEMU lacks it
                    aio=self.aio if device.aio == "io_uring" else device.aio,
                    iothread=device.iothread,
                    logical_block_size=device.logical_block_size,
                    physical_block_size=device.physical_block_size,
                    throttle=throttle,
                )
            )
        return disks

    def _stop(self, vm: subprocess.Popen[bytes], qmp: Path) -> None:
        """QMP quit, then SIGKILL when QEMU does not exit within QUIT_GRACE_S."""
        try:
            monitor = QEMUMonitorProtocol(str(qmp))
            monitor.settimeout(QMP_CONNECT_S)
            try:
                monitor.connect()
                monitor.cmd("quit")
            finally:
                snapshot.close(monitor)
            vm.wait(timeout=QUIT_GRACE_S)
            log.info("qemu stopped with QMP quit")
        except Exception as exc:  # a QMP, socket or wait failure alike: kill it
            log.warning("QMP quit did not stop qemu (%s): killing it", exc)
            if vm.poll() is None:
                vm.send_signal(signal.SIGKILL)
                vm.wait()

    def _image_provenance(self, guest: dict[str, Any] | None) -> dict[str, Any]:
        assert self._image is not None
        return {
            **(guest or provenance.image_summary(self._manifest) or {}),
            "name": self._image.name,
            "sha256": self._sha256,
        }

    def _add_provenance(self, doc: dict[str, Any], vm_info: dict[str, Any], cell: MatrixCell) -> None:
        prov = doc.setdefault("provenance", {})
        prov.update(backend=self.name, accel=self.accel, device_source=self.device_source, vm=vm_info)
        prov["host"] = self._host  # the host's own view; whatever the guest was told is replaced
        prov["image"] = self._image_provenance(prov.get("image"))
        prepared = self._kernels.get((cell.spec.vm.kernel, cell.spec.vm.modules))
        if prepared is not None:  # the kernel the guest booted: its file's sha256 and its release
            prov["kernel_source"] = prepared.source

    def _host_result(
        self,
        cell: MatrixCell,
        repeat: int,
        started: float,
        started_at: str,
        status: str,
        reason: str,
        tail: str,
        vm_info: dict[str, Any],
    ) -> dict[str, Any]:
        """A result document made on the host, for a run whose guest produced none."""
        doc = job.result_document(
            job.CellRepeat(cell.spec, cell.id, repeat),
            status=status,
            reason=reason,
            started_at=started_at,
            provenance={"fsmatrix_version": __version__, "git": provenance.git_source()},
        )
        doc.update(finished_at=_now(), duration_s=round(time.monotonic() - started, 3), details={"console_tail": tail})
        self._add_provenance(doc, vm_info, cell)
        return doc
