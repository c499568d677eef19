"""QEMU's command line: booting an image, and attaching a data disk (its block backend and its devices,
on the command line or hot-plugged)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from fsmatrix.backends.disks import Disk


@dataclass(frozen=True)
class DirectBoot:
    """Boot this kernel (``-kernel``/``-initrd``/``-append``) on the image's root disk instead of
    the image's own (``vm.kernel``; made by backends/qemu/kernel_boot.py), with its modules on a
    read-only disk of their own."""

    kernel: Path
    initrd: Path
    append: str
    modules_disk: Path | None = None
    modules_serial: str = "fsmatrix-modules"

    def arguments(self) -> list[str]:
        cmd = ["-kernel", str(self.kernel), "-initrd", str(self.initrd), "-append", self.append]
        if self.modules_disk is not None:
            cmd += [
                "-drive", f"file={self.modules_disk},if=none,id=modules,format=raw,readonly=on",
                "-device", f"virtio-blk-pci,drive=modules,serial={self.modules_serial}",
            ]  # fmt: skip
        return cmd


@dataclass(frozen=True)
class QemuVm:
    """A VM as QEMU's command line starts it: ``image`` its root disk (qcow2), ``drives`` the extra
    disks (see backends/disks.py). With ``ssh_port`` the guest gets a user-mode NIC that reaches
    nothing outside (restrict=on) and 127.0.0.1:ssh_port forwards to its SSH; without it, no NIC at
    all. ``snapshot`` keeps the image unchanged. ``name`` should contain "fsmatrix" so leftover
    processes can be found. ``qmp_socket``: a QMP server on that unix socket. ``boot``: start this
    kernel, not the image's."""

    image: Path
    _: KW_ONLY
    accel: str
    name: str
    serial_log: Path
    memory_mib: int = 1024
    cpus: int = 2
    ssh_port: int | None = None
    drives: Sequence[Disk] = ()
    snapshot: bool = True
    qmp_socket: Path | None = None
    boot: DirectBoot | None = None


def qemu_command(vm: QemuVm) -> list[str]:
    """The QEMU command line that boots ``vm``."""
    image, boot = vm.image, vm.boot
    cmd = [
        "qemu-system-x86_64", "-name", vm.name, "-accel", vm.accel, "-cpu", "max", "-smp", str(vm.cpus),
        "-m", str(vm.memory_mib), "-display", "none", "-monitor", "none", "-nodefaults", "-no-reboot",
        "-serial", f"file:{vm.serial_log}",
        # bootindex: SeaBIOS boots only the disk it ranks first, which must not be a data disk.
        "-drive", f"file={image},if=none,id=root,format=qcow2,cache=unsafe,discard=unmap"
        + (",snapshot=on" if vm.snapshot else ""),
        # With -kernel, QEMU's own boot ROM starts the kernel: no disk may rank before it.
        "-device", "virtio-blk-pci,drive=root" + (",bootindex=0" if boot is None else ""),
        # A new VM generation id at every start: a guest restored from a saved state reseeds its RNG.
        "-device", "vmgenid,guid=auto",
    ]  # fmt: skip
    if boot is not None:
        cmd += boot.arguments()
    if vm.qmp_socket is not None:
        cmd += ["-qmp", f"unix:{vm.qmp_socket},server=on,wait=off"]
    for index, disk in enumerate(vm.drives):
        cmd += disk_arguments(disk, index)
    if vm.ssh_port is None:
        cmd += ["-nic", "none"]
    else:
        cmd += [
            "-netdev", f"user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:{vm.ssh_port}-:22",
            "-device", "virtio-net-pci,netdev=net0",
        ]  # fmt: skip
    return cmd


def disk_arguments(disk: Disk, index: int) -> list[str]:
    """QEMU arguments attaching one disk: its block backend (see ``disk_backend``), then its devices
    (see ``disk_devices``) as -device options."""
    devices = []
    for device in disk_devices(disk, index):
        options = ",".join(f"{key}={value}" for key, value in device.items() if key != "driver")
        devices += ["-device", f"{device['driver']},{options}"]
    return [*disk_backend(disk, index), *devices]


def disk_backend(disk: Disk, index: int) -> list[str]:
    """The disk's block backend (-drive: cache, aio, throttling) and its iothread (-object): what a
    restored guest's command line carries, since neither is part of a saved guest state."""
    drive = f"file={disk.path},if=none,id=disk{index},format={disk.format},cache={disk.cache},aio={disk.aio}"
    drive += "".join(f",throttling.{key}={value}" for key, value in sorted(disk.throttle.items()))
    iothread = ["-object", f"iothread,id=io{index}"] if _has_iothread(disk) else []
    return [*iothread, "-drive", drive]


def _has_iothread(disk: Disk) -> bool:
    # QEMU 7.2's nvme device has no iothread and runs in the main loop whatever ``iothread`` says.
    return disk.iothread and disk.bus != "nvme"


def disk_devices(disk: Disk, index: int) -> list[dict[str, Any]]:
    """The disk's guest devices, as ``device_add`` arguments (hot-plugged in this order):

    - virtio-blk: a virtio-blk-pci device;
    - virtio-scsi: a virtio-scsi-pci controller of its own and one scsi-hd on it;
    - nvme: an NVMe controller of its own (namespace 1 is the disk).

    Serial and block sizes go on the disk's device. With ``iothread`` the virtio-blk device or
    the virtio-scsi controller gets an iothread of its own, so no disk's IO waits behind another's.
    """
    sizes = {"logical_block_size": disk.logical_block_size, "physical_block_size": disk.physical_block_size}
    on_iothread = {"iothread": f"io{index}"} if _has_iothread(disk) else {}
    drive = {"drive": f"disk{index}", "serial": disk.serial}
    if disk.bus == "virtio-blk":
        return [{"driver": "virtio-blk-pci", **drive, **sizes, **on_iothread, "id": f"dev{index}"}]
    if disk.bus == "virtio-scsi":
        return [
            {"driver": "virtio-scsi-pci", "id": f"scsi{index}", **on_iothread},
            {"driver": "scsi-hd", "bus": f"scsi{index}.0", **drive, **sizes, "id": f"dev{index}"},
        ]
    if disk.bus == "nvme":
        return [{"driver": "nvme", **drive, **sizes, "id": f"dev{index}"}]
    raise ValueError(f"disk {disk.serial}: unknown bus {disk.bus!r} (virtio-blk, virtio-scsi or nvme)")
