"""Image files on loop devices, with direct I/O so the host page cache does not hide the device."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from fsmatrix.agent import proc
from fsmatrix.agent.storage import devices
from fsmatrix.agent.storage._cleanup import close_uninterrupted

log = logging.getLogger("fsmatrix.storage")

IMAGE_PREFIX = "fsmatrix-"
DETACH_WAIT_SECONDS = 3.0


def image_path(directory: Path, index: int) -> Path:
    return directory / f"{IMAGE_PREFIX}{os.getpid()}-{index}.img"


def _loop_attribute(name: str, attribute: str) -> str | None:
    try:
        return (devices.SYS_ROOT / "block" / name / "loop" / attribute).read_text().strip()
    except OSError:
        return None


def _backed_by(name: str, image: Path) -> bool:
    """Whether loop device ``name`` is (still) attached to ``image``."""
    backing = _loop_attribute(name, "backing_file")
    if backing is None:
        return False
    # The kernel appends " (deleted)" once the file is unlinked.
    return backing.removesuffix(" (deleted)") == str(image)


def _create_image(image: Path, size_bytes: int, sparse: bool) -> None:
    with open(image, "xb") as f:  # "x": never reuse or clobber a file that is already there
        if sparse:
            f.truncate(size_bytes)
        else:
            os.posix_fallocate(f.fileno(), 0, size_bytes)


def attach(image: Path) -> str:
    """Attach ``image`` to a free loop device with direct I/O asked for; return the device path."""
    return proc.output(["losetup", "--find", "--show", "--direct-io=on", str(image)], timeout=60).strip()


def verify_attached(device: str, image: Path) -> None:
    """Check that ``device`` serves ``image`` and say whether direct I/O is really on."""
    name = devices.kernel_name(device)
    if not _backed_by(name, image):
        raise RuntimeError(f"losetup said {device} but sysfs does not show it backed by {image}")
    # losetup does not fail when the kernel declines direct I/O (e.g. the backing filesystem
    # has no O_DIRECT): read what the kernel actually did.
    if _loop_attribute(name, "dio") == "1":
        log.info("%s: attached %s with direct I/O on", device, image)
    else:
        log.warning(
            "%s: direct I/O is OFF for %s (its filesystem refused it?): the host page cache will "
            "serve reads and absorb writes, so device timings are not real",
            device,
            image,
        )


def detach(device: str, image: Path) -> None:
    """Detach ``device`` if it is still attached to ``image`` (never someone else's device)."""
    name = Path(device).name
    if not _backed_by(name, image):
        return
    if devices.partitions(name):
        # Partitions added with partx outlive the detach unless the kernel scanned them itself.
        proc.run(["partx", "--delete", device], timeout=60, check=False)
    proc.run(["losetup", "--detach", device], timeout=60, check=False)
    deadline = time.monotonic() + DETACH_WAIT_SECONDS
    while _backed_by(name, image):
        if time.monotonic() > deadline:
            # The kernel turned the detach into autoclear: something (often a mount namespace
            # made while the filesystem was mounted) still holds the device open.
            log.warning(
                "%s is still attached to %s: something still holds it open (a mount in another mount "
                "namespace?); the kernel detaches it when the last user closes it",
                device,
                image,
            )
            return
        time.sleep(0.1)
        proc.run(["losetup", "--detach", device], timeout=60, check=False)


def _remove(image: Path) -> None:
    image.unlink(missing_ok=True)


def detach_all(image: Path) -> None:
    """Detach every loop device attached to ``image``: also one that losetup attached before an
    interrupt cut it short, whose name we never learnt."""
    for entry in sorted((devices.SYS_ROOT / "block").glob("loop*")):
        if _backed_by(entry.name, image):
            detach(f"/dev/{entry.name}", image)


@contextmanager
def loop_devices(count: int, size_bytes: int, directory: Path, sparse: bool = True) -> Iterator[list[str]]:
    """``count`` loop devices over image files ``fsmatrix-<pid>-<n>.img`` of ``size_bytes`` in
    ``directory``; on exit, whatever happened, the devices are detached and the files deleted."""
    if count < 0 or size_bytes <= 0:
        raise ValueError(f"need count >= 0 and size_bytes > 0, got {count} and {size_bytes}")
    directory = Path(os.path.realpath(directory))  # sysfs reports the resolved backing path
    stack = ExitStack()
    try:
        attached: list[str] = []
        for index in range(count):
            image = image_path(directory, index)
            _create_image(image, size_bytes, sparse)
            stack.callback(_remove, image)
            # Registered before attaching: an interrupt inside losetup may leave a device attached
            # that attach() never returned.
            stack.callback(detach_all, image)
            device = attach(image)
            verify_attached(device, image)
            attached.append(device)
        yield attached
    finally:
        close_uninterrupted(stack)
