"""The qemu backend's real runs (booting the guest image): `fsmatrix run --backend qemu` on ext4
and jfs, a run stopped for exceeding its timeout, an interrupted run; device profiles, buses and
passthrough devices: an hdd-throttled fio cell and a native nvme one, and a run on a loop device
passed through with --device on virtio-scsi. Without a boot: tests/backends/test_qemu.py.

Boots run under TCG here (30-100 s each); the image is built first when it is not cached.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import FSMATRIX, IMAGE_TEST_TIMEOUT, run_on_qemu, vms_under
from fsmatrix.agent import storage
from fsmatrix.backends import image
from fsmatrix.backends.qemu import profiles, snapshot
from fsmatrix.backends.qemu.backend import QemuBackend
from fsmatrix.matrix import expand_document


def _run_qemu_matrix(matrix: Path, results: Path, workdir: Path, timeout: float) -> None:
    """`fsmatrix run --backend qemu` on ``matrix``; fails the test unless every run passed."""
    started = time.monotonic()
    done = run_on_qemu(matrix, results, workdir, timeout)
    print(f"qemu runs of {matrix.name}: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------------------------
# booting the image


@pytest.fixture(scope="module")
def built() -> image.ImagePaths:
    return image.build()


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_run_on_ext4_and_jfs_in_the_guest(built: image.ImagePaths, tmp_path: Path, workdir: Path) -> None:
    matrix = tmp_path / "vm.yaml"
    matrix.write_text(
        "name: vm\n"
        "axes:\n"
        "  filesystem: [ext4, jfs]\n"
        "  workload:\n"
        "    - threen1: {start: 1, end: 100000, workers: 2}\n"
        "defaults:\n"
        "  storage.disk_size: 2G\n"
        "repeat: 1\n"
    )
    results = tmp_path / "results"
    _run_qemu_matrix(matrix, results, workdir, timeout=1200)
    docs = {json.loads(p.read_text())["params"]["filesystem"]: p for p in results.glob("vm/*/r1.json")}
    assert sorted(docs) == ["ext4", "jfs"]
    sha = built.sha256.read_text().split()[0]
    for filesystem, path in docs.items():
        doc = json.loads(path.read_text())
        prov = doc["provenance"]
        assert doc["status"] == "passed", doc.get("reason")
        assert doc["verification"]["status"] == "passed"
        assert prov["backend"] == "qemu" and prov["accel"] in ("kvm", "tcg")
        assert prov["image"]["name"] == built.name and prov["image"]["sha256"] == sha
        assert prov["image"]["packages"]  # the guest's manifest
        assert prov["vm"] == {"cpus": 2, "memory": "2G", "start": "restore"}
        # The restored guest's clock was set from the job: its times are today's, not the template's.
        started_at = datetime.fromisoformat(doc["started_at"])
        assert abs((datetime.now(UTC) - started_at).total_seconds()) < 1200
        # The guest's kernel ran the cell: jfs is not in the host kernel at all.
        assert prov["kernel"] != os.uname().release
        # ... and provenance.host names the machine under the guest.
        host = prov["host"]
        assert host["kernel"] == os.uname().release and host["cpu_count"] == os.cpu_count()
        assert host["cpu_model"] != prov["cpu_model"]  # the host's CPU, not QEMU's virtual one
        assert host["qemu_version"].startswith("QEMU emulator version") and len(host["machine_id"]) == 16
        assert host["fsmatrix_git"] == image.git_sha()  # the host side's commit, beside the image's
        assert host["workdir"]["fstype"] and prov["device_profile"] == "native"
        assert doc["samples"]["run_cpu_source"] == "cgroup2"  # the guest agent's own cgroup, under systemd
        assert doc["storage"]["readback"]["data"]["filesystem"] == filesystem
        assert [d["serial"] for d in doc["storage"]["devices"]] == ["fsm-data0"]
        log = path.with_suffix(".log").read_text()
        assert "guest agent.log:" in log and "result: passed" in log  # agent.log attached
        # ... and the console: a restored guest's starts where the template was saved (no boot messages).
        assert "guest console:" in log and " INFO job " in log and "Linux version" not in log
    assert not vms_under(workdir)
    assert not list(workdir.iterdir())


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_a_run_past_its_timeout_is_stopped(
    built: image.ImagePaths, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(snapshot.START_ENV, "boot")  # this run boots (the restore path is every other test's)
    doc = {
        # hours under TCG, and it fits its disk (the fit check refuses 1..50,000,000 spelled on 2G)
        "axes": {"filesystem": ["ext4"], "workload": [{"threen1": {"start": 1, "end": 10_000_000, "workers": 2}}]},
        "defaults": {"storage.disk_size": "4G", "workload.threen1.keys": "integer", "timeout": 5},
    }
    cell = expand_document(doc, "t").cells[0]
    # 5 s + 20 s of allowance: the guest is still booting when its time is up.
    backend = QemuBackend(workdir=workdir, boot_allowance=20)
    backend.preflight([cell])
    started = time.monotonic()
    result = backend.run(cell, 1)
    elapsed = time.monotonic() - started
    print(f"timeout run: {elapsed:.0f} s")
    assert result["status"] == "timeout", result.get("reason")
    assert "did not power off within 25 s" in result["reason"]
    assert result["details"]["console_tail"].strip()
    assert result["details"]["console_tail"] in result["reason"]
    assert len(result["details"]["console_tail"].splitlines()) <= 40
    assert result["provenance"]["backend"] == "qemu" and result["provenance"]["image"]["name"] == built.name
    assert result["provenance"]["vm"]["start"] == "boot"
    # Stopped at its limit, not after the cell's 10M numbers (hours under TCG); a wide bound for a
    # loaded machine (the libvirt twin of this test once took 53 s): the status and reason are the check.
    assert elapsed < 25 + 240
    assert not vms_under(workdir)
    assert not list(workdir.iterdir())


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_interrupt_kills_the_vm_and_cleans_up(built: image.ImagePaths, tmp_path: Path, workdir: Path) -> None:
    matrix = tmp_path / "vm.yaml"
    matrix.write_text("name: vm\naxes:\n  filesystem: [ext4]\n  workload:\n    - threen1: {start: 1, end: 100000}\n")
    run = subprocess.Popen(
        [
            *FSMATRIX,
            "run",
            str(matrix),
            "--backend",
            "qemu",
            "--results",
            str(tmp_path / "r"),
            "--workdir",
            str(workdir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not vms_under(workdir) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.5)
        assert vms_under(workdir), "the VM never started"
        time.sleep(2)
        run.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, out
    assert not vms_under(workdir)
    assert not list(workdir.iterdir())


def _fio_cell_yaml(name: str, cells: list[str]) -> str:
    """A matrix of fio randread 4k cells (given as flow mappings of settings) on ext4."""
    lines = [f"name: {name}", "include:"]
    lines += [
        f"  - {{filesystem: ext4, workload: {{fio: {{pattern: randread, record_size: 4K, file_size: 4M, "
        f"runtime: 10}}}}, {cell}}}"
        for cell in cells
    ]
    lines += ["defaults:", "  storage.disk_size: 1G", "  timeout: 600", "repeat: 1"]
    return "\n".join(lines) + "\n"


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_hdd_profile_caps_guest_iops_and_nvme_runs(built: image.ImagePaths, tmp_path: Path, workdir: Path) -> None:
    matrix = tmp_path / "devices.yaml"
    matrix.write_text(_fio_cell_yaml("devices", ["device.profile: hdd", "device.profile: native, device.bus: nvme"]))
    results = tmp_path / "results"
    _run_qemu_matrix(matrix, results, workdir, timeout=2400)
    docs = [json.loads(p.read_text()) for p in results.glob("devices/*/r1.json")]
    by_profile = {doc["params"]["device"]["profile"]: doc for doc in docs}
    assert sorted(by_profile) == ["hdd", "native"]
    for doc in docs:
        assert doc["status"] == "passed", doc.get("reason")
        details = doc["details"]
        print(
            doc["params"]["device"],
            f"iops {doc['metrics']['iops']:.0f}",
            details["boot_to_agent_s"],
            details["vm_wall_s"],
        )
        assert 0 < details["boot_to_agent_s"] < details["vm_wall_s"]
    hdd, native = by_profile["hdd"], by_profile["native"]
    limit = profiles.throttle("hdd")["iops-total"]
    assert 0 < hdd["metrics"]["iops"] <= limit * 1.1
    assert native["metrics"]["iops"] > 3 * hdd["metrics"]["iops"]
    # Each data disk was found on its bus: /dev/vdX for virtio-blk, the NVMe namespace for nvme.
    assert next(iter(hdd["provenance"]["guest"]["data_disks"].values())).startswith("/dev/vd")
    assert native["provenance"]["guest"]["data_disks"] == {"fsm-data0": "/dev/nvme0n1"}
    assert not vms_under(workdir)
    assert not list(workdir.iterdir())


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_passthrough_loop_device_on_virtio_scsi(built: image.ImagePaths, tmp_path: Path, workdir: Path) -> None:
    matrix = tmp_path / "pass.yaml"
    matrix.write_text(
        _fio_cell_yaml(
            "pass", ["device.bus: virtio-scsi, device.logical_block_size: 4096, device.physical_block_size: 4096"]
        )
    )
    results = tmp_path / "results"
    (workdir / "loops").mkdir()
    with storage.loop_devices(1, 1 << 30, workdir / "loops") as (device,):
        started = time.monotonic()
        args = ["--results", str(results), "--workdir", str(workdir / "vm"), "--device", device, "--yes"]
        done = subprocess.run(
            [*FSMATRIX, "run", str(matrix), "--backend", "qemu", *args],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        print(f"passthrough run: {time.monotonic() - started:.0f} s")
        assert done.returncode == 0, done.stdout + done.stderr
        # The guest made its filesystem on the device itself.
        kind = subprocess.run(["blkid", "-o", "value", "-s", "TYPE", device], capture_output=True, text=True)
        assert kind.stdout.strip() == "ext4"
    (doc,) = [json.loads(p.read_text()) for p in results.glob("pass/*/r1.json")]
    assert doc["status"] == "passed", doc.get("reason")
    assert doc["provenance"]["device_source"] == "block"
    assert doc["provenance"]["guest"]["data_disks"] == {"fsm-data0": "/dev/sda"}
    log = (results / "pass" / doc["cell_id"]).glob("r1.log")
    assert any(f"file={device},if=none,id=disk1,format=raw,cache=none" in p.read_text() for p in log)
    assert not vms_under(workdir)
