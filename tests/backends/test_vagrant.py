"""``vagrant up`` of one cell, without a VM: the guest's session mode (on the host, over loop
devices) and the host's spec for the Vagrantfile. One real ``vagrant up``:
tests/vm/test_vagrant_vm.py.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from conftest import attached_under, mounted_under, needs_root
from fsmatrix import matrix
from fsmatrix.agent import guest, jsonfile, session, storage
from fsmatrix.backends import image, vagrant
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


def one_cell(tmp_path: Path, text: str = MATRIX) -> matrix.MatrixCell:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    (cell,) = matrix.load(path).cells
    return cell


def job_doc(cell: matrix.MatrixCell) -> dict[str, Any]:
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
