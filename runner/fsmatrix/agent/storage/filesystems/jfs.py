"""JFS: IBM's journaling filesystem; geometry from ``jfs_tune -l``."""

from __future__ import annotations

from typing import Any

from fsmatrix.agent.storage.filesystems import Filesystem, colon_fields, device_geometry, leading_int


def parse_jfs_tune(text: str) -> dict[str, Any]:
    """Geometry from ``jfs_tune -l`` (``Key:<TAB>value`` lines)."""
    fields = colon_fields(text)
    block_size = leading_int(fields.get("Aggregate block size"))
    if block_size is None:
        raise ValueError("jfs_tune output has no aggregate block size")
    physical = leading_int(fields.get("Physical block size"))
    # The superblock's aggregate size counts physical (device) blocks, not aggregate blocks.
    aggregate = leading_int(fields.get("Aggregate size"))
    flags = fields.get("JFS flags", "").split()
    return {
        "block_size": block_size,
        "physical_block_size": physical,
        "aggregate_size_physical_blocks": aggregate,
        "size_bytes": aggregate * physical if aggregate is not None and physical is not None else None,
        "allocation_group_blocks": leading_int(fields.get("Allocation group size")),
        "version": leading_int(fields.get("JFS version")),
        "flags": flags,
        "inline_log": "JFS_INLINELOG" in flags,
        "log_device": fields.get("Log device number"),
    }


read_geometry = device_geometry("jfs", parse_jfs_tune, "jfs_tune", "-l")


FILESYSTEM = Filesystem(
    name="jfs",
    package="jfsutils",
    mkfs=("mkfs.jfs", "-q"),  # -q: no confirmation question
    mkfs_getopt="cj:J:fL:Oqs:V",
    kernel_module="jfs",
    read_geometry=read_geometry,
    geometry_tool="jfs_tune",
    version_command=("mkfs.jfs", "-V"),
    overhead_fraction=0.05,  # the log (0.4 %), the inode and block maps
    overhead_bytes=64 << 20,
)
