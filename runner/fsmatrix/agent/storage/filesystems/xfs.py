"""XFS: allocation groups, delayed logging; geometry from ``xfs_info``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fsmatrix.agent import proc
from fsmatrix.agent.storage.filesystems import Filesystem

_SECTION = re.compile(r"^(meta-data|data|naming|log|realtime)?\s*=(.*)$")
_PAIR = re.compile(r"([A-Za-z][\w-]*)=(\S+?)(?=,|\s|$)")


def _value(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def parse_xfs_info(text: str) -> dict[str, Any]:
    """Geometry from ``xfs_info`` (and mkfs.xfs, which prints the same table).

    Lines look like ``data     =   bsize=4096   blocks=131072, imaxpct=25``; a line starting
    with ``=`` continues the section above. Meta-data settings go to the top level, the other
    sections to sub-dicts; a section's label (``internal log``, ``version 2``) becomes ``label``.
    """
    sections: dict[str, dict[str, Any]] = {}
    current: str | None = None
    for line in text.splitlines():
        match = _SECTION.match(line)
        if not match:
            continue
        if match.group(1):
            current = match.group(1)
        if current is None:
            continue
        section = sections.setdefault(current, {})
        rest = match.group(2)
        first_pair = _PAIR.search(rest)
        label = (rest[: first_pair.start()] if first_pair else rest).strip()
        if label and match.group(1) and current != "meta-data":  # meta-data's label is the device
            section["label"] = label
        for key, value in _PAIR.findall(rest):
            section[key.replace("-", "_")] = _value(value)
    if "data" not in sections or "bsize" not in sections["data"]:
        raise ValueError("xfs_info output has no data section with bsize")
    data = sections["data"]
    geometry: dict[str, Any] = dict(sections.get("meta-data", {}))
    geometry.update(
        {
            "block_size": data["bsize"],
            "data_blocks": data.get("blocks"),
            "size_bytes": data["bsize"] * data["blocks"] if isinstance(data.get("blocks"), int) else None,
            "sunit": data.get("sunit"),
            "swidth": data.get("swidth"),
            "imaxpct": data.get("imaxpct"),
        }
    )
    for name in ("naming", "log", "realtime"):
        if name in sections:
            geometry[name] = sections[name]
    return geometry


def read_geometry(device: str | None, mount_point: Path | None = None) -> dict[str, Any]:
    target = str(mount_point) if device is None and mount_point is not None else device
    if target is None:
        raise ValueError("xfs geometry needs the device or the mount point")
    return parse_xfs_info(proc.output(["xfs_info", target], timeout=120))


FILESYSTEM = Filesystem(
    name="xfs",
    package="xfsprogs",
    mkfs=("mkfs.xfs", "-f"),  # -f: overwrite an old signature (mkfs.xfs still refuses a mounted device)
    mkfs_getopt="b:c:d:i:l:L:m:n:KNp:qr:s:CfV",
    min_device_bytes=300 << 20,  # "Filesystem must be larger than 300MB."
    kernel_module="xfs",
    read_geometry=read_geometry,
    geometry_tool="xfs_info",
    version_command=("mkfs.xfs", "-V"),
    overhead_fraction=0.05,  # the log, AG headers, inode chunks and the reserved blocks pool
    overhead_bytes=64 << 20,
)
