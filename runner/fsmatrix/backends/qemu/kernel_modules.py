"""A kernel's modules as ``vm.kernel`` boots them (backends/qemu/kernel_boot.py): the tree
``lib/modules/RELEASE`` taken from a directory or a tarball, indexed with ``depmod``, the few the
initramfs loads in dependency order (decompressed), and the read-only disk that holds them all."""

from __future__ import annotations

import gzip
import lzma
import shutil
import subprocess
import tarfile
from collections.abc import Iterable
from pathlib import Path

from fsmatrix.agent import proc
from fsmatrix.errors import UserError

TOOL_TIMEOUT = 600


def modules_tree(given: Path, release: str, work: Path) -> Path:
    """The bzImage's lib/modules/RELEASE from a directory or a tarball, copied under ``work``."""
    root = given
    if given.is_file():
        root = work / "tar"
        try:
            with tarfile.open(given) as tar:
                tar.extractall(root, members=_modules_members(tar, given))
        except (tarfile.TarError, OSError) as exc:
            raise UserError(f"vm.modules {str(given)!r}: not a readable tarball: {exc}") from exc
    candidates = [root, root / release, root / "lib/modules" / release, root / "usr/lib/modules" / release]
    # The release's own directory, one holding it, or an INSTALL_MOD_PATH root; else a modules
    # directory under another name (its modules are then taken to be the bzImage's).
    found = next((c for c in candidates if c.name == release and _looks_like_modules(c)), None)
    if found is None and _looks_like_modules(root):
        found = root
    if found is None:
        listing = root / "lib/modules" if (root / "lib/modules").is_dir() else root
        there = sorted(p.name for p in listing.iterdir() if p.is_dir()) if listing.is_dir() else []
        has = f"; it has {', '.join(there)}" if there else ""
        raise UserError(
            f"vm.modules {str(given)!r}: no modules for release {release} (the bzImage's): expected "
            f"{release}/ or lib/modules/{release}/ in it{has}"
        )
    tree = work / "modules-root" / release
    tree.parent.mkdir(parents=True)
    # The build and source links point into the kernel's build tree: not modules, and not ours to copy.
    shutil.copytree(found, tree, symlinks=True, ignore=lambda d, names: [n for n in names if n in ("build", "source")])
    return tree


def _modules_members(tar: tarfile.TarFile, given: Path) -> list[tarfile.TarInfo]:
    """The tarball's directories and files, none outside it (Python 3.11.2's tarfile has no
    extraction filters); the build and source links (absolute, into a build tree) are left out."""
    members = []
    for member in tar.getmembers():
        name = Path(member.name)
        if name.is_absolute() or ".." in name.parts:
            raise UserError(f"vm.modules {str(given)!r}: {member.name!r} points outside the tarball")
        if member.isdir() or member.isfile():
            members.append(member)
        elif member.issym() and name.name not in ("build", "source"):
            target = Path(member.linkname)
            if target.is_absolute() or ".." in target.parts:
                raise UserError(f"vm.modules {str(given)!r}: the link {member.name!r} points outside the tarball")
            members.append(member)
    return members


def _looks_like_modules(directory: Path) -> bool:
    return directory.is_dir() and ((directory / "modules.order").exists() or (directory / "kernel").is_dir())


def depmod(tree: Path, release: str) -> None:
    """modules.dep and friends for ``tree`` (lib/modules/RELEASE laid out under a root of its own)."""
    base = tree.parent.parent / "depmod-base"
    (base / "lib").mkdir(parents=True, exist_ok=True)
    link = base / "lib" / "modules"
    link.unlink(missing_ok=True)
    link.symlink_to(tree.parent)
    try:
        done = proc.run(["depmod", "-b", str(base), release], timeout=TOOL_TIMEOUT, check=False)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if done.returncode != 0 or not (tree / "modules.dep").exists():
        raise UserError(f"depmod failed on the modules of {release}: {(done.stderr or done.stdout).strip()[:300]}")


def module_name(rel: str) -> str:
    """A module's name from its file (kernel/fs/xfs/xfs.ko.xz -> xfs; dashes become underscores)."""
    name = rel.rsplit("/", 1)[-1]
    for suffix in (".xz", ".gz", ".zst"):
        name = name.removesuffix(suffix)
    return name.removesuffix(".ko").replace("-", "_")


def module_index(tree: Path) -> tuple[set[str], dict[str, tuple[str, list[str]]], set[str]]:
    """(loadable names, name -> (file, its dependencies' files), built-in names) from depmod's files."""
    deps: dict[str, tuple[str, list[str]]] = {}
    for line in (tree / "modules.dep").read_text().splitlines():
        target, _, wanted = line.partition(":")
        if target:
            deps[module_name(target)] = (target, wanted.split())
    builtin_file = tree / "modules.builtin"
    builtin = (
        {module_name(line.strip()) for line in builtin_file.read_text().splitlines() if line.strip()}
        if builtin_file.exists()
        else set()
    )
    return set(deps), deps, builtin


def load_order(wanted: Iterable[str], deps: dict[str, tuple[str, list[str]]]) -> list[str]:
    """The files of ``wanted`` and everything they need, each after what it needs."""
    order: list[str] = []

    def visit(name: str, seen: frozenset[str]) -> None:
        target, wants = deps[name]
        if target in order or name in seen:
            return
        for dep in wants:
            visit(module_name(dep), seen | {name})
        order.append(target)

    for name in wanted:
        visit(name, frozenset())
    return order


def decompressed(path: Path) -> bytes:
    """A module's bytes as insmod wants them (busybox reads no compressed modules)."""
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".gz"):
        return gzip.decompress(data)
    if path.name.endswith(".zst"):
        if not proc.have("zstd"):
            raise UserError(f"{path.name}: zstd not found (apt-get install zstd): the modules are zstd-compressed")
        # bytes out, which proc.run (text) does not give
        return subprocess.run(["zstd", "-dc", str(path)], capture_output=True, check=True, timeout=60).stdout
    return data


def modules_disk(modules_root: Path, image: Path, label: str, filesystem: str) -> None:
    """A ``filesystem`` image labelled ``label`` (no journal: it is only read) holding RELEASE/ at
    its root, made without mounting."""
    size = sum(p.stat().st_size for p in modules_root.rglob("*") if p.is_file() and not p.is_symlink())
    mib = size * 5 // 4 // (1 << 20) + 32
    cmd = [
        "mke2fs", "-q", "-F", "-t", filesystem, "-O", "^has_journal", "-L", label,
        "-d", str(modules_root), str(image), f"{mib}M",
    ]  # fmt: skip
    done = proc.run(cmd, timeout=TOOL_TIMEOUT, check=False)
    if done.returncode != 0:
        raise proc.CommandError(cmd, done.returncode, done.stdout + done.stderr)
