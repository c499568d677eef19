"""raw: no filesystem at all; the workload (fio) runs on the block device itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsmatrix.agent.storage.filesystems import Filesystem


def read_geometry(device: str | None, mount_point: Path | None = None) -> dict[str, Any]:
    raise ValueError("raw has no filesystem geometry")  # prepare reads the device's size instead


FILESYSTEM = Filesystem(
    name="raw",
    package=None,
    mkfs=(),
    kernel_module=None,
    read_geometry=read_geometry,
    overhead_fraction=0.0,  # the workload writes the device itself
    overhead_bytes=0,
    mounts=False,  # nothing is made or mounted; the workload gets the device (Workspace.device)
)
