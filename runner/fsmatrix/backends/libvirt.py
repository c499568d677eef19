"""The libvirt backend: the qemu backend's runs, with each VM a transient libvirt domain.

Everything but booting is shared with QemuBackend (overlay, job disk, data disks, results,
provenance). Each run creates a transient domain with ``createXML`` (no NIC; the serial console
written to the run's console file; on power-off the domain is destroyed, so nothing stays
defined), waits for its lifecycle "stopped" event up to the time limit and destroys it on every
other way out, Ctrl-C included.

The daemons come from fsmatrix.backends.libvirtd: the system's libvirtd when one answers, else fsmatrix's
own in a network namespace, started in preflight and stopped by ``close()`` (also registered with
atexit, so an interrupted run stops them too).

QEMU runs as root with ``relabel='no'``, as the qemu backend's QEMU does: libvirt then neither
chowns the disk files (the golden image is shared by concurrent runs) nor needs the run
directory to be readable by libvirt-qemu, and qemu.conf stays as the distribution ships it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsmatrix.agent import crash
from fsmatrix.backends import libvirtd
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu.backend import QemuBackend
from fsmatrix.backends.qemu.console import ConsoleWatcher
from fsmatrix.backends.qemu.crash_host import Cut, Launch
from fsmatrix.backends.qemu.host_sides import HOST_SIDES
from fsmatrix.backends.qemu.process import AGENT_MARKER, CONSOLE_POLL_S
from fsmatrix.errors import UserError
from fsmatrix.matrix import MatrixCell

log = logging.getLogger("fsmatrix")

EMULATOR = "/usr/bin/qemu-system-x86_64"
QEMU_LOG_DIR = Path("/var/log/libvirt/qemu")
NAME_MAX = 200  # libvirt takes longer names, but paths derived from the name get unwieldy
ERROR_FILE = "libvirt.log"  # in the run directory: why the VM stopped, for vm_error
LOG_TAIL_LINES = 20
STATE_POLL_S = 2.0  # how often the wait also asks for the domain's state, should an event go missing

# QEMU's -drive throttling.<key> (Disk.throttle) -> libvirt's <iotune> element.
IOTUNE = {
    "bps-total": "total_bytes_sec",
    "bps-read": "read_bytes_sec",
    "bps-write": "write_bytes_sec",
    "iops-total": "total_iops_sec",
    "iops-read": "read_iops_sec",
    "iops-write": "write_iops_sec",
    "bps-total-max": "total_bytes_sec_max",
    "bps-read-max": "read_bytes_sec_max",
    "bps-write-max": "write_bytes_sec_max",
    "iops-total-max": "total_iops_sec_max",
    "iops-read-max": "read_iops_sec_max",
    "iops-write-max": "write_iops_sec_max",
    "bps-total-max-length": "total_bytes_sec_max_length",
    "bps-read-max-length": "read_bytes_sec_max_length",
    "bps-write-max-length": "write_bytes_sec_max_length",
    "iops-total-max-length": "total_iops_sec_max_length",
    "iops-read-max-length": "read_iops_sec_max_length",
    "iops-write-max-length": "write_iops_sec_max_length",
    "iops-size": "size_iops_sec",
}
# Disk.bus -> libvirt target bus and device-name prefix.
BUSES = {"virtio-blk": ("virtio", "vd"), "virtio-scsi": ("scsi", "sd"), "nvme": ("nvme", "nvme")}


def domain_name(cell: MatrixCell, repeat: int, pid: int | None = None) -> str:
    """``fsmatrix-<cell id>-r<repeat>-<pid>``: the pid keeps concurrent fsmatrix runs apart."""
    suffix = f"-r{repeat}-{os.getpid() if pid is None else pid}"
    return f"fsmatrix-{cell.id}"[: NAME_MAX - len(suffix)] + suffix


def _device_name(prefix: str, index: int) -> str:
    """vda, vdb, ..., vdz, vdaa, ... (nvme: nvme0n1, nvme1n1, ...)."""
    if prefix == "nvme":
        return f"nvme{index}n1"
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("a") + rest) + letters
    return prefix + letters


def iotune(throttle: dict[str, int]) -> dict[str, int]:
    """Disk.throttle (QEMU's throttling keys) as libvirt <iotune> elements."""
    unknown = sorted(set(throttle) - set(IOTUNE))
    if unknown:
        raise UserError(f"the libvirt backend cannot express QEMU throttling {', '.join(unknown)}")
    return {IOTUNE[key]: value for key, value in throttle.items()}


def check_buses(cells: list[MatrixCell], buses: set[str], version: str) -> None:
    """Refuse cells whose disk bus this libvirt cannot attach (``buses``: its domain capabilities'
    disk bus values; libvirt 9.0 has no nvme disks)."""
    wanted = {cell.spec.device.bus for cell in cells}
    for bus in sorted(wanted):
        target = BUSES.get(bus, (bus, ""))[0]
        if target not in buses:
            users = [cell.id for cell in cells if cell.spec.device.bus == bus]
            more = " ..." if len(users) > 5 else ""
            raise UserError(
                f"libvirt {version} cannot attach {bus} disks (its disk buses here: {', '.join(sorted(buses))}), "
                f"which cells {', '.join(users[:5])}{more} use: run them with --backend qemu"
            )


@dataclass(frozen=True, kw_only=True)
class Domain:
    """One run's transient domain: ``overlay`` (qcow2) boots; ``disks`` (job disk, then data disks)
    follow; the serial console goes to ``console``."""

    name: str
    accel: str
    cpus: int
    memory_mib: int
    overlay: Path
    disks: list[Disk]
    console: Path
    emulator: str = EMULATOR


def domain_xml(domain: Domain) -> str:
    """The domain's XML: the disks with their serials, cache/io/iothread, block sizes, throttling and bus."""
    root = _machine(domain)
    devices = ET.SubElement(root, "devices")
    ET.SubElement(devices, "emulator").text = domain.emulator
    _root_disk(devices, domain.overlay)
    _disks(devices, domain.disks)
    serial = ET.SubElement(devices, "serial", type="file")
    ET.SubElement(serial, "source", path=str(domain.console))
    ET.SubElement(serial, "target", port="0")
    # No NIC, no USB, no balloon: only what the run needs (libvirt adds PS/2 on "pc" regardless).
    ET.SubElement(devices, "controller", type="usb", model="none")
    ET.SubElement(devices, "memballoon", model="none")
    # QEMU as root, files left as they are (see the module docstring).
    seclabel = ET.SubElement(root, "seclabel", type="static", model="dac", relabel="no")
    ET.SubElement(seclabel, "label").text = "+0:+0"
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")


def _machine(domain: Domain) -> ET.Element:
    """The domain element with its name, size, CPU and what it does on power-off."""
    accel, disks = domain.accel, domain.disks
    root = ET.Element("domain", type="kvm" if accel == "kvm" else "qemu")
    ET.SubElement(root, "name").text = domain.name
    ET.SubElement(root, "memory", unit="MiB").text = str(domain.memory_mib)
    ET.SubElement(root, "vcpu").text = str(domain.cpus)
    # libvirt has iothreads for virtio-blk disks and virtio-scsi controllers only.
    iothreads = sum(1 for disk in disks if disk.iothread and disk.bus in ("virtio-blk", "virtio-scsi"))
    if iothreads:
        ET.SubElement(root, "iothreads").text = str(iothreads)
    os_el = ET.SubElement(root, "os")
    ET.SubElement(os_el, "type", arch="x86_64", machine="pc").text = "hvm"
    features = ET.SubElement(root, "features")
    ET.SubElement(features, "acpi")
    # TCG: every feature QEMU can emulate (qemu's -cpu max); KVM: the host's CPU.
    if accel == "kvm":
        ET.SubElement(root, "cpu", mode="host-passthrough")
    else:
        ET.SubElement(root, "cpu", mode="maximum", check="none")
    ET.SubElement(root, "on_poweroff").text = "destroy"
    ET.SubElement(root, "on_reboot").text = "destroy"  # QEMU's -no-reboot
    ET.SubElement(root, "on_crash").text = "destroy"
    return root


def _root_disk(devices: ET.Element, overlay: Path) -> None:
    root = ET.SubElement(devices, "disk", type="file", device="disk")
    ET.SubElement(root, "driver", name="qemu", type="qcow2", cache="unsafe", discard="unmap")
    ET.SubElement(root, "source", file=str(overlay))
    ET.SubElement(root, "target", dev="vda", bus="virtio")
    ET.SubElement(root, "boot", order="1")  # SeaBIOS must boot the root disk, never a data disk


def _disks(devices: ET.Element, disks: list[Disk]) -> None:
    """Each disk on its bus, after the root disk (vda)."""
    counters = {"virtio": 1, "scsi": 0, "nvme": 0}  # vda is the root disk
    iothread = 0
    for disk in disks:
        if disk.bus not in BUSES:
            raise UserError(f"the libvirt backend has no disk bus {disk.bus!r} (known: {', '.join(BUSES)})")
        bus, prefix = BUSES[disk.bus]
        index = counters[bus]
        counters[bus] += 1
        element = ET.SubElement(devices, "disk", type="block" if disk.path.is_block_device() else "file", device="disk")
        driver = {"name": "qemu", "type": disk.format, "cache": disk.cache, "io": disk.aio}
        if bus == "scsi":  # a virtio-scsi controller per disk, so each disk can have an iothread of its own
            controller = ET.SubElement(devices, "controller", type="scsi", index=str(index), model="virtio-scsi")
            if disk.iothread:
                iothread += 1
                ET.SubElement(controller, "driver", iothread=str(iothread))
        elif bus == "virtio" and disk.iothread:
            iothread += 1
            driver["iothread"] = str(iothread)
        ET.SubElement(element, "driver", driver)
        _disk_parts(element, disk, _device_name(prefix, index), bus)
        if bus == "scsi":
            ET.SubElement(element, "address", type="drive", controller=str(index), bus="0", target="0", unit="0")


def _disk_parts(element: ET.Element, disk: Disk, dev: str, bus: str) -> None:
    """A disk's source, target, serial, block sizes and throttling."""
    ET.SubElement(element, "source", {"dev" if element.get("type") == "block" else "file": str(disk.path)})
    ET.SubElement(element, "target", dev=dev, bus=bus)
    ET.SubElement(element, "serial").text = disk.serial
    ET.SubElement(
        element,
        "blockio",
        logical_block_size=str(disk.logical_block_size),
        physical_block_size=str(disk.physical_block_size),
    )
    tune = iotune(disk.throttle)
    if tune:
        tune_el = ET.SubElement(element, "iotune")
        for key, value in sorted(tune.items()):
            ET.SubElement(tune_el, key).text = str(value)


_event_loop_lock = threading.Lock()
_event_loop_running = False


def _start_event_loop(libvirt: Any) -> None:
    """libvirt delivers domain events only while its event loop runs: one thread per process,
    registered before the first connection is opened."""
    global _event_loop_running
    with _event_loop_lock:
        if _event_loop_running:
            return
        libvirt.virEventRegisterDefaultImpl()

        def loop() -> None:
            while True:
                libvirt.virEventRunDefaultImpl()

        threading.Thread(target=loop, name="libvirt-events", daemon=True).start()
        _event_loop_running = True


class LibvirtBackend(QemuBackend):
    name = "libvirt"
    # The crash modes that need nothing from the host: those with a host side are the qemu backend's only, for now.
    crash_modes = tuple(name for name in crash.MODES if name not in HOST_SIDES)
    own_kernel = False  # vm.kernel: the qemu backend's only, for now

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start = "boot"  # libvirt boots every run's domain; restoring is the qemu backend's
        self._stack = contextlib.ExitStack()
        self._conn: Any = None
        self._daemons: libvirtd.Daemons | None = None
        self._libvirt_version: str | None = None
        self._buses: set[str] = set()

    # ------------------------------------------------------------------ setup

    def preflight(self, cells: list[MatrixCell]) -> None:
        super().preflight(cells)  # its _prepare connects (below)
        check_buses(cells, self._buses, self._libvirt_version or "?")

    def _prepare(self) -> None:
        super()._prepare()
        self._connect()  # also when run() comes without preflight: environment() wants the version
        if self._host is not None:
            self._host["libvirt_version"] = self._libvirt_version

    def _connect(self) -> Any:
        """The connection to libvirt, opened (and the daemons started when needed) on first use."""
        if self._conn is not None:
            return self._conn
        libvirt = libvirtd.libvirt_module()
        _start_event_loop(libvirt)
        atexit.register(self.close)
        self._daemons = self._stack.enter_context(libvirtd.running())
        try:
            self._conn = libvirt.open(self._daemons.uri)
        except libvirt.libvirtError as exc:
            self.close()
            raise UserError(f"cannot connect to {self._daemons.uri}: {exc}") from exc
        number = self._conn.getLibVersion()
        self._libvirt_version = f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"
        caps = ET.fromstring(
            self._conn.getDomainCapabilities(EMULATOR, "x86_64", None, "kvm" if self.accel == "kvm" else "qemu")
        )
        self._buses = {value.text or "" for value in caps.findall("./devices/disk/enum[@name='bus']/value")}
        return self._conn

    def close(self) -> None:
        """Close the connection and stop the daemons when this backend started them (idempotent)."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        self._stack.close()

    def environment(self) -> dict[str, Any]:
        env = super().environment()
        env["libvirt_version"] = self._libvirt_version
        return env

    # ------------------------------------------------------------------ one run

    def domain_xml(self, launch: Launch) -> str:
        vm = launch.cell.spec.vm
        return domain_xml(
            Domain(
                name=domain_name(launch.cell, launch.repeat),
                accel=self.accel,
                cpus=vm.cpus,
                memory_mib=vm.memory_mib,
                overlay=launch.overlay,
                disks=self.drives(launch),
                console=launch.console,
            )
        )

    def boot_and_wait(self, launch: Launch, limit: float, cut: Cut | None = None) -> int | None:
        """Create the run's transient domain and wait for it to stop: 0 when the guest powered off,
        1 when it stopped otherwise (crash, QEMU failure), None when destroyed after ``limit`` s.
        No ``cut``: preflight refuses the modes that ask for one (``crash_modes``)."""
        if cut is not None:
            raise RuntimeError("the libvirt backend cannot cut a VM's power")
        libvirt = libvirtd.libvirt_module()
        conn = self._connect()
        run_dir, console = launch.run_dir, launch.console
        name = domain_name(launch.cell, launch.repeat)
        xml = self.domain_xml(launch)
        log.info("libvirt domain:\n%s", xml)
        stopped = threading.Event()
        detail: list[int] = []

        def on_lifecycle(_conn: Any, dom: Any, event: int, event_detail: int, _opaque: Any) -> None:
            if dom.name() == name and event == libvirt.VIR_DOMAIN_EVENT_STOPPED:
                detail.append(event_detail)
                stopped.set()

        callback = conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, on_lifecycle, None)
        errors = run_dir / ERROR_FILE
        try:
            self.boot_to_agent_s = None
            started = time.monotonic()
            try:
                conn.createXML(xml, 0)
            except libvirt.libvirtError as exc:
                errors.write_text(f"libvirt could not start the domain: {exc}\n{self._qemu_log(name)}")
                return 1
            watcher = ConsoleWatcher(console, AGENT_MARKER)
            checked = started
            while not stopped.wait(min(CONSOLE_POLL_S, max(0.0, started + limit - time.monotonic()))):
                now = time.monotonic()
                if self.boot_to_agent_s is None and watcher.seen():
                    self.boot_to_agent_s = now - started
                if now - checked >= STATE_POLL_S:
                    checked = now
                    if not self._exists(conn, name):
                        break  # gone without an event reaching us: treat it as powered off
                if now - started >= limit:
                    log.info("domain %s still runs after %.0f s: destroying it", name, limit)
                    self._destroy(name)
                    return None
            if self.boot_to_agent_s is None and watcher.seen():  # the marker came in the last interval
                self.boot_to_agent_s = time.monotonic() - started
            reasons = {
                libvirt.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN: "powered off",
                libvirt.VIR_DOMAIN_EVENT_STOPPED_DESTROYED: "destroyed",
                libvirt.VIR_DOMAIN_EVENT_STOPPED_CRASHED: "crashed",
                libvirt.VIR_DOMAIN_EVENT_STOPPED_FAILED: "QEMU failed",
            }
            code = detail[0] if detail else libvirt.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN
            if code == libvirt.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN:
                return 0
            errors.write_text(f"the domain stopped: {reasons.get(code, code)}\n{self._qemu_log(name)}")
            return 1
        finally:
            with contextlib.suppress(libvirt.libvirtError):
                conn.domainEventDeregisterAny(callback)
            # A no-op after a power-off; after an exception (Ctrl-C even inside createXML) no VM outlives it.
            self._destroy(name)
            # libvirt keeps a log per domain name, and every run's name is new: what mattered is in
            # ERROR_FILE already, so the log does not pile up.
            with contextlib.suppress(OSError):
                (QEMU_LOG_DIR / f"{name}.log").unlink()

    def vm_error(self, run_dir: Path) -> str:
        """Why the domain did not power off normally (libvirt's error and QEMU's log tail)."""
        try:
            return (run_dir / ERROR_FILE).read_text(errors="replace").strip()
        except OSError:
            return "(no libvirt error recorded)"

    def _exists(self, conn: Any, name: str) -> bool:
        libvirt = libvirtd.libvirt_module()
        try:
            return bool(conn.lookupByName(name).isActive())
        except libvirt.libvirtError:
            return False

    def _destroy(self, name: str) -> None:
        """Destroy the domain when it still exists (a transient domain is then gone for good)."""
        libvirt = libvirtd.libvirt_module()
        conn = self._conn
        if conn is None:
            return
        try:
            dom = conn.lookupByName(name)
        except libvirt.libvirtError:
            return
        try:
            dom.destroy()
            log.info("destroyed domain %s", name)
        except libvirt.libvirtError as exc:
            if self._exists(conn, name):
                log.warning("could not destroy domain %s: %s", name, exc)

    def _qemu_log(self, name: str) -> str:
        """The tail of libvirt's log of the domain's QEMU (its command line and stderr)."""
        try:
            text = (QEMU_LOG_DIR / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])
