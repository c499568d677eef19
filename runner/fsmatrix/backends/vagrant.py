"""What vagrant/Vagrantfile needs to boot one cell (or the plain image) with vagrant-libvirt.

    fsmatrix vagrant spec [--matrix FILE --cell ID]   # JSON on stdout, read by the Vagrantfile

The spec carries the versioned box (name, version and the file:// catalog that ``make image``
wrote), the build's SSH key, the libvirt driver (from the accelerator probe unless
FSMATRIX_LIBVIRT_DRIVER says otherwise), the network mode, and for a cell: its VM size, its data
disks (the qemu backend's serials, sizes, bus and cache) and the job the guest's session mode
runs (the same job document the runner writes onto its job disk). Nothing here is retyped from
the matrix: it all comes from the expanded cell.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fsmatrix import matrix
from fsmatrix.agent import job, storage
from fsmatrix.agent.cell import NATIVE, Cell
from fsmatrix.backends import image
from fsmatrix.backends.qemu.run_disks import DATA_SERIAL
from fsmatrix.errors import UserError

DRIVER_ENV = "FSMATRIX_LIBVIRT_DRIVER"
NETWORK_ENV = "FSMATRIX_VAGRANT_NETWORK"
IMAGE_ENV = "FSMATRIX_IMAGE"  # an image name (fsmatrix-<hash>) in the cache instead of the current sources' one
NETWORKS = ("management", "loopback")
DRIVERS = ("kvm", "qemu")
PLAIN_VM = {"cpus": 2, "memory_mib": 2048}
SESSION_DIR = "/var/lib/fsmatrix/session"  # fsmatrix.agent.session.SESSION_DIR, in the guest
MOUNT_ROOT = "/mnt/fsmatrix"  # fsmatrix.agent.session.MOUNT_ROOT
# vagrant-libvirt's disk buses; the cell's names map onto them.
LIBVIRT_BUS = {"virtio-blk": "virtio", "virtio-scsi": "scsi"}
# Defaults of the cell's device settings that vagrant-libvirt can reproduce exactly.
NATIVE_BLOCK_SIZE = 512


def box(paths: image.ImagePaths) -> dict[str, str]:
    """The box as the catalog names it: Vagrant adds it from the catalog's file:// URL by version."""
    if not paths.complete():
        raise UserError(f"no guest image for the current sources ({paths.name}): run `make image` first")
    catalog = json.loads(paths.catalog.read_text(encoding="utf-8"))
    versions = catalog.get("versions") or []
    if len(versions) != 1 or not versions[0].get("version"):
        raise UserError(f"{paths.catalog}: expected exactly one box version")
    return {
        "name": str(catalog["name"]),
        "version": str(versions[0]["version"]),
        "url": paths.catalog.as_uri(),
        "image": paths.name,
    }


def accel_driver(override: str | None = None) -> tuple[str, str]:
    """(accel, libvirt driver): the probe's answer (kvm or tcg), or the user's driver."""
    override = override or os.environ.get(DRIVER_ENV) or None
    if override is not None:
        if override not in DRIVERS:
            raise UserError(f"{DRIVER_ENV} must be one of {', '.join(DRIVERS)}, not {override!r}")
        return ("kvm" if override == "kvm" else "tcg"), override
    accel = image.host_accel()
    return accel, ("kvm" if accel == "kvm" else "qemu")


def find_cell(matrix_file: Path, cell_id: str) -> matrix.MatrixCell:
    """The cell with this id (or the one cell a glob matches) in the expanded matrix."""
    m = matrix.load(matrix_file)
    exact = [c for c in m.cells if c.id == cell_id]
    cells = exact or m.select([cell_id])
    if len(cells) != 1:
        some = ", ".join(c.id for c in (cells or m.cells)[:5])
        what = "matches no cell" if not cells else f"matches {len(cells)} cells"
        raise UserError(f"{cell_id!r} {what} in {matrix_file} (e.g. {some})")
    return cells[0]


def data_disks(cell: Cell) -> tuple[list[dict[str, Any]], list[str]]:
    """The cell's data disks as vagrant-libvirt storage, plus the device settings it cannot
    reproduce (which the result then records). Serials, count and size as the qemu backend's."""
    size = storage.parse_size(cell.storage.disk_size)
    device = cell.device
    deviations = []
    bus = device.bus
    if bus not in LIBVIRT_BUS:
        deviations.append(f"device.bus={bus}: attached as virtio-blk")
        bus = "virtio-blk"
    elif bus == "virtio-scsi":
        # vagrant-libvirt declares no controller for extra disks: libvirt adds its default model.
        deviations.append("device.bus=virtio-scsi: the disks sit on libvirt's default SCSI controller")
    for key, value in (
        ("logical_block_size", device.logical_block_size),
        ("physical_block_size", device.physical_block_size),
    ):
        if value != NATIVE_BLOCK_SIZE:
            deviations.append(f"device.{key}={value}: the disks have {NATIVE_BLOCK_SIZE}-byte blocks")
    if device.profile != NATIVE:
        deviations.append(f"device.profile={device.profile}: no throttling")
    if device.iothread:
        deviations.append("device.iothread=true: no iothread per disk")
    preallocate = cell.storage.disk_allocation == "preallocated"
    disks = [
        {
            "serial": DATA_SERIAL.format(index),
            "size_bytes": size,
            "size": f"{size // 1024}K",  # what vagrant-libvirt (fog) takes as a capacity
            "bus": bus,  # as the guest sees it (fsmatrix's name)
            "libvirt_bus": LIBVIRT_BUS[bus],
            "cache": device.cache,
            "io": device.aio,
            "preallocate": preallocate,  # libvirt allocates the whole volume up front
        }
        for index in range(cell.required_devices)
    ]
    return disks, deviations


def spec(
    matrix_file: Path | None = None,
    cell_id: str | None = None,
    driver: str | None = None,
    network: str | None = None,
    image_name: str | None = None,
) -> dict[str, Any]:
    """Everything the Vagrantfile reads, for one cell or (no cell) the plain image.

    ``image_name`` (or $FSMATRIX_IMAGE) picks a built image by name, e.g. the one a result's
    provenance names; by default the image of the current sources, which must be built."""
    network = network or os.environ.get(NETWORK_ENV) or "management"
    if network not in NETWORKS:
        raise UserError(f"{NETWORK_ENV} must be one of {', '.join(NETWORKS)}, not {network!r}")
    image_name = image_name or os.environ.get(IMAGE_ENV) or None
    if image_name is not None and not image_name.startswith("fsmatrix-"):
        raise UserError(f"{IMAGE_ENV} must name an image as fsmatrix-<hash>, not {image_name!r}")
    paths = image.image_paths(image_name.removeprefix("fsmatrix-") if image_name else None)
    accel, libvirt_driver = accel_driver(driver)
    doc: dict[str, Any] = {
        "box": box(paths),
        "accel": accel,
        "driver": libvirt_driver,
        "network": network,
        "ssh": {"username": "root", "private_key_path": str(image.ssh_key())},
        "session": {"dir": SESSION_DIR, "mount_root": MOUNT_ROOT},
        "cell_id": None,
        "matrix": None,
        **PLAIN_VM,
        "disks": [],
        "deviations": [],
        "job": None,
    }
    if cell_id is None:
        return doc
    if matrix_file is None:
        raise UserError("a cell needs its matrix file (FSMATRIX_MATRIX / --matrix)")
    cell = find_cell(matrix_file, cell_id)
    if cell.spec.vm.kernel:
        raise UserError(f"cell {cell.id}: vm.kernel is booted by the qemu backend only; run it with --backend qemu")
    if image_name is None:  # the image the cell names (packer/images/NAME.yaml), for the current sources
        paths = image.image_paths(image=cell.spec.image)
        doc["box"] = box(paths)
    cpus, memory_mib = cell.spec.vm.cpus, cell.spec.vm.memory_mib
    disks, deviations = data_disks(cell.spec)
    sha256 = paths.sha256.read_text().split()[0]
    environment = {
        "backend": "vagrant",
        "accel": accel,
        "device_source": "virtio",
        "image_name": paths.name,
        "image_sha256": sha256,
        "vm": {"cpus": cpus, "memory": cell.spec.vm.memory},
        "vagrant": {"driver": libvirt_driver, "network": network, "device_deviations": deviations},
    }
    doc.update(
        cell_id=cell.id,
        matrix=str(matrix_file),
        cpus=cpus,
        memory_mib=memory_mib,
        disks=disks,
        deviations=deviations,
        job={
            "cell": cell.params,
            "cell_id": cell.id,
            "repeat": 1,
            "data_serials": [d["serial"] for d in disks],
            "data_disks": [{"serial": d["serial"], "bus": d["bus"]} for d in disks],
            "environment": environment,
            "reference": job.reference_for(cell.spec),
        },
    )
    return doc
