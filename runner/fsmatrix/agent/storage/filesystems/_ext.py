"""What ext2, ext3 and ext4 share: mke2fs options and the ``dumpe2fs -h`` parser."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fsmatrix.agent.storage.filesystems import Filesystem, colon_fields, device_geometry, leading_int

# -F: no "proceed anyway?" question (given once, mke2fs still refuses a mounted device).
# Zero inode tables and journal now: otherwise ext4lazyinit writes them in the background
# after mount, in the middle of the measurement.
MKE2FS_DEFAULTS = ("-F", "-E", "lazy_itable_init=0,lazy_journal_init=0")


def combine_mke2fs_options(defaults: Sequence[str], extra: Sequence[str]) -> list[str]:
    """Defaults then the cell's options, with every ``-E`` list merged into one.

    mke2fs keeps only the last ``-E`` it is given, so a cell's ``-E stride=16`` would silently
    drop the lazy-init defaults; merged, later settings still win (they come later in the list).
    """
    plain: list[str] = []
    extended: list[str] = []
    args = [*defaults, *extra]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-E" and i + 1 < len(args):
            extended.append(args[i + 1])
            i += 2
            continue
        if arg.startswith("-E") and len(arg) > 2:
            extended.append(arg[2:])
        else:
            plain.append(arg)
        i += 1
    return [*plain, "-E", ",".join(extended)] if extended else plain


def parse_dumpe2fs(text: str) -> dict[str, Any]:
    """Geometry from ``dumpe2fs -h`` output."""
    fields = colon_fields(text)
    block_size = leading_int(fields.get("Block size"))
    block_count = leading_int(fields.get("Block count"))
    if block_size is None or block_count is None:
        raise ValueError("dumpe2fs output has no block size or block count")
    features = fields.get("Filesystem features", "").split()
    mount_defaults = fields.get("Default mount options", "")
    journal_features = fields.get("Journal features", "")
    return {
        "block_size": block_size,
        "block_count": block_count,
        "size_bytes": block_size * block_count,
        "inode_count": leading_int(fields.get("Inode count")),
        "inode_size": leading_int(fields.get("Inode size")),
        "blocks_per_group": leading_int(fields.get("Blocks per group")),
        "inodes_per_group": leading_int(fields.get("Inodes per group")),
        "reserved_block_count": leading_int(fields.get("Reserved block count")),
        "flex_bg_size": leading_int(fields.get("Flex block group size")),
        # Set by mke2fs from an md/LVM stripe (or -E stride=,stripe_width=), in filesystem blocks.
        "raid_stride": leading_int(fields.get("RAID stride")),
        "raid_stripe_width": leading_int(fields.get("RAID stripe width")),
        "features": features,
        "has_journal": "has_journal" in features,
        # e2fsprogs >= 1.46 says "Total journal size/blocks", older ones "Journal size".
        "journal_size": fields.get("Total journal size", fields.get("Journal size")),
        "journal_blocks": leading_int(fields.get("Total journal blocks")),
        "journal_features": [] if journal_features in ("", "(none)") else journal_features.split(),
        "default_mount_options": [] if mount_defaults in ("", "(none)") else mount_defaults.split(),
        "revision": fields.get("Filesystem revision #"),
        "directory_hash": fields.get("Default directory hash"),
        "checksum_type": fields.get("Checksum type"),
        "uuid": fields.get("Filesystem UUID"),
    }


read_geometry = device_geometry("ext", parse_dumpe2fs, "dumpe2fs", "-h")


def ext_filesystem(name: str) -> Filesystem:
    return Filesystem(
        name=name,
        package="e2fsprogs",
        mkfs=(f"mkfs.{name}", *MKE2FS_DEFAULTS),
        mkfs_getopt="b:cd:e:g:i:jl:m:no:qr:s:t:vC:DE:FG:I:J:KL:M:N:O:R:ST:U:Vz:",
        # Debian's kernels serve ext2 and ext3 from the ext4 driver (CONFIG_EXT4_USE_FOR_EXT2).
        kernel_module="ext4",
        read_geometry=read_geometry,
        geometry_tool="dumpe2fs",
        version_command=(f"mkfs.{name}", "-V"),
        combine_mkfs_options=combine_mke2fs_options,
        # 5 % reserved blocks (PostgreSQL does not run as root), inode tables (1.6 %) and mke2fs's
        # journal: 16 MiB from 128 MiB, then about 3 % of the disk (64 MiB at 2 GiB, 128 MiB at 16 GiB).
        overhead_fraction=0.10,
        overhead_bytes=16 << 20,
    )
