"""vm.kernel without a boot: what is given is checked (missing, not a kernel, no modules for the
release or for the cell's filesystem: exit 2 with one line, before any VM starts), prepared once per
content (the kernel file's sha256), kept out of the ids of cells that do not use it, and booted with
its own command line and saved-guest key. Booting it: tests/vm/test_kernel_vm.py.

The bzImages here are stand-ins (a valid x86 boot header and version string, no kernel behind
them): nothing boots them. Their "modules" are built in (modules.builtin), which depmod and the
checks read as a real kernel's; the real kernel package is booted in the VM tests."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from conftest import FSMATRIX
from fsmatrix import matrix
from fsmatrix.backends.qemu import cmdline, kernel_boot, kernel_modules, snapshot
from fsmatrix.errors import UserError
from test_bad_input import refused

RELEASE = "6.99.0-fsmatrix-test"
# What the guest needs to reach its root disk, built in; and what an xfs cell needs, or not.
ROOT_BUILTIN = ["kernel/drivers/virtio/virtio_pci.ko", "kernel/drivers/block/virtio_blk.ko", "kernel/fs/ext4/ext4.ko"]


def fake_bzimage(path: Path, release: str = RELEASE) -> Path:
    """A file with an x86 boot header whose kernel_version names ``release`` (nothing boots it)."""
    data = bytearray(0x4000)
    data[0x202:0x206] = b"HdrS"
    text_at = 0x3000
    data[0x20E:0x210] = (text_at - 0x200).to_bytes(2, "little")
    version = f"{release} (test@fsmatrix) #1 SMP PREEMPT_DYNAMIC".encode() + b"\0"
    data[text_at : text_at + len(version)] = version
    path.write_bytes(bytes(data))
    return path


def modules_dir(root: Path, release: str = RELEASE, builtin: tuple[str, ...] = ()) -> Path:
    """An INSTALL_MOD_PATH-style tree, ROOT/lib/modules/RELEASE, whose modules are all built in."""
    tree = root / "lib" / "modules" / release
    (tree / "kernel").mkdir(parents=True)
    (tree / "modules.order").write_text("")
    (tree / "modules.builtin").write_text("\n".join([*ROOT_BUILTIN, *builtin]) + "\n")
    return root


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("FSMATRIX_CACHE", str(path))
    return path


def run_refused(tmp_path: Path, cache: Path, cell: str) -> str:
    """`fsmatrix run --backend qemu` of one xfs fio cell with ``cell``'s vm settings: refused."""
    m = tmp_path / "kernel.yaml"
    m.write_text(
        "name: kernel\n"
        "axes: {filesystem: [xfs]}\n"
        "defaults:\n"
        "  workload: {fio: {pattern: randread, file_size: 4M}}\n"
        f"  {cell}\n"
    )
    workdir = tmp_path / "work"
    env = {**os.environ, "FSMATRIX_CACHE": str(cache)}
    return refused(
        "run", str(m), "--backend", "qemu", "--results", str(tmp_path / "r"), "--workdir", str(workdir), env=env
    )


# --------------------------------------------------------------------------------------------
# bad input: one line, exit 2, no VM


def test_a_missing_kernel_is_refused(tmp_path: Path, cache: Path) -> None:
    line = run_refused(tmp_path, cache, f"vm.kernel: {tmp_path / 'nothing'}")
    assert "vm.kernel" in line and "no such file" in line and "nothing" in line


def test_a_file_that_is_no_kernel_is_refused(tmp_path: Path, cache: Path) -> None:
    text = tmp_path / "vmlinuz"
    text.write_text("this is not a kernel\n" * 100)
    line = run_refused(tmp_path, cache, f"vm.kernel: {text}")
    assert "not a kernel" in line and "linux-image-*.deb" in line and "bzImage" in line
    with pytest.raises(UserError, match="not a file; name a linux-image"):
        kernel_boot.prepare(str(tmp_path), "", cache)  # a directory


def test_a_kernel_without_the_cells_filesystem_is_refused_before_the_vm(tmp_path: Path, cache: Path) -> None:
    kernel = fake_bzimage(tmp_path / "bzImage")
    modules = modules_dir(tmp_path / "mods")
    line = run_refused(tmp_path, cache, f"vm: {{kernel: {kernel}, modules: {modules}}}")
    assert "has no module xfs" in line and RELEASE in line
    # ... and with xfs built in, the same cell gets past the check (the prepared kernel says so).
    with_xfs = modules_dir(tmp_path / "mods-xfs", builtin=("kernel/fs/xfs/xfs.ko",))
    prepared = kernel_boot.prepare(str(kernel), str(with_xfs), cache)
    cell = matrix.expand_document(
        {"name": "k", "axes": {"filesystem": ["xfs"]}, "defaults": {"workload": {"fio": {"pattern": "randread"}}}},
        "k.yaml",
    ).cells[0]
    assert prepared.lacking(cell.spec) is None
    assert kernel_boot.prepare(str(kernel), str(modules), cache).lacking(cell.spec) == "xfs"


def test_modules_of_another_release_are_refused(tmp_path: Path, cache: Path) -> None:
    kernel = fake_bzimage(tmp_path / "bzImage")
    other = modules_dir(tmp_path / "mods", release="6.1.0-other")
    with pytest.raises(UserError, match=f"no modules for release {RELEASE}.*it has 6.1.0-other"):
        kernel_boot.prepare(str(kernel), str(other), cache)


def test_modules_without_the_root_disk_drivers_are_refused(tmp_path: Path, cache: Path) -> None:
    kernel = fake_bzimage(tmp_path / "bzImage")
    mods = modules_dir(tmp_path / "mods")
    tree = mods / "lib/modules" / RELEASE
    (tree / "modules.builtin").write_text("kernel/fs/ext4/ext4.ko\n")  # no virtio
    with pytest.raises(UserError, match="no virtio_pci, virtio_blk.*root disk"):
        kernel_boot.prepare(str(kernel), str(mods), cache)


def test_a_package_without_a_kernel_is_refused(tmp_path: Path, cache: Path) -> None:
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(
        "Package: not-a-kernel\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\nDescription: test\n"
    )
    (root / "usr/share/doc/not-a-kernel").mkdir(parents=True)
    (root / "usr/share/doc/not-a-kernel/README").write_text("hello\n")
    deb = tmp_path / "not-a-kernel.deb"
    subprocess.run(["dpkg-deb", "-b", "-Zgzip", str(root), str(deb)], check=True, capture_output=True)
    with pytest.raises(UserError, match="not-a-kernel.*not a kernel package: it has 0 boot/vmlinuz"):
        kernel_boot.prepare(str(deb), "", cache)
    with pytest.raises(UserError, match="a Debian package carries its own modules"):
        kernel_boot.prepare(str(deb), str(tmp_path), cache)


def test_vm_modules_need_vm_kernel(tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text("axes: {filesystem: [ext4]}\ndefaults:\n  workload: {fio: {pattern: randread}}\n  vm.modules: /x\n")
    with pytest.raises(UserError, match=r"m.yaml:\d+: vm.modules are a vm.kernel bzImage's modules: set vm.kernel too"):
        matrix.load(m)


# --------------------------------------------------------------------------------------------
# ids, caching, command line, saved guests


def test_vm_kernel_stays_out_of_the_ids_of_cells_without_it() -> None:
    doc = {"name": "k", "axes": {"filesystem": ["xfs"]}, "defaults": {"workload": {"fio": {"pattern": "randread"}}}}
    plain = matrix.expand_document(doc, "k.yaml").cells[0]
    assert plain.spec.to_dict()["vm"] == {"cpus": 2, "memory": "2G"}  # as before vm.kernel existed
    own = matrix.expand_document({**doc, "defaults": {**doc["defaults"], "vm.kernel": "k.deb"}}, "k.yaml").cells[0]
    assert own.spec.to_dict()["vm"] == {"cpus": 2, "memory": "2G", "kernel": "k.deb"}
    assert own.id != plain.id


def test_a_kernel_is_prepared_once_per_content(tmp_path: Path, cache: Path) -> None:
    kernel = fake_bzimage(tmp_path / "bzImage")
    mods = modules_dir(tmp_path / "mods", builtin=("kernel/fs/xfs/xfs.ko",))
    first = kernel_boot.prepare(str(kernel), str(mods), cache)
    again = kernel_boot.prepare(str(kernel), str(mods), cache)
    assert again.directory == first.directory and again.digests == first.digests
    source = first.source
    assert source["release"] == RELEASE and source["format"] == "bzImage" and source["path"] == str(kernel)
    assert source["sha256"] == hashlib.sha256(kernel.read_bytes()).hexdigest()
    assert set(first.digests) == {"vmlinuz", "initrd.img", "modules.img"}
    # Rebuilt at the same path (a bisect): another kernel, prepared anew.
    fake_bzimage(kernel, "6.99.1-fsmatrix-test")
    other = modules_dir(tmp_path / "mods2", release="6.99.1-fsmatrix-test", builtin=("kernel/fs/xfs/xfs.ko",))
    rebuilt = kernel_boot.prepare(str(kernel), str(other), cache)
    assert rebuilt.directory != first.directory and rebuilt.digests["vmlinuz"] != first.digests["vmlinuz"]
    assert rebuilt.release == "6.99.1-fsmatrix-test"
    # The initramfs carries busybox and /init, whose failures are one marked line.
    initrd = (first.directory / "initrd.img").read_bytes()
    assert initrd.startswith(b"070701") and kernel_boot.ERROR_MARK.encode() in initrd and b"switch_root" in initrd


def test_the_kernel_boots_directly_and_its_saved_guest_is_keyed_by_content(tmp_path: Path) -> None:
    files = {name: tmp_path / name for name in ("vmlinuz", "initrd", "modules.img")}
    boot = cmdline.DirectBoot(files["vmlinuz"], files["initrd"], kernel_boot.APPEND, files["modules.img"])
    cmd = cmdline.qemu_command(
        cmdline.QemuVm(tmp_path / "root.qcow2", accel="tcg", name="fsmatrix-t", serial_log=tmp_path / "c", boot=boot)
    )
    assert cmd[cmd.index("-kernel") + 1] == str(files["vmlinuz"]) and "-initrd" in cmd
    assert "root=LABEL=fsmatrix-root" in cmd[cmd.index("-append") + 1]
    assert any("readonly=on" in arg and "modules.img" in arg for arg in cmd)
    assert "virtio-blk-pci,drive=root" in cmd and not any("bootindex" in arg for arg in cmd)
    plain = cmdline.qemu_command(
        cmdline.QemuVm(tmp_path / "root.qcow2", accel="tcg", name="fsmatrix-t", serial_log=tmp_path / "c")
    )
    assert "virtio-blk-pci,drive=root,bootindex=0" in plain and "-kernel" not in plain
    # Without a kernel the key is what it always was: saved guests of the image's kernel stay valid.
    legacy = json.dumps({"format": snapshot.FORMAT, "image": "sha", "qemu": "7.2", "command": plain})
    assert snapshot.template_key(plain, "sha", "7.2") == hashlib.sha256(legacy.encode()).hexdigest()[:16]
    # The same command line with different kernel content: different saved guests.
    one = snapshot.template_key(cmd, "sha", "7.2", {"vmlinuz": "a", "initrd.img": "b"})
    two = snapshot.template_key(cmd, "sha", "7.2", {"vmlinuz": "c", "initrd.img": "b"})
    assert len({one, two, snapshot.template_key(cmd, "sha", "7.2")}) == 3


def test_the_guests_own_line_is_the_reason() -> None:
    console = (
        "[    1.0] Linux version 6.12\r\nfsmatrix-initramfs: error: no disk labelled fsmatrix-root after 5 s: x\r\n"
    )
    assert kernel_boot.guest_error(console) == "fsmatrix-initramfs: error: no disk labelled fsmatrix-root after 5 s: x"
    assert kernel_boot.guest_error("[ 2.0] Kernel panic - not syncing: VFS: Unable to mount root fs\n") == (
        "[ 2.0] Kernel panic - not syncing: VFS: Unable to mount root fs"
    )
    assert kernel_boot.guest_error("login:\n") is None


def test_the_host_backend_skips_a_vm_kernel_cell(tmp_path: Path) -> None:
    from fsmatrix.backends.host import HostBackend

    cell = matrix.expand_document(
        {
            "name": "k",
            "axes": {"filesystem": ["ext4"]},
            "defaults": {"workload": {"fio": {"pattern": "randread"}}, "vm.kernel": "k"},
        },
        "k.yaml",
    ).cells[0]
    doc = HostBackend(workdir=tmp_path).run(cell, 1)
    assert doc["status"] == "skipped" and "vm.kernel" in doc["reason"] and "--backend qemu" in doc["reason"]


def test_prune_deletes_kernels_unused_for_days_and_their_saved_guests(tmp_path: Path, cache: Path) -> None:
    used = kernel_boot.prepare(str(fake_bzimage(tmp_path / "a")), str(modules_dir(tmp_path / "ma")), cache)
    old = kernel_boot.prepare(
        str(fake_bzimage(tmp_path / "b", "6.99.2-old")), str(modules_dir(tmp_path / "mb", "6.99.2-old")), cache
    )
    root = cache / snapshot.SNAPSHOT_DIR
    qcow2 = tmp_path / "image.qcow2"
    qcow2.write_text("x")
    for key, prepared in (("t1", used), ("t2", old)):
        (root / key).mkdir(parents=True)
        record = {"key": key, "image": str(qcow2), "kernel": str(prepared.directory)}
        (root / key / "template.json").write_text(json.dumps(record))
    month_ago = time.time() - 30 * 86400
    os.utime(old.directory / "kernel.json", (month_ago, month_ago))
    env = {**os.environ, "FSMATRIX_CACHE": str(cache)}
    prune = [*FSMATRIX, "image", "prune", "--kernel-days", "14"]
    done = subprocess.run(prune, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert f"deleted the prepared vm.kernel {old.directory}" in done.stdout
    assert f"deleted the saved guest {root / 't2'} (its image or vm.kernel is gone)" in done.stdout
    assert used.directory.is_dir() and not old.directory.exists() and sorted(p.name for p in root.iterdir()) == ["t1"]


def fake_deb(tmp_path: Path, files: dict[str, bytes], name: str = "linux-image-6.99.0-test") -> Path:
    """A Debian package holding ``files`` (path -> bytes), made with dpkg-deb."""
    root = tmp_path / f"{name}-root"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\nDescription: test\n"
    )
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    deb = tmp_path / f"{name}.deb"
    subprocess.run(["dpkg-deb", "-b", "-Zgzip", str(root), str(deb)], check=True, capture_output=True)
    return deb


def test_a_package_whose_kernel_or_modules_are_wrong_is_refused(tmp_path: Path, cache: Path) -> None:
    no_bzimage = fake_deb(tmp_path, {f"boot/vmlinuz-{RELEASE}": b"\0" * 4096}, "linux-image-a")
    with pytest.raises(UserError, match=f"its boot/vmlinuz-{RELEASE} is not an x86 bzImage"):
        kernel_boot.prepare(str(no_bzimage), "", cache)
    bzimage = fake_bzimage(tmp_path / "bz").read_bytes()
    no_modules = fake_deb(tmp_path, {f"boot/vmlinuz-{RELEASE}": bzimage}, "linux-image-b")
    with pytest.raises(UserError, match=f"the package has no lib/modules/{RELEASE}"):
        kernel_boot.prepare(str(no_modules), "", cache)
    # ... and one laid out as Debian 13's are (usr/lib/modules) is read, with its name and version.
    tree = f"usr/lib/modules/{RELEASE}"
    good = fake_deb(
        tmp_path,
        {f"boot/vmlinuz-{RELEASE}": bzimage, f"{tree}/modules.order": b"", f"{tree}/modules.builtin": b"\n".join(
            [m.encode() for m in ROOT_BUILTIN]
        )},
        "linux-image-c",
    )  # fmt: skip
    prepared = kernel_boot.prepare(str(good), "", cache)
    assert prepared.release == RELEASE and prepared.source["package"] == "linux-image-c"
    assert prepared.source["version"] == "1.0" and prepared.source["format"] == "deb"


def test_modules_as_a_tarball_and_bad_module_paths(tmp_path: Path, cache: Path) -> None:
    kernel = fake_bzimage(tmp_path / "bzImage")
    mods = modules_dir(tmp_path / "mods")
    (mods / "lib/modules" / RELEASE / "build").symlink_to("/usr/src/linux-build")  # as modules_install leaves it
    tarball = tmp_path / "modules.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(mods / "lib", arcname="lib")
    prepared = kernel_boot.prepare(str(kernel), str(tarball), cache)
    assert prepared.modules == sorted(kernel_modules.module_name(m) for m in ROOT_BUILTIN)
    assert prepared.source["modules"]["sha256"] == hashlib.sha256(tarball.read_bytes()).hexdigest()
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tarball at all")
    with pytest.raises(UserError, match="not a readable tarball"):
        kernel_boot.prepare(str(kernel), str(bad), cache)
    outside = tmp_path / "outside.tar"
    with tarfile.open(outside, "w") as tar:
        tar.add(mods / "lib/modules" / RELEASE / "modules.order", arcname="../modules.order")
    with pytest.raises(UserError, match="'../modules.order' points outside the tarball"):
        kernel_boot.prepare(str(kernel), str(outside), cache)
    with pytest.raises(UserError, match="vm.modules .*: no such file or directory"):
        kernel_boot.prepare(str(kernel), str(tmp_path / "missing"), cache)


def test_a_bzimage_that_names_no_release_is_refused(tmp_path: Path) -> None:
    kernel = fake_bzimage(tmp_path / "bzImage")
    data = bytearray(kernel.read_bytes())
    data[0x20E:0x210] = b"\0\0"
    kernel.write_bytes(bytes(data))
    with pytest.raises(UserError, match="names no kernel version"):
        kernel_boot.bzimage_release(kernel)


def test_the_libvirt_and_vagrant_backends_refuse_a_vm_kernel_cell(tmp_path: Path, cache: Path) -> None:
    from fsmatrix.backends import image, vagrant
    from fsmatrix.backends.libvirt import LibvirtBackend

    text = (
        "name: k\naxes: {filesystem: [ext4]}\ndefaults:\n  workload: {fio: {pattern: randread}}\n  vm.kernel: k.deb\n"
    )
    (tmp_path / "m.yaml").write_text(text)
    (cell,) = matrix.load(tmp_path / "m.yaml").cells
    with pytest.raises(UserError, match="vm.kernel is booted by the qemu backend only, not by libvirt"):
        LibvirtBackend(workdir=tmp_path / "work").preflight([cell])
    paths = image.image_paths("0123456789abcdef")  # a fake built image: vagrant.spec reads its catalog
    paths.qcow2.parent.mkdir(parents=True)
    for path in paths.files:
        path.write_text("x")
    paths.catalog.write_text(json.dumps(image._catalog(paths, "0.1.0.20260101000000", "b" * 64)))
    with pytest.raises(UserError, match="vm.kernel is booted by the qemu backend only"):
        vagrant.spec(tmp_path / "m.yaml", cell.id, driver="qemu", network="loopback", image_name=paths.name)


def test_how_long_init_waits_for_its_disks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kernel_boot.WAIT_ENV, raising=False)
    assert kernel_boot.append() == kernel_boot.APPEND and "wait_s=120" in kernel_boot.init_script()
    monkeypatch.setenv(kernel_boot.WAIT_ENV, "5")
    assert kernel_boot.append() == f"{kernel_boot.APPEND} fsmatrix.wait=5"
    monkeypatch.setenv(kernel_boot.WAIT_ENV, "soon")
    with pytest.raises(UserError, match="FSMATRIX_KERNEL_WAIT='soon': give a whole number of seconds"):
        kernel_boot.append()
