"""The guest side of job mode (fsmatrix.agent.guest) and the host's job disk (fsmatrix.backends.jobdisk).

Covers: the agent imports nothing outside the standard library; job.json checks; data disks
resolved only through by-id links; the route-table parsers on captured /proc files; a job disk
made without mounting and read back with debugfs; a whole job run by the guest entry point on a
tmpfs cell, with the result written to a job directory.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, TEST_DATA, Golden, golden_cases
from fsmatrix import __version__
from fsmatrix.agent import guest
from fsmatrix.agent.storage import data_disks
from fsmatrix.backends import jobdisk

DATA = TEST_DATA / "proc_net_route"
# /dev/disk/by-id as each guest image's udev makes it (Debian 12: udev 252, Debian 13: udev 257).
BY_ID_CAPTURES = sorted((TEST_DATA / "guest_by_id").glob("*.txt"))


def _job(**overrides: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "cell": {"filesystem": "tmpfs", "workload": {"threen1": {"start": 1, "end": 100}}},
        "cell_id": "tmpfs-t",
        "repeat": 1,
        "data_serials": [],
        "environment": {"backend": "vm"},
    }
    job.update(overrides)
    return job


def test_agent_imports_only_the_standard_library(tmp_path: Path) -> None:
    # A copy of exactly what goes into the guest, imported with no site-packages at all.
    package = tmp_path / "fsmatrix"
    shutil.copytree(
        REPO / "runner" / "fsmatrix" / "agent", package / "agent", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / "runner" / "fsmatrix" / "__init__.py", package / "__init__.py")
    modules = sorted(
        ".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__")
        for p in (package / "agent").rglob("*.py")
    )
    stdlib = [sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")]
    # The standard library's C extensions (_decimal, _contextvars, ...): in a virtualenv platstdlib is
    # the venv's own directory, and lib-dynload stays beside the interpreter's stdlib.
    lib_dynload = [str(Path(sysconfig.get_path(key)) / "lib-dynload") for key in ("stdlib", "platstdlib")]
    code = (
        "import importlib, sys\n"
        f"sys.path[:] = {[str(tmp_path), *stdlib, *lib_dynload]!r}\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(len(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "fsmatrix.agent.guest" in modules and "fsmatrix.agent.job" in modules


def test_agent_version_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fsmatrix.agent", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == f"fsmatrix {__version__}"


def test_parse_job_fills_defaults_and_rejects_bad_jobs() -> None:
    job = guest.parse_job({"cell": _job()["cell"], "cell_id": "c"})
    assert job["repeat"] == 1 and job["data_serials"] == [] and job["environment"] == {}
    assert job["reference"] is None  # an older host's job: the agent computes it, before the run
    assert guest.parse_job(_job(reference={"start": 1}))["reference"] == {"start": 1}
    for bad in (
        [],
        _job(cell={"workload": {}}),
        _job(cell_id=""),
        _job(repeat=0),
        _job(repeat=True),
        _job(data_serials="fsm-data0"),
        _job(environment=[]),
        _job(reference=[1, 100]),
        _job(host_time="now"),
        _job(host_time=True),
    ):
        with pytest.raises(guest.JobError):
            guest.parse_job(bad)
    assert job["host_time"] is None and guest.parse_job(_job(host_time=1.5e9))["host_time"] == 1.5e9


def test_clock_is_left_alone_when_close_to_the_hosts() -> None:
    """Only the no-op branches run here: setting this machine's clock is not a test's business (a
    restored guest's clock being set is checked by the image tests: its results carry today's times)."""
    assert guest.set_clock(None) is None
    assert guest.set_clock(time.time() + 1) is None


def test_parse_job_reads_buses_and_stays_compatible() -> None:
    old = guest.parse_job(_job(data_serials=["fsm-data0", "fsm-data1"]))
    assert old["data_buses"] == ["virtio-blk", "virtio-blk"]
    disks = [{"serial": "fsm-data0", "bus": "nvme"}, {"serial": "fsm-data1", "bus": "virtio-scsi"}]
    new = guest.parse_job(_job(data_serials=["fsm-data0", "fsm-data1"], data_disks=disks))
    assert new["data_serials"] == ["fsm-data0", "fsm-data1"] and new["data_buses"] == ["nvme", "virtio-scsi"]
    without_serials = _job(data_disks=disks)
    del without_serials["data_serials"]
    assert guest.parse_job(without_serials)["data_serials"] == ["fsm-data0", "fsm-data1"]
    for bad in (
        _job(data_disks=[{"serial": "fsm-data0", "bus": "ide"}]),
        _job(data_disks=[{"serial": "fsm-data0"}]),
        _job(data_disks="fsm-data0"),
        _job(data_serials=["fsm-data1"], data_disks=[{"serial": "fsm-data0", "bus": "nvme"}]),
    ):
        with pytest.raises(guest.JobError):
            guest.parse_job(bad)


def _guest_by_id(root: Path, capture: Path) -> Path:
    """A captured guest /dev/disk/by-id, rebuilt under ``root``: links into ``root``/dev, where each
    target is a block device node (this host's first loop device's numbers under the guest's name)."""
    by_id, dev = root / "disk" / "by-id", root / "dev"
    by_id.mkdir(parents=True)
    dev.mkdir()
    rdev = os.stat("/dev/loop0").st_rdev
    for line in capture.read_text().splitlines():
        if line.startswith("#"):
            continue
        name, _, target = line.split()
        node = dev / Path(target).name
        if not node.exists():
            os.mknod(node, 0o600 | stat.S_IFBLK, rdev)
        (by_id / name).symlink_to(f"../../dev/{node.name}")
    return by_id


@pytest.mark.root(reason="needs root: mknod")
@pytest.mark.parametrize("capture", BY_ID_CAPTURES, ids=lambda p: p.stem)
def test_data_disks_resolve_by_bus_on_captured_guest_links(tmp_path: Path, capture: Path) -> None:
    assert {p.stem for p in BY_ID_CAPTURES} >= {"debian12-qemu72", "debian13-qemu72"}
    by_id = _guest_by_id(tmp_path, capture)
    found = data_disks.resolve_data_disks(
        ["fsm-data0", "fsm-data1", "fsm-data2"], by_id=by_id, wait_s=0, buses=["virtio-blk", "virtio-scsi", "nvme"]
    )
    assert [Path(d).name for d in found] == ["vdb", "sda", "nvme0n1"]
    for serials, buses, message in (
        (["fsm-data1"], ["virtio-blk"], "no virtio-blk disk with serial 'fsm-data1'.*by-id has scsi-0QEMU"),
        (["fsm-data2"], ["virtio-scsi"], "no virtio-scsi disk"),
        (["fsm-data0"], ["nvme"], "no nvme disk"),
        (["fsm-data0"], ["sata"], "unknown bus"),
        (["fsm-data0"], [], "but 0 buses"),
    ):
        with pytest.raises(data_disks.DataDiskError, match=message):
            data_disks.resolve_data_disks(serials, by_id=by_id, wait_s=0, buses=buses)
    # A link with the right name must still lead to that bus's kind of disk.
    (by_id / "nvme-QEMU_NVMe_Ctrl_fsm-data9").symlink_to("../../dev/sda")
    with pytest.raises(data_disks.DataDiskError, match="not a nvme disk"):
        data_disks.resolve_data_disks(["fsm-data9"], by_id=by_id, wait_s=0, buses=["nvme"])


@pytest.mark.root(reason="needs root: mknod")
def test_data_disks_resolve_only_through_by_id(tmp_path: Path) -> None:
    by_id = tmp_path / "by-id"
    by_id.mkdir()
    block = tmp_path / "vdb"  # a block device node with a virtio-blk disk's name
    os.mknod(block, 0o600 | stat.S_IFBLK, os.stat("/dev/loop0").st_rdev)
    (by_id / "virtio-fsm-data0").symlink_to(block)
    (by_id / "virtio-not-a-disk").symlink_to("/dev/null")
    assert data_disks.resolve_data_disks(["fsm-data0"], by_id=by_id, wait_s=0) == [str(block)]
    for serials, message in (
        (["/dev/vda"], "not a plain virtio serial"),
        (["../vda"], "not a plain virtio serial"),
        (["a" * 21], "not a plain virtio serial"),
        (["fsmatrix-job"], "is the job disk"),
        (["fsm-data1"], "does not exist"),
        (["not-a-disk"], "not a block device"),
        (["fsm-data0", "fsm-data0"], "already in the job"),
    ):
        with pytest.raises(data_disks.DataDiskError, match=message):
            data_disks.resolve_data_disks(serials, by_id=by_id, wait_s=0)


@pytest.mark.parametrize("case", golden_cases("proc_net_route/route"))
def test_parse_route_table_golden(case: Golden) -> None:
    """Every captured /proc/net/route in tests/data/proc_net_route/route/ parses to its expected routes."""
    case.check(guest.parse_route_table)


@pytest.mark.parametrize("case", golden_cases("proc_net_route/ipv6_route"))
def test_parse_ipv6_route_table_golden(case: Golden) -> None:
    """Every captured /proc/net/ipv6_route in tests/data/proc_net_route/ipv6_route/ parses to its expected routes."""
    case.check(guest.parse_ipv6_route_table)


def test_route_parsers_on_captured_tables(tmp_path: Path) -> None:
    v4 = guest.parse_route_table((DATA / "route" / "host.txt").read_text())
    assert v4[0] == {"iface": "eth0", "destination": "0.0.0.0", "gateway": "192.0.2.1"}
    assert v4[1]["destination"] == "192.0.2.0"
    v6 = guest.parse_ipv6_route_table((DATA / "ipv6_route" / "host.txt").read_text())
    assert {"iface": "eth0", "destination": "0" * 32 + "/0"} in v6
    # The host has default routes; the captured guest tables (static address, no gateway) have none.
    proc_root = tmp_path / "proc"
    (proc_root / "net").mkdir(parents=True)
    for name, files in (
        ("host", ("route/host.txt", "ipv6_route/host.txt")),
        ("guest", ("route/guest.txt", "ipv6_route/guest.txt")),
    ):
        shutil.copy(DATA / files[0], proc_root / "net" / "route")
        shutil.copy(DATA / files[1], proc_root / "net" / "ipv6_route")
        state = guest.network_state(proc_root=proc_root, sys_root=tmp_path)
        assert state["default_route"] is (name == "host"), name


def test_job_disk_round_trip_without_mounting(tmp_path: Path) -> None:
    image = jobdisk.make_job_disk(tmp_path / "job.img", _job())
    assert image.stat().st_size == jobdisk.DEFAULT_SIZE_MIB << 20
    label = subprocess.run(["e2label", str(image)], capture_output=True, text=True, check=True).stdout.strip()
    assert label == "fsmatrix-job"
    assert json.loads(jobdisk.read_file(image, "job.json") or b"") == _job()
    assert jobdisk.read_result(image) is None  # the guest has not run yet
    assert jobdisk.read_log(image) is None
    # What the guest does: write result.json onto it (debugfs -w here, a mount in the guest).
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"status": "passed"}))
    subprocess.run(["debugfs", "-w", "-R", f"write {result} result.json", str(image)], capture_output=True, check=True)
    assert jobdisk.read_result(image) == {"status": "passed"}
    # A guest that died mid-write leaves no result (write_atomic), but never trust half a file.
    result.write_text('{"status": "pas')
    subprocess.run(["debugfs", "-w", "-R", "rm result.json", str(image)], capture_output=True, check=True)
    subprocess.run(["debugfs", "-w", "-R", f"write {result} result.json", str(image)], capture_output=True, check=True)
    assert jobdisk.read_file(image, "result.json") == b'{"status": "pas'
    assert jobdisk.read_result(image) is None
    assert str(tmp_path) not in Path("/proc/mounts").read_text()


def test_job_disk_refuses_a_job_the_guest_would_refuse(tmp_path: Path) -> None:
    with pytest.raises(guest.JobError):
        jobdisk.make_job_disk(tmp_path / "job.img", _job(repeat=0))
    assert not (tmp_path / "job.img").exists()


@pytest.mark.root(reason="needs root: mounts tmpfs")
def test_guest_runs_a_job_and_writes_the_result(tmp_path: Path) -> None:
    from fsmatrix.matrix import expand_document

    matrix = expand_document(
        {"axes": {"filesystem": ["tmpfs"], "workload": [{"threen1": {"start": 1, "end": 300, "workers": 1}}]}},
        "t",
    )
    cell = matrix.cells[0]
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "job.json").write_text(json.dumps(_job(cell=cell.params, cell_id=cell.id, repeat=2)))
    done = subprocess.run(
        [sys.executable, "-m", "fsmatrix.agent.guest", str(job_dir), "--workdir", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO / "runner")},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((job_dir / "result.json").read_text())
    assert result["status"] == "passed", result["reason"]
    assert result["cell_id"] == cell.id and result["repeat"] == 2
    assert result["verification"]["status"] == "passed"
    assert result["provenance"]["backend"] == "vm"
    assert result["provenance"]["guest"]["data_disks"] == {}
    assert "result: passed" in (job_dir / "agent.log").read_text()


@pytest.mark.root(reason="needs root: mounts tmpfs")
def test_guest_uses_the_reference_the_host_computed(tmp_path: Path) -> None:
    """A VM backend computes the workload's reference on the host (``job.reference_for``) and puts
    it in the job: the guest uses it as given (here made wrong on purpose, so the run fails)."""
    from fsmatrix.agent import job as agent_job
    from fsmatrix.matrix import expand_document

    matrix = expand_document(
        {"axes": {"filesystem": ["tmpfs"], "workload": [{"threen1": {"start": 3, "end": 999, "workers": 1}}]}},
        "t",
    )
    cell = matrix.cells[0]
    reference = agent_job.reference_for(cell.spec)
    assert reference is not None and (reference["start"], reference["end"]) == (3, 999)
    wrong = {**reference, "longest_sequence": reference["longest_sequence"] + 1, "seconds": 12.5}
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "job.json").write_text(json.dumps(_job(cell=cell.params, cell_id=cell.id, reference=wrong)))
    result = guest.run(job_dir, by_id=tmp_path, workdir=tmp_path / "work")
    assert result["status"] == "failed", result["reason"]
    assert result["verification"]["reference"]["seconds"] == 12.5
    assert f"the computed reference says {wrong['longest_sequence']}" in result["reason"]


def test_guest_writes_an_error_result_for_a_bad_job(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text(json.dumps(_job(data_serials=["/dev/sda"])))
    result = guest.run(tmp_path, by_id=tmp_path, workdir=tmp_path / "work")
    assert result["status"] == "error" and "not a plain virtio serial" in result["reason"]
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "error"


def test_parse_job_takes_the_hosts_limit_for_timeout_auto() -> None:
    """timeout: auto: the cell's JSON says "auto"; the host derived the number (runs.with_auto_timeout)."""
    cell = {**_job()["cell"], "timeout": "auto"}
    job = guest.parse_job(_job(cell=cell, timeout={"seconds": 300, "source": "auto: 3x slowest of 5 stored runs"}))
    assert (job["cell"].timeout, job["cell"].timeout_source) == (300, "auto: 3x slowest of 5 stored runs")
    assert job["cell"].to_dict()["timeout"] == "auto"
    plain = guest.parse_job(_job(timeout={"seconds": 300, "source": "x"}))  # only an auto cell takes it
    assert plain["cell"].timeout == _job()["cell"].get("timeout", 3600) and plain["cell"].timeout_source is None
    with pytest.raises(guest.JobError):
        guest.parse_job(_job(cell=cell, timeout={"seconds": "soon"}))
