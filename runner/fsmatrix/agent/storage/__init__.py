"""Storage for one cell: block devices, loop images, per-filesystem mkfs/geometry, and prepare().

Public API (the rest of fsmatrix codes against exactly these names)::

    Skipped, UnsafeDevice, StorageError
    FILESYSTEMS, filesystem_availability(name), parse_size(text), required_devices(cell)
    stripe_geometry(storage), StripeError
    BlockDevice, resolve(path), check_safe_to_format(device, expected=None) -> BlockDevice, describe_device(device),
    kernel_name(device), locked(BlockDevice), held_exclusive(BlockDevice), host_view_problems()
    loop_devices(count, size_bytes, directory, sparse=True)
    PreparedStorage, prepare(cell, devices, mount_root), format_device(filesystem, device, mkfs_options)
"""

from fsmatrix.agent.declare import parse_size
from fsmatrix.agent.storage.devices import (
    BlockDevice,
    UnsafeDevice,
    check_safe_to_format,
    describe_device,
    held_exclusive,
    host_view_problems,
    kernel_name,
    locked,
    resolve,
)
from fsmatrix.agent.storage.loop import loop_devices
from fsmatrix.agent.storage.prepare import (
    FILESYSTEMS,
    PreparedStorage,
    Skipped,
    StorageError,
    StorageSpec,
    filesystem_availability,
    format_device,
    prepare,
    required_devices,
    stripe_geometry,
)
from fsmatrix.agent.storage.stripe import StripeError

__all__ = [
    "FILESYSTEMS",
    "BlockDevice",
    "PreparedStorage",
    "Skipped",
    "StorageError",
    "StorageSpec",
    "StripeError",
    "UnsafeDevice",
    "check_safe_to_format",
    "describe_device",
    "filesystem_availability",
    "format_device",
    "held_exclusive",
    "host_view_problems",
    "kernel_name",
    "locked",
    "loop_devices",
    "parse_size",
    "prepare",
    "required_devices",
    "resolve",
    "stripe_geometry",
]
