"""tmpfs: memory-backed, no device, no mkfs; the size comes from the cell's disk_size."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fsmatrix.agent.storage.filesystems import Filesystem


def read_geometry(device: str | None, mount_point: Path | None = None) -> dict[str, Any]:
    """tmpfs has no on-disk format to inspect: what statvfs says of the mounted filesystem."""
    if mount_point is None:
        raise ValueError("tmpfs geometry needs the mount point")
    st = os.statvfs(mount_point)
    return {
        "block_size": st.f_bsize,
        "size_bytes": st.f_blocks * st.f_frsize,
        "inode_count": st.f_files,
    }


FILESYSTEM = Filesystem(
    name="tmpfs",
    package=None,
    mkfs=(),
    kernel_module=None,  # built into every kernel
    read_geometry=read_geometry,
    overhead_fraction=0.0,  # sized by storage.disk_size, all of it usable; it counts against memory
    overhead_bytes=0,
    device=False,  # memory-backed: mounted with size=storage.disk_size; layout single, profile native only
)
