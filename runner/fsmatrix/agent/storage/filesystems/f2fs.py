"""F2FS: flash-friendly log-structured filesystem; geometry from ``dump.f2fs -d 1``."""

from __future__ import annotations

import re
from typing import Any

from fsmatrix.agent.storage.filesystems import Filesystem, device_geometry

# "log_blocksize                 [0x       c : 12]": name, then hex and decimal of the same value.
_FIELD = re.compile(r"^(\w+(?:\[\w+\])?)\s+\[0x\s*[0-9a-fA-F]+ : (\d+)\]\s*$")
_FEATURES = re.compile(r"^Info: superblock features = \w+ :(.*)$", re.M)


def parse_dump_f2fs(text: str) -> dict[str, Any]:
    """Geometry from ``dump.f2fs -d 1``: its superblock and checkpoint tables.

    Without ``-d 1`` dump.f2fs prints only a summary; with it, each field of the superblock and
    of the checkpoint comes on its own ``name [0xHEX : DEC]`` line under a boxed heading.
    """
    tables: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        stripped = line.strip().strip("|").strip()
        if stripped in ("Super block", "Checkpoint"):
            current = stripped
            continue
        match = _FIELD.match(line)
        if match and current is not None:
            tables.setdefault(current, {})[match.group(1)] = int(match.group(2))
    sb = tables.get("Super block", {})
    cp = tables.get("Checkpoint", {})
    if "log_blocksize" not in sb or "block_count" not in sb:
        raise ValueError("dump.f2fs output has no superblock table (was it run with -d 1?)")
    block_size = 1 << sb["log_blocksize"]
    features = _FEATURES.search(text)
    return {
        "block_size": block_size,
        "sector_size": 1 << sb["log_sectorsize"] if "log_sectorsize" in sb else None,
        "block_count": sb["block_count"],
        "size_bytes": block_size * sb["block_count"],
        "blocks_per_segment": 1 << sb["log_blocks_per_seg"] if "log_blocks_per_seg" in sb else None,
        "segments_per_section": sb.get("segs_per_sec"),
        "sections_per_zone": sb.get("secs_per_zone"),
        "segment_count": sb.get("segment_count"),
        "main_segments": sb.get("segment_count_main"),
        "overprovision_segments": cp.get("overprov_segment_count"),
        "reserved_segments": cp.get("rsvd_segment_count"),
        "user_block_count": cp.get("user_block_count"),
        "features": features.group(1).split() if features else [],
    }


read_geometry = device_geometry("f2fs", parse_dump_f2fs, "dump.f2fs", "-d", "1")


FILESYSTEM = Filesystem(
    name="f2fs",
    package="f2fs-tools",
    mkfs=("mkfs.f2fs", "-f", "-q"),  # -f: overwrite an old signature; -q: quiet
    mkfs_getopt="qa:c:C:d:e:E:g:hil:mo:O:rR:s:S:z:t:T:U:Vfw:",
    kernel_module="f2fs",
    read_geometry=read_geometry,
    geometry_tool="dump.f2fs",
    version_command=("mkfs.f2fs", "-V"),
    # Over-provisioned segments for its cleaner (a large share on small devices) and six logs open at once.
    overhead_fraction=0.15,
    overhead_bytes=128 << 20,
)
