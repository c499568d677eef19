"""The settings a cell can have: one JSON Schema, which also carries every default.

The schema is the single source of truth for what a matrix file may say: validation, defaults and
`fsmatrix matrix settings` (the documentation listing) all read it.
"""

from __future__ import annotations

import copy
from typing import Any

FILESYSTEMS = ("ext2", "ext3", "ext4", "xfs", "btrfs", "jfs", "reiserfs", "nilfs2", "f2fs", "tmpfs", "raw")
BLOCK_FILESYSTEMS = FILESYSTEMS[:-2]
LAYOUTS = ("single", "split-journal", "md-raid0", "lvm-stripe")
STRIPED_LAYOUTS = ("md-raid0", "lvm-stripe")
# What a data disk behaves like (VM backends): QEMU block throttling per disk; see backends/profiles.py.
DEVICE_PROFILES = ("native", "ssd", "hdd")
DEVICE_BUSES = ("virtio-blk", "virtio-scsi", "nvme")
SYSBENCH_MODES = ("seqwr", "seqrewr", "seqrd", "rndrd", "rndwr", "rndrw")
FIO_PATTERNS = ("write", "rewrite", "read", "reread", "randread", "randwrite", "randrw")

_SIZE = {"type": "string", "pattern": r"^[0-9]+[KMGT]?$", "description": "bytes, or a number with K/M/G/T"}


def _int(minimum: int, default: int | None = None, maximum: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "integer", "minimum": minimum}
    if maximum is not None:
        spec["maximum"] = maximum
    if default is not None:
        spec["default"] = default
    return spec


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": list(required),
        "properties": properties,
        "default": {},
    }


THREEN1 = _object(
    {
        "start": _int(1),
        "end": _int(1),
        "workers": _int(1, 4, 1024),
        "block": _int(1, 5000),
        "keys": {"enum": ["spelled", "integer"], "default": "spelled"},
    },
    required=("start", "end"),
)

SYSBENCH = _object(
    {
        "mode": {"enum": list(SYSBENCH_MODES)},
        "total_size": {**_SIZE, "default": "1G"},
        "block_size": _int(512, 16384),
        "threads": _int(1, 1, 1024),
        "duration": _int(1, 30),
        "io": {"enum": ["direct", "buffered"], "default": "direct"},
        "num_files": _int(1, 128),
        "fsync_freq": _int(0, 100),
        "rw_ratio": {"type": "number", "exclusiveMinimum": 0, "default": 1.5},
    },
    required=("mode",),
)

FIO = _object(
    {
        "pattern": {"enum": list(FIO_PATTERNS)},
        "record_size": {**_SIZE, "default": "8K"},
        "file_size": {**_SIZE, "default": "1G"},
        "jobs": _int(1, 1, 256),
        "direct": {"type": "boolean", "default": True},
        "rwmixread": _int(0, 50, 100),
        "runtime": _int(0, 0),
        "ioengine": {"enum": ["psync", "sync", "libaio", "io_uring"], "default": "psync"},
        "fsync_on_close": {"type": "boolean", "default": True},
    },
    required=("pattern",),
)

WORKLOADS = {"threen1": THREEN1, "sysbench": SYSBENCH, "fio": FIO}
for _spec in WORKLOADS.values():
    del _spec["default"]  # a workload exists only when the cell names it

GTM = _object(
    {
        "block_size": {
            "type": "integer",
            "minimum": 512,
            "maximum": 65024,
            "multipleOf": 512,
            "default": 4096,
        },
        "global_buffers": _int(64, 35000, 2097151),
        "journal_buffers": _int(2307, 2312, 1048576),  # GT.M V7 accepts 2307.. and rounds up to 8
        "access_method": {"enum": ["BG", "MM"], "default": "BG"},
        "journal": {"enum": ["before", "nobefore", "off"], "default": "before"},
        "sync_io": {"type": "boolean", "default": False},
        "full_block_writes": {"type": "boolean", "default": False},
    }
)

STORAGE = _object(
    {
        "layout": {"enum": list(LAYOUTS), "default": "single"},
        "disk_size": {**_SIZE, "default": "8G"},
        "journal_filesystem": {"enum": list(BLOCK_FILESYSTEMS), "default": "ext2"},
        "journal_mount_options": {"type": "string", "default": ""},
        # VM backend: sparse data disks fill as the guest writes; preallocated ones are fallocated
        # first, so the host filesystem's allocation does not land inside the measurement.
        "disk_allocation": {"enum": ["sparse", "preallocated"], "default": "sparse"},
        # md-raid0 / lvm-stripe: how many disks, and the md chunk / LVM stripe size (seed 004: -i 4 -I 64).
        "stripe_disks": _int(2, 4, 16),
        "stripe_size": {**_SIZE, "default": "64K"},
    }
)

# How the VM backends attach each data disk (the host backend runs only the 'native' profile).
DEVICE = _object(
    {
        "profile": {"enum": list(DEVICE_PROFILES), "default": "native"},
        "bus": {"enum": list(DEVICE_BUSES), "default": "virtio-blk"},
        "cache": {"enum": ["none", "writeback", "writethrough", "directsync", "unsafe"], "default": "none"},
        "aio": {"enum": ["io_uring", "native", "threads"], "default": "io_uring"},
        "iothread": {"type": "boolean", "default": True},
        "logical_block_size": {"enum": [512, 4096], "default": 512},
        "physical_block_size": {"enum": [512, 4096], "default": 512},
    }
)

# The guest's size under the VM backends (the host backend ignores it).
VM = _object({"cpus": _int(1, 2, 256), "memory": {**_SIZE, "default": "2G"}})

CELL: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["filesystem", "workload"],
    "properties": {
        "filesystem": {"enum": list(FILESYSTEMS)},
        "mkfs_options": {"type": "string", "default": ""},
        "mount_options": {"type": "string", "default": ""},
        "storage": STORAGE,
        "device": DEVICE,
        "vm": VM,
        "gtm": GTM,
        "workload": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "maxProperties": 1,
            "properties": WORKLOADS,
        },
        "timeout": _int(1, 3600),
    },
}


def fill_defaults(value: dict[str, Any], schema: dict[str, Any] = CELL) -> dict[str, Any]:
    """A copy of ``value`` with every schema default filled in, recursively."""
    result = copy.deepcopy(value)
    for key, spec in schema.get("properties", {}).items():
        if key not in result and "default" in spec:
            result[key] = copy.deepcopy(spec["default"])
        if isinstance(result.get(key), dict) and spec.get("properties"):
            result[key] = fill_defaults(result[key], spec)
    return result


def setting_paths(schema: dict[str, Any] = CELL, prefix: str = "") -> list[str]:
    """Every dotted path a matrix may set, objects included (``gtm``, ``gtm.journal``, ...)."""
    paths: list[str] = []
    for key, spec in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        paths.append(path)
        paths.extend(setting_paths(spec, path + "."))
    return paths


def describe(spec: dict[str, Any]) -> str:
    """What a setting allows, in words, for error messages and the settings listing."""
    if "enum" in spec:
        return "one of " + ", ".join(str(v) for v in spec["enum"])
    kind = spec.get("type", "value")
    if kind == "integer":
        bounds = f"an integer >= {spec.get('minimum', 0)}"
        if "maximum" in spec:
            bounds += f" and <= {spec['maximum']}"
        if "multipleOf" in spec:
            bounds += f", a multiple of {spec['multipleOf']}"
        return bounds
    if kind == "string" and "pattern" in spec:
        return "a size such as 512M or 8G"
    if kind == "object":
        return "a mapping with keys " + ", ".join(spec.get("properties", {}))
    return {"boolean": "true or false", "string": "a string", "number": "a number"}.get(kind, kind)


def spec_at(path: str, schema: dict[str, Any] = CELL) -> dict[str, Any] | None:
    """The schema of a dotted setting path, or None when there is no such setting."""
    spec: dict[str, Any] | None = schema
    for part in path.split("."):
        if spec is None:
            return None
        spec = spec.get("properties", {}).get(part)
    return spec
