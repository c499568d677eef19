"""The kernel's page cache: emptied before a measured phase so it starts cold, as the seeds did;
and whether a filesystem really bypasses it for O_DIRECT (``direct_io_refused``)."""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable
from pathlib import Path

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def drop_caches() -> None:
    """Write dirty pages back, then drop the page cache, dentries and inodes (needs root)."""
    # drop_caches only frees clean pages: without the sync, data still dirty from a prepare phase
    # would stay cached and be written back during the measurement.
    os.sync()
    try:
        DROP_CACHES.write_text("3\n")
    except OSError as exc:
        raise PermissionError(f"cannot drop the page cache (write 3 to {DROP_CACHES}): {exc}") from exc


def sync_filesystems(paths: Iterable[Path | str]) -> None:
    """Write back what is dirty on the filesystems holding ``paths`` (syncfs(2), each filesystem
    once), or on a block device named by path (fsync on it: a raw cell's buffered writes). Where
    the C library has no syncfs, sync(2): every filesystem, the same written-back state."""
    seen: set[tuple[bool, int]] = set()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            info = os.fstat(fd)
            block = stat.S_ISBLK(info.st_mode)
            key = (block, info.st_rdev if block else info.st_dev)
            if key in seen:
                continue
            seen.add(key)
            if block:
                os.fsync(fd)
            elif _syncfs(fd) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"syncfs: {os.strerror(errno)}", str(path))
        finally:
            os.close(fd)


def _syncfs(fd: int) -> int:
    try:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):  # a C library without syncfs
        os.sync()
        return 0
    return int(syncfs(fd))


# statx(2): STATX_DIOALIGN (Linux 6.1) asks for a file's direct-I/O alignment; stx_dio_mem_align
# and stx_dio_offset_align are the two u32 at offset 152 of the 256-byte struct statx.
STATX_DIOALIGN = 0x2000
_AT_FDCWD = -100
_STATX_SIZE = 256
_DIO_OFFSET_ALIGN = slice(156, 160)
DIO_PROBE_NAME = ".fsmatrix-dio-probe"


def direct_io_alignment(path: Path) -> int | None:
    """The file's direct-I/O offset alignment in bytes; 0 when its filesystem does no direct I/O on
    it; None when this kernel or filesystem does not say (before Linux 6.1; btrfs)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        statx = libc.statx
    except (OSError, AttributeError):  # a C library without statx
        return None
    buffer = ctypes.create_string_buffer(_STATX_SIZE)
    if statx(_AT_FDCWD, os.fsencode(path), 0, STATX_DIOALIGN, buffer) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), str(path))
    if not int.from_bytes(buffer.raw[0:4], "little") & STATX_DIOALIGN:
        return None
    return int.from_bytes(buffer.raw[_DIO_OFFSET_ALIGN], "little")


def direct_io_refused(directory: Path) -> str | None:
    """Why O_DIRECT on a new file in ``directory`` would be served by the page cache after all, or
    None. ext3/ext4 with data=journal accept O_DIRECT and silently do buffered I/O instead: a
    benchmark asked for direct I/O would measure memory, not the disk. Asked of a probe file, since
    the benchmark's own files may not exist yet; a filesystem that does not answer is given the
    benefit of the doubt."""
    probe = directory / DIO_PROBE_NAME
    probe.touch()
    try:
        alignment = direct_io_alignment(probe)
    finally:
        probe.unlink(missing_ok=True)
    if alignment != 0:
        return None
    return (
        f"direct I/O was asked for, but the filesystem at {directory} does none on its files (statx reports "
        "no direct-I/O alignment; ext3/ext4 with data=journal silently buffer O_DIRECT): the figures "
        "would be the page cache's. Use buffered I/O for this cell"
    )
