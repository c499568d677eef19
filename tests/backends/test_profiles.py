"""Device profiles (fsmatrix.backends.qemu.profiles): their QEMU throttling, the host backend's refusal
to fake one, and matrix/profiles.yaml, the matrix that measures them. No VM boots here; the
throttled guest run is tests/vm/test_qemu_vm.py::test_hdd_profile_caps_guest_iops_and_nvme_runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO
from fsmatrix import matrix
from fsmatrix.backends.disks import Disk
from fsmatrix.backends.host import HostBackend
from fsmatrix.backends.qemu import cmdline, profiles
from fsmatrix.matrix import schema


def test_every_schema_profile_exists_and_native_is_unthrottled() -> None:
    assert tuple(profiles.PROFILES) == schema.DEVICE_PROFILES
    assert profiles.throttle("native") == {}
    for name, prof in profiles.PROFILES.items():
        assert prof.name == name and prof.description and "\n" not in prof.description


@pytest.mark.parametrize(("name", "iops", "bps"), [("ssd", 50_000, 500_000_000), ("hdd", 180, 150_000_000)])
def test_throttled_profiles_cap_iops_and_bandwidth_consistently(name: str, iops: int, bps: int) -> None:
    settings = profiles.throttle(name)
    assert settings["iops-total"] == iops and settings["bps-total"] == bps
    # A request of iops-size bytes costs one operation: at the IOPS cap that is the bandwidth cap,
    # so a 1 MiB sequential read is bounded by bps-total, not by iops-total per request.
    assert settings["iops-size"] * iops == pytest.approx(bps, rel=1e-3)
    assert not any(key.endswith("-max") for key in settings)  # no bursts


def test_hdd_throttling_reaches_the_qemu_drive(tmp_path: Path) -> None:
    disk = Disk(tmp_path / "d.img", "fsm-data0", throttle=profiles.throttle("hdd"))
    args = cmdline.disk_arguments(disk, 1)
    drive = args[args.index("-drive") + 1]
    assert drive.endswith(",throttling.bps-total=150000000,throttling.iops-size=833333,throttling.iops-total=180")
    assert ",throttling." not in " ".join(cmdline.disk_arguments(Disk(tmp_path / "d.img", "fsm-data0"), 1))


def test_unknown_profile_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown device profile 'tape'.*native, ssd, hdd"):
        profiles.throttle("tape")


def test_host_backend_skips_a_shaped_profile(tmp_path: Path) -> None:
    cells = matrix.expand_document(
        {
            "axes": {"filesystem": ["ext4"], "device.profile": ["hdd"]},
            "defaults": {"workload.fio": {"pattern": "randread", "file_size": "16M"}},
        },
        "t",
    ).cells
    result = HostBackend(workdir=tmp_path).run(cells[0], 1)
    assert result["status"] == "skipped"
    assert "'hdd'" in result["reason"] and "VM backend" in result["reason"]
    assert result["cell_id"] == cells[0].id and result["metrics"] == {}
    assert result["provenance"]["backend"] == "host"
    assert not list(tmp_path.iterdir())  # nothing was prepared


def test_profiles_matrix_measures_every_profile() -> None:
    m = matrix.load(REPO / "matrix" / "profiles.yaml")
    seen = {(c.params["device"]["profile"], c.summary()) for c in m.cells}
    assert {p for p, _ in seen} == set(profiles.PROFILES)
    assert len(seen) == len(m.cells) == 3 * len(profiles.PROFILES)
    for cell in m.cells:
        fio = cell.params["workload"]["fio"]
        assert fio["runtime"] > 0  # time-based: a throttled disk must not make it run for hours
