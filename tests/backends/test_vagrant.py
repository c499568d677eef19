"""``vagrant up`` of one cell: the guest's session mode (on the host, over loop devices), the host's
spec for the Vagrantfile, and one real ``vagrant up`` under TCG through vagrant-libvirt."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, attached_under, mounted_under, needs_root
from fsmatrix import matrix
from fsmatrix.agent import guest, jsonfile, proc, session, storage
from fsmatrix.backends import image, libvirtd, vagrant
from fsmatrix.backends.qemu.backend import running_vms
from fsmatrix.errors import UserError

SCRATCH = Path("/var/tmp")  # not /tmp: tmpfs refuses O_DIRECT

MATRIX = """
name: vagrant-test
axes:
  filesystem: [ext4]
  workload:
    - fio: {pattern: randread, file_size: 32M, runtime: 2}
defaults:
  storage.disk_size: 256M
  vm: {cpus: 1, memory: 1G}
  timeout: 600
"""


def one_cell(tmp_path: Path, text: str = MATRIX) -> matrix.Cell:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    (cell,) = matrix.load(path).cells
    return cell


def job_doc(cell: matrix.Cell) -> dict[str, Any]:
    return {
        "cell": cell.params,
        "cell_id": cell.id,
        "repeat": 1,
        "data_serials": ["fsm-data0"],
        "data_disks": [{"serial": "fsm-data0", "bus": "virtio-blk"}],
        "environment": {"backend": "vagrant"},
    }


def mounted(path: Path) -> bool:
    return str(path) in mounted_under(path)


@needs_root
def test_session_prepare_run_release_on_loop_devices(tmp_path: Path) -> None:
    cell = one_cell(tmp_path)
    work = Path(os.path.realpath(SCRATCH)) / f"fsmatrix-session-test-{os.getpid()}"
    work.mkdir()
    session_dir, mount_root, by_id, run_dir = work / "session", work / "mnt", work / "by-id", work / "run"
    job_file = tmp_path / "job.json"
    jsonfile.write_atomic(job_file, job_doc(cell))
    try:
        with storage.loop_devices(1, storage.parse_size("256M"), work) as (device,):
            by_id.mkdir()
            # The guest names disks by serial; a by-id directory of our own maps the serial to the loop device.
            # The guest insists on a virtio-blk kernel name (vdX): a node of that name for the loop device.
            node = by_id / "vdz"
            os.mknod(node, 0o600 | stat.S_IFBLK, os.stat(device).st_rdev)
            (by_id / "virtio-fsm-data0").symlink_to(node)
            state = session.prepare(job_file, session_dir, mount_root, by_id)
            assert state["status"] == "ready" and state["data"] == str(mount_root / "data")
            assert jsonfile.read(session_dir / "job.json") == job_doc(cell)  # kept as given, buses included
            assert mounted(mount_root / "data")
            assert state["readback"]["data"]["filesystem"] == "ext4"
            (mount_root / "data" / "poke").write_text("user data\n")
            assert session.status(session_dir)["storage"]["pid"] == state["pid"]

            result = session.run(session_dir, run_dir, mount_root, by_id)
            assert result["status"] == "passed", result.get("reason")
            assert result["cell_id"] == cell.id and result["params"] == cell.params
            written = json.loads((session_dir / "result.json").read_text())
            assert written["status"] == "passed" and written["metrics"]["iops"] > 0
            # A fresh mkfs for the run, then a fresh one for poking again.
            assert mounted(mount_root / "data") and not (mount_root / "data" / "poke").exists()
            assert session.status(session_dir)["result"]["status"] == "passed"

            assert session.stop_holder(session_dir) is True
            assert not mounted_under(work)
            assert session.status(session_dir)["storage"] is None
            assert session.stop_holder(session_dir) is False
    finally:
        session.stop_holder(session_dir)
        leftovers = mounted_under(work), attached_under(work)
        shutil.rmtree(work, ignore_errors=True)
    assert leftovers == ([], [])


def test_session_prepare_refuses_a_bad_job(tmp_path: Path) -> None:
    job_file = tmp_path / "job.json"
    jsonfile.write_atomic(job_file, {"cell_id": "x", "cell": {"filesystem": "ext4", "workload": {}}})
    with pytest.raises(guest.JobError, match="must name exactly one of"):
        session.prepare(job_file, tmp_path / "session", tmp_path / "mnt", tmp_path)
    assert not (tmp_path / "session" / "job.json").exists()


# ------------------------------------------------------------------------------------ host: the spec


def test_spec_of_a_cell_comes_from_the_expanded_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = MATRIX.replace("filesystem: [ext4]", "filesystem: [ext4]\n  storage.layout: [md-raid0]").replace(
        "storage.disk_size: 256M", "storage.disk_size: 256M\n  storage.stripe_disks: 3\n  device.bus: virtio-scsi"
    )
    cell = one_cell(tmp_path, text)
    (tmp_path / "m.yaml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("FSMATRIX_CACHE", str(tmp_path / "cache"))
    # A fake built image in a fake cache: the spec only reads its catalog and checksum.
    paths = image.image_paths("0123456789abcdef")
    paths.qcow2.parent.mkdir(parents=True)
    for path in paths.files:
        path.write_text("x")
    paths.sha256.write_text(f"{'a' * 64}  {paths.qcow2.name}\n")
    paths.catalog.write_text(json.dumps(image._catalog(paths, "0.1.0.20260101000000", "b" * 64)))

    doc = vagrant.spec(tmp_path / "m.yaml", cell.id, driver="qemu", network="loopback", image_name=paths.name)
    assert doc["box"] == {
        "name": image.BOX_NAME,
        "version": "0.1.0.20260101000000",
        "url": paths.catalog.as_uri(),
        "image": paths.name,
    }
    assert (doc["driver"], doc["accel"], doc["network"]) == ("qemu", "tcg", "loopback")
    assert (doc["cpus"], doc["memory_mib"]) == (1, 1024)
    assert [d["serial"] for d in doc["disks"]] == ["fsm-data0", "fsm-data1", "fsm-data2"]
    assert {d["size_bytes"] for d in doc["disks"]} == {256 << 20}
    assert {(d["bus"], d["libvirt_bus"]) for d in doc["disks"]} == {("virtio-scsi", "scsi")}
    assert doc["job"]["data_disks"] == [{"serial": f"fsm-data{i}", "bus": "virtio-scsi"} for i in range(3)]
    assert doc["job"]["cell"] == cell.params and doc["job"]["cell_id"] == cell.id
    assert doc["job"]["data_serials"] == ["fsm-data0", "fsm-data1", "fsm-data2"]
    assert doc["job"]["environment"]["backend"] == "vagrant"
    assert doc["ssh"]["username"] == "root" and doc["ssh"]["private_key_path"].startswith(str(tmp_path / "cache"))

    plain = vagrant.spec(driver="kvm", network="management", image_name=paths.name)
    assert plain["job"] is None and plain["disks"] == [] and plain["driver"] == "kvm"
    with pytest.raises(UserError, match="matches no cell"):
        vagrant.spec(tmp_path / "m.yaml", "nope-*", driver="qemu", image_name=paths.name)
    with pytest.raises(UserError, match="make image"):
        vagrant.spec(driver="qemu", image_name="fsmatrix-ffffffffffffffff")


# ------------------------------------------------------------------------------------ one real vagrant up

VAGRANT_DIR = REPO / "vagrant"
UP_TIMEOUT_S = 1200.0


def _have_vagrant_libvirt() -> bool:
    if not proc.have("vagrant"):
        return False
    plugins = proc.run(["vagrant", "plugin", "list"], timeout=120, check=False, env={**os.environ, **_QUIET})
    return "vagrant-libvirt" in plugins.stdout


_QUIET = {"VAGRANT_CHECKPOINT_DISABLE": "1", "VAGRANT_NO_COLOR": "1"}


def _virsh(*args: str, check: bool = True) -> str:
    return proc.run(["virsh", "-q", "-c", libvirtd.URI, *args], timeout=120, check=check).stdout


@needs_root
def test_vagrant_up_runs_a_cell_and_destroy_leaves_nothing(tmp_path: Path) -> None:
    if not _have_vagrant_libvirt():  # checked here, not at collection: `vagrant plugin list` takes seconds
        pytest.skip("needs vagrant and vagrant-libvirt (apt-get install vagrant-libvirt)")
    cell = one_cell(tmp_path)
    paths = image.build(echo=lambda _line: None)  # reuses the image of the current sources when built
    name = f"fsmatrix-vagrant-test-{os.getpid()}"
    work = Path(os.path.realpath(SCRATCH)) / name
    pool_dir = work / "pool"
    env = {
        **os.environ,
        **_QUIET,
        "VAGRANT_HOME": str(work / "vagrant-home"),  # the box is added here, not to the user's boxes
        "VAGRANT_DOTFILE_PATH": str(work / "dot"),
        "VAGRANT_DEFAULT_PROVIDER": "libvirt",
        "VAGRANT_CWD": str(VAGRANT_DIR),
        "FSMATRIX_BIN": f"{sys.executable} -m fsmatrix",
        "FSMATRIX_IMAGE": paths.name,
        "FSMATRIX_MATRIX": str(tmp_path / "m.yaml"),
        "FSMATRIX_CELL": cell.id,
        "FSMATRIX_VAGRANT_NETWORK": "loopback",
        "FSMATRIX_LIBVIRT_POOL": name,
        "FSMATRIX_LIBVIRT_PREFIX": f"{name}-",
    }
    env.pop("FSMATRIX_LIBVIRT_DRIVER", None)  # the probe decides: tcg here
    with libvirtd.running() as daemons:
        # With fsmatrix's own libvirtd in a network namespace, QEMU's forwarded SSH port is in there too.
        netns = ["ip", "netns", "exec", daemons.netns] if daemons.netns else []

        def vagrant_cmd(*args: str, timeout: float = 300, check: bool = True) -> str:
            return proc.run([*netns, "vagrant", *args], env=env, timeout=timeout, check=check).stdout

        pool_dir.mkdir(parents=True)
        _virsh("pool-create-as", name, "dir", "--target", str(pool_dir))  # transient: gone once destroyed
        networks_before = set(_virsh("net-list", "--all", "--name").split())
        try:
            assert "validated successfully" in vagrant_cmd("validate")
            vagrant_cmd("up", timeout=UP_TIMEOUT_S)
            assert vagrant_cmd("ssh", "-c", "findmnt -n -o FSTYPE /mnt/fsmatrix/data").strip() == "ext4"
            size = vagrant_cmd("ssh", "-c", "blockdev --getsize64 /dev/disk/by-id/virtio-fsm-data0")
            assert int(size) == storage.parse_size(cell.params["storage"]["disk_size"])
            ran = vagrant_cmd("ssh", "-c", "fsmatrix-session run", timeout=cell.params["timeout"] + 120, check=False)
            doc = json.loads(vagrant_cmd("ssh", "-c", "cat /var/lib/fsmatrix/session/result.json"))
            assert doc["status"] == "passed", (doc.get("reason"), ran)
            assert doc["cell_id"] == cell.id and doc["params"] == cell.params
            assert doc["metrics"]["iops"] > 0 and doc["storage"]["devices"]
            prov = doc["provenance"]
            assert (prov["backend"], prov["accel"], prov["image_name"]) == ("vagrant", "tcg", paths.name)
            assert prov["guest"]["data_disks"] == {"fsm-data0": "/dev/vdb"}
            assert prov["vagrant"]["device_deviations"] == ["device.iothread=true: no iothread per disk"]
        finally:
            vagrant_cmd("destroy", "-f", timeout=300, check=False)
            domains = [d for d in _virsh("list", "--all", "--name").split() if d.startswith(name)]
            volumes = _virsh("vol-list", name, check=False).split()
            for volume in _virsh("vol-list", name, "--details", check=False).splitlines():
                _virsh("vol-delete", "--pool", name, volume.split()[0], check=False)  # the uploaded box
            _virsh("pool-destroy", name, check=False)
            networks_after = set(_virsh("net-list", "--all", "--name").split())
            shutil.rmtree(work, ignore_errors=True)
    assert domains == []
    assert [v for v in volumes if "default" in v] == []  # the VM's own disks went with `vagrant destroy`
    assert networks_after == networks_before
    assert name not in " ".join(n for _pid, n in running_vms(prefix=name))
