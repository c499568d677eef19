"""The qemu backend: its QEMU command line and disks (no boot), and (marker ``image``) real runs:
`fsmatrix run --backend qemu` on ext4 and jfs, and a run stopped for exceeding its timeout.

Boots run under TCG here (30-100 s each); the image is built first when it is not cached.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsmatrix import image
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.qemu import QemuBackend, qemu_supports_io_uring, running_vms
from fsmatrix.matrix import Cell, expand_document

FSMATRIX = [sys.executable, "-m", "fsmatrix"]
IMAGE_TEST_TIMEOUT = 3600  # includes building the image when it is not cached


def _cell(defaults: dict[str, object] | None = None, filesystem: str = "ext4") -> Cell:
    doc = {
        "axes": {
            "filesystem": [filesystem],
            "workload": [{"threen1": {"start": 1, "end": 100000, "workers": 2}}],
        },
        "defaults": {"storage.disk_size": "2G", **(defaults or {})},
    }
    return expand_document(doc, "t").cells[0]


@pytest.fixture
def workdir() -> Iterator[Path]:
    # cache=none opens the disks with O_DIRECT, which a tmpfs /tmp refuses.
    with tempfile.TemporaryDirectory(prefix="fsmatrix-qemu-test-", dir="/var/tmp") as d:
        yield Path(d)


# --------------------------------------------------------------------------------------------
# without booting


def test_command_line_disks_and_no_network(tmp_path: Path) -> None:
    backend = QemuBackend(workdir=tmp_path)
    golden = image.image_paths("0123456789abcdef", cache=tmp_path)
    backend._image = golden  # what preflight would find
    backend.accel, backend.aio = "tcg", "io_uring"
    cell = _cell({"storage.layout": "split-journal", "vm.cpus": 3, "vm.memory": "512M"})
    overlay, job_img = tmp_path / "root.qcow2", tmp_path / "job.img"
    data = [Disk(tmp_path / "data0.img", "fsm-data0"), Disk(tmp_path / "data1.img", "fsm-data1")]
    cmd = backend.command(cell, 2, overlay, job_img, data, tmp_path / "console.log", tmp_path / "qmp.sock")
    line = " ".join(cmd)

    assert cmd[cmd.index("-name") + 1] == f"fsmatrix-{cell.id}-r2"
    assert cmd[cmd.index("-smp") + 1] == "3" and cmd[cmd.index("-m") + 1] == "512"
    # The root disk is the overlay, writable (no snapshot): the golden image appears nowhere.
    assert f"file={overlay},if=none,id=root,format=qcow2" in line and "snapshot=on" not in line
    assert str(golden.qcow2) not in line
    # No NIC of any kind.
    assert cmd[cmd.index("-nic") + 1] == "none"
    assert "-netdev" not in cmd and "virtio-net" not in line
    assert f"unix:{tmp_path / 'qmp.sock'},server=on,wait=off" in cmd
    assert f"-serial file:{tmp_path / 'console.log'}" in line
    # Job disk and data disks: each with its serial, O_DIRECT, io_uring and an iothread of its own.
    for index, path in enumerate([job_img, data[0].path, data[1].path]):
        assert f"file={path},if=none,id=disk{index},format=raw,cache=none,aio=io_uring" in cmd
    for index in (1, 2):
        device = next(a for a in cmd if a.startswith(f"virtio-blk-pci,drive=disk{index},serial=fsm-data{index - 1},"))
        assert device.endswith(f",iothread=io{index}") and f"iothread,id=io{index}" in cmd


def test_data_disks_sparse_or_preallocated(tmp_path: Path) -> None:
    backend = QemuBackend(workdir=tmp_path)
    (tmp_path / "s").mkdir()
    (tmp_path / "p").mkdir()
    sparse = backend._data_disks(_cell({"storage.disk_size": "64M"}), tmp_path / "s")
    assert len(sparse) == 1 and sparse[0].serial == "fsm-data0"
    assert sparse[0].path.stat().st_size == 64 << 20 and sparse[0].path.stat().st_blocks == 0
    full = backend._data_disks(
        _cell(
            {"storage.disk_size": "64M", "storage.layout": "split-journal", "storage.disk_allocation": "preallocated"}
        ),
        tmp_path / "p",
    )
    assert len(full) == 2
    assert all(d.path.stat().st_blocks * 512 >= 64 << 20 for d in full)


def test_io_uring_probe_answers(tmp_path: Path) -> None:
    # Debian 12's QEMU has io_uring; the answer must be a real one either way, and leave nothing.
    assert isinstance(qemu_supports_io_uring(tmp_path), bool)
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------------------------
# booting the image


@pytest.fixture(scope="module")
def built() -> image.ImagePaths:
    return image.build()


def _our_vms(workdir: Path) -> list[tuple[int, str]]:
    """fsmatrix QEMU processes still running on disks under ``workdir``."""
    found = []
    for pid, name in running_vms():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(workdir) in cmdline:
            found.append((pid, name))
    return found


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
    started = time.monotonic()
    done = subprocess.run(
        [*FSMATRIX, "run", str(matrix), "--backend", "qemu", "--results", str(results), "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    print(f"two qemu runs: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stdout + done.stderr
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
        assert prov["vm"] == {"cpus": 2, "memory": "2G"}
        # The guest's kernel ran the cell: jfs is not in the host kernel at all.
        assert prov["kernel"] != os.uname().release
        assert doc["storage"]["readback"]["data"]["filesystem"] == filesystem
        assert [d["serial"] for d in doc["storage"]["devices"]] == ["fsm-data0"]
        log = path.with_suffix(".log").read_text()
        assert "guest agent.log:" in log and "result: passed" in log  # agent.log attached
        assert "guest console:" in log and "Linux version" in log  # and the console
    assert not _our_vms(workdir)
    assert not list(workdir.iterdir())


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_a_run_past_its_timeout_is_stopped(built: image.ImagePaths, workdir: Path) -> None:
    doc = {
        "axes": {"filesystem": ["ext4"], "workload": [{"threen1": {"start": 1, "end": 50_000_000, "workers": 2}}]},
        "defaults": {"storage.disk_size": "2G", "timeout": 5},
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
    assert elapsed < 25 + 30  # limit + QMP quit grace + disk setup, not the cell's 50M numbers
    assert not _our_vms(workdir)
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
        while not _our_vms(workdir) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.5)
        assert _our_vms(workdir), "the VM never started"
        time.sleep(2)
        run.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, out
    assert not _our_vms(workdir)
    assert not list(workdir.iterdir())
