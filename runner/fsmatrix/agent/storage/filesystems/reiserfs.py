"""ReiserFS 3.6: balanced tree, tail packing; geometry from ``debugreiserfs``."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fsmatrix.agent.storage.filesystems import Filesystem, device_geometry

_PATTERNS: dict[str, tuple[re.Pattern[str], Callable[[str], int | str]]] = {
    "block_size": (re.compile(r"^Blocksize:\s*(\d+)", re.M), int),
    "block_count": (re.compile(r"^Count of blocks on the device:\s*(\d+)", re.M), int),
    "bitmaps": (re.compile(r"^Number of bitmaps:\s*(\d+)", re.M), int),
    "format": (re.compile(r"of format (\S+) with", re.M), str),
    "journal": (re.compile(r"of format \S+ with ([\w-]+) journal", re.M), str),
    "hash": (re.compile(r'^Hash function used to sort names:\s*"?([^"\n]+)"?', re.M), str),
    "journal_device": (re.compile(r"^\s+Device \[(\S+)\]", re.M), str),
    "journal_blocks": (re.compile(r"^\s+Size (\d+) blocks", re.M), int),
    "journal_first_block": (re.compile(r"^\s+Size \d+ blocks.*\(first block (\d+)\)", re.M), int),
    "journal_max_transaction_blocks": (re.compile(r"^\s+Max transaction length (\d+)", re.M), int),
    "journal_max_batch_blocks": (re.compile(r"^\s+Max batch size (\d+)", re.M), int),
    "journal_max_commit_age": (re.compile(r"^\s+Max commit age (\d+)", re.M), int),
}


def parse_debugreiserfs(text: str) -> dict[str, Any]:
    """Geometry from ``debugreiserfs <device>`` (the superblock summary it prints by default)."""
    geometry: dict[str, Any] = {}
    for key, (pattern, kind) in _PATTERNS.items():
        match = pattern.search(text)
        geometry[key] = kind(match.group(1)) if match else None
    if geometry["block_size"] is None or geometry["block_count"] is None:
        raise ValueError("debugreiserfs output has no block size or block count")
    geometry["size_bytes"] = geometry["block_size"] * geometry["block_count"]
    return geometry


read_geometry = device_geometry("reiserfs", parse_debugreiserfs, "debugreiserfs")


FILESYSTEM = Filesystem(
    name="reiserfs",
    package="reiserfsprogs",
    # -f twice: no confirmation question even on a whole disk; -q: no progress bar.
    mkfs=("mkfs.reiserfs", "-q", "-f", "-f"),
    mkfs_getopt="b:j:s:t:o:h:u:l:VfdB:q",
    kernel_module="reiserfs",
    read_geometry=read_geometry,
    geometry_tool="debugreiserfs",
    version_command=("mkfs.reiserfs", "-V"),
    overhead_fraction=0.05,  # the 32 MiB journal, the bitmaps and tree
    overhead_bytes=64 << 20,
)
