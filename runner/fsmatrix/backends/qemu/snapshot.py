"""Start a run's guest by restoring a booted one instead of booting it (the qemu backend's default).

Booting the image under TCG takes 20-40 s; restoring the state of a guest that has finished
booting takes well under a second, and the guest then only has to notice the run's disks. So, once
per image and VM size, a *template* guest is booted with no data or job disk, left to finish
booting (its serial console shows the login prompt), paused, and saved with QEMU's ``migrate`` to
a file; its root overlay is frozen beside it. Every run then:

- gets a fresh overlay on that frozen overlay (the disk the saved memory expects, and writes of its
  own that no sibling sees);
- starts QEMU with the template's exact device set plus ``-incoming`` from the state file, the
  run's disk images attached as block backends only (they are not part of the saved state);
- hot-plugs the data disks and then the job disk (``device_add``; the guest's udev rule starts the
  job service when the job disk appears) and resumes the guest.

Every restore is independent: the guest's page cache holds only root-disk files (the same for every
run); the data disks are new to it; QEMU's ``vmgenid`` device gives each restored guest a new
generation id, so its kernel reseeds its random number generator; the agent sets the guest clock from
the job (it stopped when the template was saved). Results say how their guest started:
``provenance.vm.start`` (boot or restore), which ``compare`` treats as part of the environment.

``FSMATRIX_VM_START=boot`` boots every run as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qemu.qmp.legacy import QEMUMonitorProtocol

from fsmatrix.agent import proc
from fsmatrix.backends import image
from fsmatrix.backends.qemu import kernel_boot
from fsmatrix.errors import UserError

log = logging.getLogger("fsmatrix")

START_ENV = "FSMATRIX_VM_START"
STARTS = ("restore", "boot")
SNAPSHOT_DIR = "snapshots"
FORMAT = 1  # bump when what a template holds changes: older ones are then not found
# The serial getty's prompt: systemd has started everything the image starts at boot.
READY_MARKER = b"login:"
SETTLE_S = 2.0  # after the prompt: let the last boot-time units finish before the state is saved
TEMPLATE_BOOT_S = 600.0
MIGRATE_S = 120.0
QMP_CONNECT_S = 10.0
POLL_S = 0.02


def socket_path(tag: str) -> Path:
    """A path for a QMP socket that fits AF_UNIX's 108 bytes whatever the work directory's length
    (a run directory named after a long cell id under a long --workdir does not)."""
    digest = hashlib.sha256(tag.encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / f"fsmatrix-qmp-{os.getpid()}-{next(_SOCKETS)}-{digest}.sock"


_SOCKETS = itertools.count()


def start_mode() -> str:
    """How the qemu backend starts a run's guest: restore (the default) or boot."""
    mode = os.environ.get(START_ENV, "restore").strip() or "restore"
    if mode not in STARTS:
        raise UserError(f"{START_ENV}={mode!r}: use one of {', '.join(STARTS)}")
    return mode


@dataclass(frozen=True)
class Template:
    """A booted guest saved for restoring: its frozen root overlay and its memory and device state."""

    directory: Path
    key: str

    @property
    def overlay(self) -> Path:
        return self.directory / "root.qcow2"

    @property
    def state(self) -> Path:
        return self.directory / "state"

    @property
    def done(self) -> Path:
        return self.directory / "template.json"

    def complete(self) -> bool:
        return self.done.exists() and self.overlay.exists() and self.state.exists()


def prune_orphans(cache: Path) -> list[Path]:
    """Delete the saved guests whose image (or vm.kernel's prepared directory) is gone (``fsmatrix
    image prune`` deleted it, or a cache was moved): nothing can restore them, and each holds its
    guest's memory (about 200 MiB). A template being saved (``.building``, locked) is left alone.
    Returns the deleted directories."""
    deleted = []
    for done in sorted((cache / SNAPSHOT_DIR).glob("*/template.json")):
        if done.parent.name.endswith(".building"):
            continue
        try:
            record = json.loads(done.read_text())
            needed = [Path(record["image"])]
            if record.get("kernel"):  # a vm.kernel's saved guest: its prepared kernel too
                needed.append(Path(record["kernel"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: not ours to judge
        if not all(path.exists() for path in needed):
            shutil.rmtree(done.parent, ignore_errors=True)
            done.parent.with_name(f"{done.parent.name}.lock").unlink(missing_ok=True)
            deleted.append(done.parent)
    return deleted


def template_key(
    command: Sequence[str], image_sha256: str, qemu_version: str, kernel: dict[str, str] | None = None
) -> str:
    """What a saved state depends on: the image, QEMU's version and the VM's command line (machine,
    CPU, memory, devices; made with fixed placeholder paths), and with ``vm.kernel`` the sha256 of
    each file the guest boots from (kernel, initramfs, modules disk): its content, not its path,
    so a kernel rebuilt at the same path gets a guest of its own."""
    doc: dict[str, Any] = {"format": FORMAT, "image": image_sha256, "qemu": qemu_version, "command": list(command)}
    if kernel is not None:  # absent otherwise: the saved guests of the image's own kernel keep their keys
        doc["kernel"] = dict(sorted(kernel.items()))
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:16]


def connect(qmp: Path, vm: subprocess.Popen[bytes], timeout: float = QMP_CONNECT_S) -> QEMUMonitorProtocol:
    """A QMP connection to a QEMU just started (its socket appears once it has parsed its options)."""
    deadline = time.monotonic() + timeout
    # qemu.qmp logs every refused attempt as an error: until the socket is there, that is expected.
    quiet = logging.getLogger("qemu.qmp")
    level, quiet.level = quiet.level, logging.CRITICAL
    try:
        return _connect(qmp, vm, deadline, timeout)
    finally:
        quiet.setLevel(level)


def close(monitor: QEMUMonitorProtocol) -> None:
    """Close a QMP connection. When QEMU has exited (a quit, a crash), its end of the socket is
    gone and the library's reader raises EOFError or a reset here: nothing the caller asked failed."""
    with contextlib.suppress(EOFError, OSError):
        monitor.close()


def _connect(qmp: Path, vm: subprocess.Popen[bytes], deadline: float, timeout: float) -> QEMUMonitorProtocol:
    while True:
        monitor = QEMUMonitorProtocol(str(qmp))
        try:
            monitor.connect()
            return monitor
        except Exception as exc:  # not listening yet (qemu.qmp raises its own ConnectError)
            close(monitor)
            if vm.poll() is not None:
                raise RuntimeError(f"QEMU exited with status {vm.returncode} before its monitor answered") from exc
            if time.monotonic() >= deadline:
                raise RuntimeError(f"QEMU's monitor did not answer within {timeout:.0f} s") from exc
            time.sleep(POLL_S)


def _status(monitor: QEMUMonitorProtocol, query: str) -> str:
    """The "status" field of a query-status or query-migrate answer ("" when absent)."""
    answer = monitor.cmd(query)
    return str(answer.get("status", "")) if isinstance(answer, dict) else ""


def _wait(predicate: Any, timeout: float, what: str, vm: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if vm.poll() is not None:
            raise RuntimeError(f"QEMU exited with status {vm.returncode} while {what}")
        if time.monotonic() >= deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s {what}")
        time.sleep(POLL_S)


def ensure_template(
    cache: Path, key: str, image_qcow2: Path, command_for: Any, echo: Any = log.info, kernel: Path | None = None
) -> Template:
    """The template for ``key``, booted and saved first if there is none.

    ``command_for(overlay, console, qmp)`` gives the QEMU command line of the template's VM (the
    same devices every run restores into). Concurrent callers wait for one another (a lock file).
    ``kernel``: the prepared vm.kernel's directory the guest boots from (recorded for pruning)."""
    root = cache / SNAPSHOT_DIR
    template = Template(root / key, key)
    with image.locked(root / f"{key}.lock"):
        if template.complete():
            return template
        building = root / f"{key}.building"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        try:
            echo(f"saving a booted guest for restoring runs (once per image and VM size): {template.directory}")
            started = time.monotonic()
            _save(building, image_qcow2, command_for)
            record: dict[str, Any] = {
                "key": key,
                "image": str(image_qcow2),
                "boot_and_save_s": round(time.monotonic() - started, 1),
            }
            if kernel is not None:
                record["kernel"] = str(kernel)
            (building / "template.json").write_text(json.dumps(record) + "\n")
            shutil.rmtree(template.directory, ignore_errors=True)
            building.rename(template.directory)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return template


def single_threaded(command: Sequence[str]) -> list[str]:
    """``command`` with multi-threaded TCG (QEMU's default for ``-accel tcg``) made single-threaded.

    For the template's boot only: a kernel patches its own code at boot (static keys, through an int3)
    while another vCPU may be running it, and with one host thread per vCPU a 6.12 kernel oopsed at
    that point in 2 of 130 boots here, never single-threaded (docs/measurements.md). The saved state
    does not record the threading, so runs restore it multi-threaded, past the boot. KVM is unchanged."""
    out = list(command)
    for index in range(len(out) - 1):
        if out[index] == "-accel" and out[index + 1] == "tcg":
            out[index + 1] = "tcg,thread=single"
    return out


def _save(directory: Path, image_qcow2: Path, command_for: Any) -> None:
    overlay, console, qmp = directory / "root.qcow2", directory / "console.log", socket_path(str(directory))
    create = ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(image_qcow2), "-F", "qcow2", str(overlay)]
    proc.run(create, timeout=60)
    cmd = single_threaded(command_for(overlay, console, qmp))
    log.info("template qemu: %s", " ".join(cmd))
    with (directory / "qemu.stderr").open("wb") as stderr:
        vm = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        try:
            _wait(lambda: console.exists() and READY_MARKER in console.read_bytes(), TEMPLATE_BOOT_S, "booting", vm)
        except RuntimeError as exc:  # a vm.kernel's guest says in one line why it did not start
            why = kernel_boot.guest_error(console.read_text(errors="replace")) if console.exists() else None
            raise RuntimeError(f"{exc}: {why}" if why else str(exc)) from exc
        time.sleep(SETTLE_S)
        monitor = connect(qmp, vm)
        try:
            monitor.cmd("stop")
            monitor.cmd("migrate-set-parameters", **{"max-bandwidth": 1 << 40})  # default: 128 MiB/s
            monitor.cmd("migrate", uri=f"exec:cat > {shlex.quote(str(directory / 'state'))}")

            def migrated() -> bool:
                status = _status(monitor, "query-migrate")
                if status in ("failed", "cancelled"):
                    raise RuntimeError(f"saving the guest's state failed: migration {status}")
                return status == "completed"

            _wait(migrated, MIGRATE_S, "saving the guest's state", vm)
            monitor.cmd("quit")
        finally:
            close(monitor)
        vm.wait(timeout=30)
    finally:
        if vm.poll() is None:
            vm.kill()
            vm.wait()
        qmp.unlink(missing_ok=True)


def restore_arguments(template: Template) -> list[str]:
    """What a run's QEMU command line adds to restore ``template`` (paused, to hot-plug its disks)."""
    return ["-incoming", f"exec:cat {shlex.quote(str(template.state))}"]


def attach_and_resume(
    monitor: QEMUMonitorProtocol, vm: subprocess.Popen[bytes], devices: Sequence[dict[str, Any]]
) -> None:
    """Wait for the incoming state, hot-plug ``devices`` (device_add arguments, in order), resume."""

    def loaded() -> bool:
        return _status(monitor, "query-status") != "inmigrate"

    _wait(loaded, MIGRATE_S, "restoring the guest's state", vm)
    status = _status(monitor, "query-status")
    if status != "paused":
        raise RuntimeError(f"the restored guest is {status!r}, not paused (a damaged saved state?)")
    for device in devices:
        monitor.cmd("device_add", **device)
    monitor.cmd("cont")
