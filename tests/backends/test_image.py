"""The guest image without booting it: inputs hash, the Packer files, QEMU command lines,
pruning the cache. The built image booted: tests/vm/test_image_vm.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FSMATRIX, REPO
from fsmatrix import image_definitions
from fsmatrix.backends import image
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu import cmdline, snapshot

PACKER = REPO / "packer"

needs_packer = pytest.mark.skipif(
    shutil.which("packer") is None, reason="packer not installed (make image installs it)"
)


# --------------------------------------------------------------------------------------------
# without an image


def _copy_inputs(dest: Path) -> None:
    shutil.copytree(PACKER, dest / "packer")
    shutil.copytree(REPO / "runner" / "fsmatrix" / "agent", dest / "runner" / "fsmatrix" / "agent")
    shutil.copy(REPO / "runner" / "fsmatrix" / "__init__.py", dest / "runner" / "fsmatrix" / "__init__.py")


def test_inputs_hash_follows_the_inputs(tmp_path: Path) -> None:
    _copy_inputs(tmp_path)
    first = image.inputs_hash(tmp_path)
    assert first == image.inputs_hash(tmp_path) and len(first) == 16
    # Caches and files outside the inputs do not count.
    (tmp_path / "runner" / "fsmatrix" / "agent" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "runner" / "fsmatrix" / "agent" / "__pycache__" / "x.pyc").write_bytes(b"x")
    (tmp_path / "runner" / "fsmatrix" / "cli.py").write_text("# not in the guest\n")
    assert image.inputs_hash(tmp_path) == first
    key = b"ssh-ed25519 AAAA test"
    base = image.base_hash(key, tmp_path)
    guest_py = tmp_path / "runner" / "fsmatrix" / "agent" / "guest.py"
    guest_py.write_text(guest_py.read_text() + "\n# changed\n")
    changed_agent = image.inputs_hash(tmp_path)
    assert changed_agent != first
    assert image.base_hash(key, tmp_path) == base  # a changed agent reruns Packer only
    packages = tmp_path / "packer" / "packages.txt"
    packages.write_text(packages.read_text() + "strace\n")
    assert image.inputs_hash(tmp_path) not in (first, changed_agent)
    assert image.base_hash(key, tmp_path) != base
    assert image.base_hash(b"another key", tmp_path) != image.base_hash(key, tmp_path)


def test_image_paths_live_in_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(image.CACHE_ENV, str(tmp_path))
    paths = image.image_paths("0123456789abcdef")
    assert paths.name == "fsmatrix-0123456789abcdef"
    assert all(p.parent == tmp_path / "images" and p.name.startswith(paths.name) for p in paths.files)
    assert not paths.complete()


def test_agent_tarball_holds_only_the_agent(tmp_path: Path) -> None:
    import tarfile

    with tarfile.open(image.write_agent_tarball(tmp_path / "a.tar")) as tar:
        names = tar.getnames()
    assert "fsmatrix/__init__.py" in names and "fsmatrix/agent/guest.py" in names
    assert "fsmatrix/agent/workloads/threen1/threen1.m" in names
    assert all(n == "fsmatrix/__init__.py" or n.startswith("fsmatrix/agent/") for n in names)
    assert not any("__pycache__" in n for n in names)


def test_qemu_command_network_and_disks(tmp_path: Path) -> None:
    common = {"accel": "tcg", "name": "fsmatrix-t", "serial_log": tmp_path / "s.log"}
    offline = cmdline.qemu_command(
        cmdline.QemuVm(
            tmp_path / "i.qcow2", drives=[Disk(tmp_path / "job.img", "fsmatrix-job", iothread=False)], **common
        )
    )
    assert offline[offline.index("-nic") + 1] == "none"
    assert any(a.startswith("virtio-blk-pci,drive=disk0,serial=fsmatrix-job,") for a in offline)
    assert any("snapshot=on" in arg for arg in offline)
    online = cmdline.qemu_command(cmdline.QemuVm(tmp_path / "i.qcow2", ssh_port=2345, **common))
    netdev = online[online.index("-netdev") + 1]
    assert "restrict=on" in netdev and "hostfwd=tcp:127.0.0.1:2345-:22" in netdev


def test_probe_initramfs_is_newc_cpio(tmp_path: Path) -> None:
    archive = image.probe_initramfs(tmp_path / "probe.cpio").read_bytes()
    assert archive.startswith(b"070701") and len(archive) % 4 == 0
    for name in (b"init\0", b"dev/console\0", b"bin/busybox\0", b"TRAILER!!!\0"):
        assert name in archive
    assert image.PROBE_MARKER.encode() in archive


def test_shell_scripts_are_shellcheck_clean() -> None:
    scripts = sorted(str(p) for p in (PACKER / "scripts").glob("*.sh"))
    assert scripts
    done = subprocess.run(["shellcheck", *scripts], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


@needs_packer
def test_packer_files_are_formatted_and_valid(tmp_path: Path) -> None:
    done = subprocess.run(["packer", "fmt", "-check", "-diff", "."], cwd=PACKER, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    key = image.ssh_key(tmp_path)
    tarball = image.write_agent_tarball(tmp_path / "agent.tar")
    base = tmp_path / "base.qcow2"
    base.write_bytes(b"")
    args = ["-var", f"ssh_private_key_file={key}", "-var", f"agent_tarball={tarball}", "-var", f"base_image={base}"]
    # The image's own files, as a build writes them (packer/images/debian13.yaml's here).
    definition = image_definitions.get("debian13")
    packages = image.write_package_list(tmp_path / "packages.txt", definition)
    (tmp_path / "image-definition.json").write_text(json.dumps(definition.manifest_fields()))
    args += ["-var", f"packages_file={packages}", "-var", f"definition_file={tmp_path / 'image-definition.json'}"]
    env = {**os.environ, "CHECKPOINT_DISABLE": "1"}
    done = subprocess.run(["packer", "validate", *args, "."], cwd=PACKER, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Error" not in done.stdout + done.stderr


def test_prune_keeps_the_current_image_and_the_newest_others(tmp_path: Path) -> None:
    current = image.image_paths(cache=tmp_path)
    old = [image.image_paths(f"{n:016x}", cache=tmp_path) for n in range(3)]
    # The current sources' image is the oldest file here: it is kept anyway.
    for stamp, paths in enumerate([current, *old]):
        paths.qcow2.parent.mkdir(parents=True, exist_ok=True)
        for path in paths.files:
            path.write_text("x")
            os.utime(path, (1_000_000 + stamp, 1_000_000 + stamp))
    assert [p.name for p in image.built_images(tmp_path)] == [old[2].name, old[1].name, old[0].name, current.name]
    deleted = image.prune(1, cache=tmp_path)
    assert [p.name for p in deleted] == [old[1].name, old[0].name]
    assert current.complete() and old[2].complete()
    assert not any(p.exists() for gone in deleted for p in gone.files)


def test_prune_deletes_the_saved_guests_of_images_that_are_gone(tmp_path: Path) -> None:
    kept, gone = image.image_paths("a" * 16, cache=tmp_path), image.image_paths("b" * 16, cache=tmp_path)
    kept.qcow2.parent.mkdir(parents=True)
    kept.qcow2.write_text("x")
    root = tmp_path / snapshot.SNAPSHOT_DIR
    for key, paths in (("k1", kept), ("k2", gone)):
        (root / key).mkdir(parents=True)
        (root / key / "state").write_text("memory")
        (root / key / "template.json").write_text(json.dumps({"key": key, "image": str(paths.qcow2)}))
        (root / f"{key}.lock").touch()
    (root / "k3.building").mkdir()  # being saved, its record just written: left alone whatever it says
    (root / "k3.building" / "template.json").write_text(json.dumps({"key": "k3", "image": str(gone.qcow2)}))
    (root / "k4").mkdir()
    (root / "k4" / "template.json").write_text("{not json")  # not ours to judge
    done = subprocess.run([*FSMATRIX, "image", "prune"], env={**os.environ, image.CACHE_ENV: str(tmp_path)},
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0
    assert f"deleted the saved guest {root / 'k2'} (its image or vm.kernel is gone)" in done.stdout
    assert sorted(p.name for p in root.iterdir()) == ["k1", "k1.lock", "k3.building", "k4"]
    assert snapshot.prune_orphans(tmp_path) == []
