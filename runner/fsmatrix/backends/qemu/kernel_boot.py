"""Your own kernel (``vm.kernel``): booted directly instead of the image's, the image unchanged.

``vm.kernel`` names a Debian kernel package (``linux-image-*.deb``) or an x86 ``bzImage``;
``vm.modules`` a bzImage's modules (a directory or tarball holding ``lib/modules/RELEASE``). The
qemu backend boots it with ``-kernel``/``-initrd`` on the image's root disk. The image's own
initramfs is made for its kernel (and virtio_blk and ext4 are modules), so the kernel gets one of
its own, and its modules go on a small read-only disk of their own:

- the initramfs (busybox, the few modules that reach the root disk, decompressed, and ``/init``)
  loads those modules, mounts the root disk read-only (``LABEL=fsmatrix-root``, as the image makes
  it), mounts the modules disk (``LABEL=fsmatrix-modules``, ext4 without a journal) over the root's
  ``/lib/modules`` and hands over to the image's systemd. The guest's modprobe, udev and the agent
  then find the kernel's modules where they always look; the root disk is the run's overlay as
  always, and the cached image is never written.
- The modules disk holds ``RELEASE/`` as the package or the directory had it, plus what ``depmod``
  made for it here (a Debian package's modules come without ``modules.dep``).
- When anything the guest needs is missing, ``/init`` prints one line starting with ``ERROR_MARK``
  on the console and powers off: the run's reason is that line, not a timeout.

All of it is made once per content: the kernel file's sha256 (and the modules' content, and this
module's ``FORMAT``) name a directory under ``$FSMATRIX_CACHE/kernels``. What a run records of it
(``provenance.kernel_source``) and what its saved guest is keyed by (``snapshot.template_key``)
are sha256s of the files, never the path, so a kernel rebuilt at the same path is a new kernel.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsmatrix.agent import kernel as needs
from fsmatrix.agent import proc
from fsmatrix.agent.storage import filesystems
from fsmatrix.backends import cpio, image
from fsmatrix.backends.qemu import kernel_modules
from fsmatrix.backends.qemu.cmdline import DirectBoot
from fsmatrix.backends.qemu.kernel_modules import TOOL_TIMEOUT
from fsmatrix.errors import UserError

if TYPE_CHECKING:
    from fsmatrix.agent.cell import Cell

log = logging.getLogger("fsmatrix")

FORMAT = 1  # bump when what a prepared kernel holds changes: older ones are then not found
KERNELS_DIR = "kernels"
BUSYBOX = Path("/bin/busybox")
ROOT_LABEL = "fsmatrix-root"  # packer/scripts/base.sh labels the image's root filesystem so
MODULES_LABEL = "fsmatrix-modules"
MODULES_SERIAL = "fsmatrix-modules"
# What /init prints before it powers off when the guest cannot start: the backend's reason for the run.
ERROR_MARK = "fsmatrix-initramfs: error:"
# Modules the initramfs loads to reach the root disk (the rest come from the modules disk).
# The filesystem of the image's root disk (packer/scripts/base.sh) and of the modules disk: the
# guest's own, never one under test.
ROOT_FILESYSTEM = "ext4"
ROOT_MODULES = ("virtio_pci", "virtio_blk", "crc32c_generic", ROOT_FILESYSTEM)
NEEDED_FOR_ROOT = ("virtio_pci", "virtio_blk", ROOT_FILESYSTEM)  # without these there is no root disk
# no_timer_check: under TCG on a loaded host the kernel's check of the IO-APIC timer can fail and
# panic ("IO-APIC + timer doesn't work!"), as virtual machines' kernels commonly avoid.
APPEND = "root=LABEL=fsmatrix-root ro console=ttyS0,115200 panic=-1 no_timer_check"
DEVICE_WAIT_S = 120  # /init waits this long for a disk to appear (TCG is slow)
WAIT_ENV = "FSMATRIX_KERNEL_WAIT"  # seconds instead (fsmatrix.wait= on the kernel's command line)
DEB_MAGIC = b"!<arch>\n"
BZIMAGE_MAGIC = b"HdrS"  # x86 boot protocol: the setup header's signature at 0x202


@dataclass(frozen=True)
class PreparedKernel:
    """A kernel ready to boot: its files in ``directory`` and what runs record of it."""

    directory: Path
    record: dict[str, Any]  # kernel.json

    @property
    def release(self) -> str:
        return str(self.record["release"])

    @property
    def source(self) -> dict[str, Any]:
        """``provenance.kernel_source``: what was given, its sha256 and the release it boots."""
        return dict(self.record["source"])

    @property
    def modules(self) -> list[str] | None:
        """Every module the kernel has (loadable and built in, names with underscores); None when
        no modules were given."""
        found = self.record.get("modules")
        return None if found is None else list(found)

    @property
    def digests(self) -> dict[str, str]:
        """The sha256 of each file the guest boots from: what its saved guest is keyed by."""
        return dict(self.record["sha256"])

    def boot(self) -> DirectBoot:
        modules = self.directory / "modules.img"
        return DirectBoot(
            kernel=self.directory / "vmlinuz",
            initrd=self.directory / "initrd.img",
            append=append(),
            modules_disk=modules if modules.exists() else None,
            modules_serial=MODULES_SERIAL,
        )

    def lacking(self, cell: Cell) -> str | None:
        """The cell's filesystems and modules this kernel has no module for (None: it has them all,
        or no modules were given, which the guest then finds out)."""
        have = self.modules
        if have is None:
            return None
        wanted = [filesystems.get(name).kernel_module for name in needs.filesystems_of(cell)]
        wanted += needs.modules_of(cell)
        missing = [m for m in dict.fromkeys(wanted) if m and m not in have]
        return ", ".join(missing) or None


def append() -> str:
    """The kernel's command line: APPEND, and how long /init waits for its disks when
    $FSMATRIX_KERNEL_WAIT says (a whole number of seconds)."""
    wait = os.environ.get(WAIT_ENV, "").strip()
    if not wait:
        return APPEND
    if not wait.isdigit() or int(wait) < 1:
        raise UserError(f"{WAIT_ENV}={wait!r}: give a whole number of seconds, at least 1")
    return f"{APPEND} fsmatrix.wait={int(wait)}"


def cache_dir(cache: Path) -> Path:
    return cache / KERNELS_DIR


# --------------------------------------------------------------------------------------------
# what a file is


def sha256_tree(root: Path) -> str:
    """A directory's content: every path under it, its kind, and a file's bytes or a link's target."""
    sha = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            sha.update(f"l\0{rel}\0{os.readlink(path)}\0".encode())
        elif path.is_file():
            sha.update(f"f\0{rel}\0{path.stat().st_size}\0".encode())
            with path.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    sha.update(chunk)
        elif path.is_dir():
            sha.update(f"d\0{rel}\0".encode())
    return sha.hexdigest()


def kind_of(path: Path, setting: str = "vm.kernel") -> str:
    """ "deb" or "bzImage" from the file's first bytes; UserError when it is neither (or missing)."""
    if not path.exists():
        raise UserError(f"{setting} {str(path)!r}: no such file")
    if not path.is_file():
        raise UserError(f"{setting} {str(path)!r}: not a file; name a linux-image-*.deb or a bzImage")
    with path.open("rb") as fh:
        head = fh.read(len(DEB_MAGIC))
    if head == DEB_MAGIC:
        return "deb"
    if is_bzimage(path):
        return "bzImage"
    raise UserError(
        f"{setting} {str(path)!r}: not a kernel: neither a Debian package (linux-image-*.deb) "
        "nor an x86 bzImage (no boot header signature 'HdrS' at 0x202)"
    )


def is_bzimage(path: Path) -> bool:
    """Whether ``path`` starts with an x86 boot sector and setup header (what QEMU's -kernel loads)."""
    with path.open("rb") as fh:
        head = fh.read(0x206)
    return head[0x202:0x206] == BZIMAGE_MAGIC


def bzimage_release(path: Path) -> str:
    """The release (``uname -r``) a bzImage boots: its setup header's kernel_version string."""
    with path.open("rb") as fh:
        head = fh.read(0x4000 + 0x200)
    if head[0x202:0x206] != BZIMAGE_MAGIC:
        raise UserError(f"{path}: not an x86 bzImage (no boot header signature 'HdrS' at 0x202)")
    offset = int.from_bytes(head[0x20E:0x210], "little")
    if offset == 0:
        raise UserError(f"{path}: the bzImage names no kernel version (setup header kernel_version is 0)")
    with path.open("rb") as fh:
        fh.seek(offset + 0x200)
        text = fh.read(256).split(b"\0", 1)[0].decode(errors="replace")
    release = text.split(" ", 1)[0]
    if not release:
        raise UserError(f"{path}: the bzImage's kernel_version string is empty")
    return release


# --------------------------------------------------------------------------------------------
# preparing


def prepare(kernel: str, modules: str, cache: Path, echo: Callable[[str], None] = log.info) -> PreparedKernel:
    """The kernel ``kernel`` (with ``modules``) ready to boot: made once per content, then reused.
    UserError (exit 2) when what was given is no kernel, or has no way to its root disk."""
    path = Path(kernel).expanduser()
    kind = kind_of(path)
    modules_path = Path(modules).expanduser() if modules else None
    if kind == "deb" and modules_path is not None:
        raise UserError(f"vm.modules {modules!r}: a Debian package carries its own modules; leave vm.modules out")
    if modules_path is not None and not modules_path.exists():
        raise UserError(f"vm.modules {modules!r}: no such file or directory")
    kernel_sha = image.sha256_file(path)
    modules_sha = None
    if modules_path is not None:
        modules_sha = sha256_tree(modules_path) if modules_path.is_dir() else image.sha256_file(modules_path)
    busybox_sha = image.sha256_file(BUSYBOX) if BUSYBOX.is_file() else "none"
    # What the prepared files are made of: the kernel, its modules, busybox, /init and the root modules.
    made_of = {"kernel": kernel_sha, "modules": modules_sha, "busybox": busybox_sha, "init": init_script()}
    key_text = json.dumps({"format": FORMAT, **made_of, "root_modules": ROOT_MODULES})
    key = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    directory = cache_dir(cache) / key
    done = directory / "kernel.json"
    with image.locked(cache_dir(cache) / f"{key}.lock"):
        if done.exists():
            os.utime(done)  # the last use: what pruning goes by
            return _loaded(directory, kernel, modules)
        if not BUSYBOX.is_file():
            raise UserError(f"{BUSYBOX} not found (apt-get install busybox-static): a vm.kernel's initramfs needs it")
        building = directory.with_name(f"{key}.building")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        try:
            echo(f"vm.kernel: preparing {path} for direct boot (once per content): {directory}")
            started = time.monotonic()
            source: dict[str, Any] = {"path": kernel, "format": kind, "sha256": kernel_sha}
            if modules_path is not None:
                source["modules"] = {"path": modules, "sha256": modules_sha}
            record = _build(building, path, kind, modules_path, source)
            record["prepare_s"] = round(time.monotonic() - started, 1)
            (building / "kernel.json").write_text(json.dumps(record, indent=1) + "\n")
            shutil.rmtree(directory, ignore_errors=True)
            building.rename(directory)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return _loaded(directory, kernel, modules)


def _loaded(directory: Path, kernel: str, modules: str) -> PreparedKernel:
    record = json.loads((directory / "kernel.json").read_text())
    # The same content may have been given under another path: record the path of this run.
    record["source"]["path"] = kernel
    if modules and isinstance(record["source"].get("modules"), dict):
        record["source"]["modules"]["path"] = modules
    return PreparedKernel(directory, record)


def _build(out: Path, path: Path, kind: str, modules_path: Path | None, source: dict[str, Any]) -> dict[str, Any]:
    work = out / "work"
    work.mkdir()
    tree: Path | None  # lib/modules/RELEASE, copied under work/modules-root
    if kind == "deb":
        vmlinuz, release, tree, package = _unpack_deb(path, work)
        source.update(package)
    else:
        vmlinuz, release = path, bzimage_release(path)
        tree = None if modules_path is None else kernel_modules.modules_tree(modules_path, release, work)
    source["release"] = release
    shutil.copyfile(vmlinuz, out / "vmlinuz")
    record: dict[str, Any] = {"format": FORMAT, "release": release, "source": source, "modules": None}
    root_modules: list[Path] = []
    if tree is not None:
        kernel_modules.depmod(tree, release)
        names, deps, builtin = kernel_modules.module_index(tree)
        record["modules"] = sorted(names | builtin)
        absent = [m for m in NEEDED_FOR_ROOT if m not in names and m not in builtin]
        if absent:
            raise UserError(
                f"vm.kernel {source['path']!r} ({release}): its modules have no {', '.join(absent)}, "
                f"loadable or built in: the guest could not reach its root disk (virtio-blk, {ROOT_FILESYSTEM})"
            )
        root_modules = [tree / rel for rel in kernel_modules.load_order([m for m in ROOT_MODULES if m in names], deps)]
        kernel_modules.modules_disk(tree.parent, out / "modules.img", MODULES_LABEL, ROOT_FILESYSTEM)
    (out / "initrd.img").write_bytes(initramfs(root_modules, modules_disk=tree is not None))
    shutil.rmtree(work, ignore_errors=True)
    made = [name for name in ("vmlinuz", "initrd.img", "modules.img") if (out / name).exists()]
    record["sha256"] = {name: image.sha256_file(out / name) for name in made}
    return record


def _unpack_deb(path: Path, work: Path) -> tuple[Path, str, Path, dict[str, str]]:
    """(vmlinuz, release, modules tree, {package, version}) of a kernel package."""
    if not proc.have("dpkg-deb"):
        raise UserError("dpkg-deb not found (apt-get install dpkg): a vm.kernel .deb needs it")
    fields = proc.run(["dpkg-deb", "-f", str(path), "Package", "Version"], timeout=60, check=False)
    if fields.returncode != 0:
        raise UserError(f"vm.kernel {str(path)!r}: not a readable Debian package: {fields.stderr.strip()}")
    info = dict(line.split(": ", 1) for line in fields.stdout.splitlines() if ": " in line)
    unpacked = work / "deb"
    done = proc.run(["dpkg-deb", "-x", str(path), str(unpacked)], timeout=TOOL_TIMEOUT, check=False)
    if done.returncode != 0:
        raise UserError(f"vm.kernel {str(path)!r}: dpkg-deb cannot unpack it: {done.stderr.strip()}")
    kernels = sorted((unpacked / "boot").glob("vmlinuz-*"))
    if len(kernels) != 1:
        raise UserError(
            f"vm.kernel {str(path)!r} (package {info.get('Package', '?')}): not a kernel package: "
            f"it has {len(kernels)} boot/vmlinuz-* files, a linux-image-*.deb has one"
        )
    release = kernels[0].name.removeprefix("vmlinuz-")
    if not is_bzimage(kernels[0]):
        raise UserError(f"vm.kernel {str(path)!r}: its boot/{kernels[0].name} is not an x86 bzImage")
    trees = [unpacked / prefix / "modules" / release for prefix in ("lib", "usr/lib")]
    found = [t for t in trees if t.is_dir()]
    if not found:
        raise UserError(f"vm.kernel {str(path)!r}: the package has no lib/modules/{release}")
    tree = work / "modules-root" / release
    tree.parent.mkdir(parents=True)
    found[0].rename(tree)
    return kernels[0], release, tree, {"package": info.get("Package", ""), "version": info.get("Version", "")}


INIT = """#!/bin/busybox sh
# fsmatrix's initramfs for a vm.kernel (fsmatrix.backends.qemu.kernel_boot): reach the image's root
# disk, put the kernel's modules over its /lib/modules, start its systemd. Every failure: one line.
/bin/busybox --install -s /bin
export PATH=/bin
fail() {{ echo "{error} $*" >/dev/console; poweroff -f; sleep 60; }}
mount -t devtmpfs devtmpfs /dev || fail "cannot mount devtmpfs (the kernel needs CONFIG_DEVTMPFS)"
mount -t proc proc /proc
mount -t sysfs sysfs /sys
echo "fsmatrix-initramfs: kernel $(uname -r)"
for module in /modules/*.ko; do
    [ -e "$module" ] || continue
    insmod "$module" || fail "cannot load module ${{module##*/}} into kernel $(uname -r)"
done
wait_s={wait}  # or fsmatrix.wait=SECONDS on the kernel's command line ($FSMATRIX_KERNEL_WAIT)
for arg in $(cat /proc/cmdline); do
    case "$arg" in fsmatrix.wait=*) wait_s=${{arg#fsmatrix.wait=}} ;; esac
done
find_disk() {{
    tries=0
    until found=$(findfs "LABEL=$1" 2>/dev/null); do
        tries=$((tries + 1))
        [ "$tries" -ge $((wait_s * 10)) ] && fail "no disk labelled $1 after $wait_s s: $2"
        usleep 100000
    done
    echo "$found"
}}
root=$(find_disk {root} "the kernel lacks virtio-blk, msdos partitions or {fs}") || exit 1
mount -t {fs} -o ro "$root" /root || fail "cannot mount the root disk $root ({fs})"
if [ -e /modules-disk ]; then
    modules=$(find_disk {modules} "the kernel's modules disk did not appear") || exit 1
    mount -t {fs} -o ro "$modules" /root/lib/modules || fail "cannot mount the modules disk $modules"
    [ -d "/root/lib/modules/$(uname -r)" ] || fail "the modules disk has no $(uname -r)"
fi
mount --move /dev /root/dev
mount --move /proc /root/proc
mount --move /sys /root/sys
exec switch_root /root /sbin/init
"""


def init_script() -> str:
    return INIT.format(error=ERROR_MARK, wait=DEVICE_WAIT_S, root=ROOT_LABEL, modules=MODULES_LABEL, fs=ROOT_FILESYSTEM)


def initramfs(modules: list[Path], modules_disk: bool, busybox: Path = BUSYBOX) -> bytes:
    """The initramfs: busybox, ``modules`` (loaded in this order) and /init."""
    directory = stat.S_IFDIR | 0o755
    entries: list[cpio.Entry] = [(name, directory, b"", 0) for name in ("bin", "dev", "proc", "sys", "root", "modules")]
    entries += [
        ("dev/console", stat.S_IFCHR | 0o600, b"", os.makedev(5, 1)),
        ("bin/busybox", stat.S_IFREG | 0o755, busybox.read_bytes(), 0),
        ("init", stat.S_IFREG | 0o755, init_script().encode(), 0),
    ]
    for index, path in enumerate(modules):
        entries.append(
            (
                f"modules/{index:02d}-{kernel_modules.module_name(path.name)}.ko",
                stat.S_IFREG | 0o644,
                kernel_modules.decompressed(path),
                0,
            )
        )
    if modules_disk:
        entries.append(("modules-disk", stat.S_IFREG | 0o644, b"", 0))
    return cpio.newc(entries)


def guest_error(console: str) -> str | None:
    """The line /init printed before it powered off, or the kernel's panic line: why the guest never
    started (None when neither is on the console)."""
    for line in console.replace("\r", "").splitlines():
        if ERROR_MARK in line:
            return line[line.index(ERROR_MARK) :].strip()
    for line in console.replace("\r", "").splitlines():
        if "Kernel panic" in line:
            return line.strip()
    return None


def prune(cache: Path, unused_days: float) -> list[Path]:
    """Delete the prepared kernels no run has used for ``unused_days`` (``prepare`` touches
    kernel.json at every use); their saved guests then go with ``snapshot.prune_orphans``. A
    kernel being prepared (``.building``) is left alone. Returns the deleted directories."""
    deleted = []
    limit = time.time() - unused_days * 86400
    for done in sorted(cache_dir(cache).glob("*/kernel.json")):
        if done.parent.name.endswith(".building") or done.stat().st_mtime >= limit:
            continue
        shutil.rmtree(done.parent, ignore_errors=True)
        done.parent.with_name(f"{done.parent.name}.lock").unlink(missing_ok=True)
        deleted.append(done.parent)
    return deleted
