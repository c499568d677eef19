"""btrfs: copy-on-write, checksums; geometry from ``btrfs inspect-internal dump-super``."""

from __future__ import annotations

import re
from typing import Any

from fsmatrix.agent.storage.filesystems import Filesystem, device_geometry, leading_int

_FLAG = re.compile(r"[A-Z][A-Z0-9_]+")


def parse_dump_super(text: str) -> dict[str, Any]:
    """Geometry from ``btrfs inspect-internal dump-super``.

    Lines are ``key<TABs>value``; flag words such as ``( MIXED_BACKREF |`` follow on indented
    lines under the ``*_flags`` key they belong to.
    """
    fields: dict[str, str] = {}
    flags: dict[str, list[str]] = {}
    last_key: str | None = None
    for line in text.splitlines():
        if line.startswith(("\t", " ")):
            if last_key is not None and last_key.endswith("_flags"):
                flags.setdefault(last_key, []).extend(_FLAG.findall(line))
            continue
        key, sep, value = line.partition("\t")
        if not sep:
            continue
        last_key = key.strip()
        fields[last_key] = value.strip()
    sectorsize = leading_int(fields.get("sectorsize"))
    if sectorsize is None:
        raise ValueError("dump-super output has no sectorsize")
    csum = fields.get("csum_type", "")
    csum_name = re.search(r"\((\w+)\)", csum)
    return {
        "block_size": sectorsize,
        "sectorsize": sectorsize,
        "nodesize": leading_int(fields.get("nodesize")),
        "stripesize": leading_int(fields.get("stripesize")),
        "size_bytes": leading_int(fields.get("total_bytes")),
        "num_devices": leading_int(fields.get("num_devices")),
        "csum_type": csum_name.group(1) if csum_name else csum or None,
        "incompat_flags": flags.get("incompat_flags", []),
        "compat_ro_flags": flags.get("compat_ro_flags", []),
        "fsid": fields.get("fsid"),
    }


read_geometry = device_geometry("btrfs", parse_dump_super, "btrfs", "inspect-internal", "dump-super")


FILESYSTEM = Filesystem(
    name="btrfs",
    package="btrfs-progs",
    mkfs=("mkfs.btrfs", "-f"),  # -f: overwrite an old signature
    mkfs_getopt="A:b:fl:n:s:m:d:L:R:O:r:U:VvMKq",
    min_device_bytes=114294784,  # "minimum size for each btrfs device is 114294784"
    kernel_module="btrfs",
    read_geometry=read_geometry,
    geometry_tool="btrfs",
    version_command=("mkfs.btrfs", "--version"),
    # Copy-on-write: a rewrite takes new space before the old is freed, metadata is duplicated, and
    # data and metadata chunks are allocated in 256 MiB..1 GiB steps.
    overhead_fraction=0.25,
    overhead_bytes=256 << 20,
)
