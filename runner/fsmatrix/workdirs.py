"""Run directories that say whether their run is alive, and the reaper of dead runs' leftovers.

Every run works in its own directory under the work directory (``/var/tmp/fsmatrix``): loop image
files, mount points, a VM's overlay and disks. The run holds a BSD flock on ``fsmatrix.lock`` in
that directory for as long as it lives; the kernel drops the lock when the process dies, whatever
kills it (SIGKILL, the OOM killer; a power loss leaves no lock at all). So a directory whose lock
can be taken belongs to a dead run, across containers and pid reuse alike (a pid proves nothing).
The directory is made under a temporary dot-name with its lock already held, then renamed: the
reaper never sees a live run's directory without its lock.

``reap`` removes what a dead run left: processes still using files in its directory (a QEMU, GT.M
workers), mounts under it, loop devices backed by its files, then the directory. It touches only
directories that carry a lock file and whose lock it holds itself while reaping: other engineers'
runs, older fsmatrix versions' directories and anything else in the work directory are left alone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from fsmatrix.agent import proc
from fsmatrix.agent.storage import devices

log = logging.getLogger("fsmatrix")

LOCK_NAME = "fsmatrix.lock"
NEW_PREFIX = ".new-"
NEW_GRACE_S = 60.0  # a half-made directory (dot-name) older than this belongs to a dead run


def _try_lock(path: Path) -> int | None:
    """An fd holding LOCK_EX on ``path``, or None when another process holds it (or it is gone)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


@contextlib.contextmanager
def run_directory(workdir: Path, name: str) -> Iterator[Path]:
    """``workdir/name``, fresh, locked for the block's life (the lock fd is close-on-exec, so a
    child that outlives us cannot keep a dead run looking alive), removed afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    final = workdir / name
    if final.exists():
        reap_one(final)  # ours from an earlier, dead run of the same cell; refused when alive
        if final.exists():
            raise RuntimeError(f"{final} belongs to a live run")
    staging = workdir / f"{NEW_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    try:
        staging.mkdir()
        fd = os.open(staging / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, f"pid {os.getpid()}\n".encode())
            staging.rename(final)
            try:
                yield final
            finally:
                remove_tree(final)
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # only there when an interrupt came before the rename


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _mounts_under(directory: Path) -> list[str]:
    path = os.path.realpath(directory)
    return [m.mount_point for m in devices.read_mounts() if _under(m.mount_point, path)]


def remove_tree(directory: Path) -> bool:
    """Delete ``directory`` unless something is still mounted under it (rmtree would descend into
    the mounted filesystem and delete its files); False when it was left in place."""
    left = _mounts_under(directory)
    if left:
        log.warning("leaving %s in place: still mounted under it: %s", directory, ", ".join(left))
        return False
    shutil.rmtree(directory, ignore_errors=True)
    return True


def _processes_in(directory: str) -> list[tuple[int, str]]:
    """(pid, command) of processes other than us with a file, cwd or mapping under ``directory``,
    or naming it on their command line (a QEMU whose disks are there)."""
    found = []
    me = os.getpid()
    for pid in proc.pids():
        if pid == me:
            continue
        entry = proc.PROC / str(pid)
        targets: list[str] = []
        for link in ("cwd", "root", "exe"):
            with contextlib.suppress(OSError):
                targets.append(os.readlink(entry / link))
        try:
            targets += [os.readlink(fd) for fd in (entry / "fd").iterdir()]
            targets += [line.split(None, 5)[-1] for line in (entry / "maps").read_text().splitlines()]
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue  # gone meanwhile
        # A QEMU names its disks in its arguments (file=/var/tmp/fsmatrix/vm-.../root.qcow2,...).
        targets += [part.split("=", 1)[-1] for arg in args for part in arg.split(",")]
        if any(_under(t.removesuffix(" (deleted)"), directory) for t in targets if t.startswith("/")):
            try:
                command = (entry / "comm").read_text().strip()
            except OSError:
                command = "?"
            found.append((pid, command))
    return found


def reap_one(directory: Path) -> list[str]:
    """Remove a dead run's directory and everything it still holds; [] (and nothing touched)
    when its run is alive or the directory carries no lock file. Returns what was removed."""
    lock = directory / LOCK_NAME
    if not lock.is_file():
        return []
    fd = _try_lock(lock)
    if fd is None:
        return []  # alive
    removed: list[str] = []
    path = os.path.realpath(directory)
    try:
        for _ in range(3):  # a killed process may take a moment to let go of its files
            users = _processes_in(path)
            if not users:
                break
            for pid, command in users:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    removed.append(f"process {pid} ({command})")
            time.sleep(0.5)
        for point in sorted(set(_mounts_under(directory)), key=len, reverse=True):  # the deepest first
            done = subprocess.run(["umount", point], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "--lazy", point], capture_output=True, text=True, check=False)
            removed.append(f"mount {point}")
        for loop in devices.loop_backings():
            if _under(loop.file.removesuffix(" (deleted)"), path):
                subprocess.run(["losetup", "--detach", f"/dev/{loop.name}"], capture_output=True, check=False)
                removed.append(f"loop device /dev/{loop.name} ({loop.file})")
        if remove_tree(directory):
            removed.append(f"directory {directory}")
    finally:
        os.close(fd)
    for item in removed:
        log.warning("reaped from a dead run: %s", item)
    return removed


def reap(workdir: Path) -> list[str]:
    """Reap every dead run's directory in ``workdir``; returns what was removed."""
    removed: list[str] = []
    try:
        entries = sorted(workdir.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if not entry.is_dir() or entry.is_symlink():
            continue
        if entry.name.startswith(NEW_PREFIX):
            # Half made: reaped only once its maker had ample time to lock and rename it.
            try:
                young = time.time() - entry.stat().st_mtime < NEW_GRACE_S
            except OSError:
                continue
            if young or not (entry / LOCK_NAME).is_file():
                continue
        removed += reap_one(entry)
    return removed
