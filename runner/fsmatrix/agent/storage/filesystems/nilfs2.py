"""NILFS2: log-structured, continuous checkpoints; geometry from ``nilfs-tune -l``."""

from __future__ import annotations

from typing import Any

from fsmatrix.agent.storage.filesystems import Filesystem, colon_fields, device_geometry, leading_int


def parse_nilfs_tune(text: str) -> dict[str, Any]:
    """Geometry from ``nilfs-tune -l`` (``Key:<TAB>value`` lines, like dumpe2fs)."""
    fields = colon_fields(text)
    block_size = leading_int(fields.get("Block size"))
    if block_size is None:
        raise ValueError("nilfs-tune output has no block size")
    features = fields.get("Filesystem features", "")
    return {
        "block_size": block_size,
        "size_bytes": leading_int(fields.get("Device size")),
        "blocks_per_segment": leading_int(fields.get("# of blocks per segment")),
        "segments": leading_int(fields.get("Number of segments")),
        "reserved_segments_percent": leading_int(fields.get("Reserved segments %")),
        "inode_size": leading_int(fields.get("Inode size")),
        "checkpoint_size": leading_int(fields.get("Checkpoint size")),
        "commit_interval": leading_int(fields.get("Commit interval")),
        "features": [] if features in ("", "(none)") else features.split(),
        "revision": fields.get("Filesystem revision #"),
        "uuid": fields.get("Filesystem UUID"),
    }


read_geometry = device_geometry("nilfs2", parse_nilfs_tune, "nilfs-tune", "-l")


FILESYSTEM = Filesystem(
    name="nilfs2",
    package="nilfs-tools",
    mkfs=("mkfs.nilfs2", "-f", "-q"),  # -f: overwrite an old signature; -q: quiet
    mkfs_getopt="b:B:cfhKL:m:nqvO:P:V",
    kernel_module="nilfs2",
    read_geometry=read_geometry,
    geometry_tool="nilfs-tune",
    version_command=("mkfs.nilfs2", "-V"),
    # Log-structured: every write takes new segments, reclaimed only by the cleaner after the
    # protection period (an hour by default), so a run fills it by bytes written, not live data.
    overhead_fraction=0.40,
    overhead_bytes=256 << 20,
)
