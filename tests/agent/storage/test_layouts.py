"""Storage layouts md-raid0 and lvm-stripe, and filesystem raw.

This host's kernel has neither md nor device-mapper: here the tests cover the mdadm / lvs parsers
(on output captured in the guest), required_devices, the refusals, the Skipped answer, and raw
fio / sysbench on a loop device. md and LVM themselves run in the guest:
tests/vm/test_layouts_vm.py.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import TEST_DATA, Golden, attached_under, golden_cases, mounted_under
from fsmatrix.agent import storage
from fsmatrix.agent.contract import Workspace
from fsmatrix.agent.job import CellRepeat, Job, run_job
from fsmatrix.agent.parsing import parse_cell, standalone_cell
from fsmatrix.agent.sampler import parse_diskstats
from fsmatrix.agent.storage import devices as devmod
from fsmatrix.agent.storage import stripe
from fsmatrix.agent.storage.prepare import StorageSpec
from fsmatrix.agent.workloads import fio, sysbench

DATA = TEST_DATA

needs_root = pytest.mark.root(reason="needs root: losetup")


def cell(filesystem: str = "ext4", workload: dict[str, Any] | None = None, **storage_settings: Any) -> dict[str, Any]:
    settings = {
        "layout": "single",
        "disk_size": "256M",
        "journal_filesystem": "ext2",
        "journal_mount_options": "",
        "stripe_disks": 4,
        "stripe_size": "64K",
        **storage_settings,
    }
    return {
        "filesystem": filesystem,
        "mkfs_options": "",
        "mount_options": "",
        "storage": settings,
        "workload": workload or {"fio": {"pattern": "randread", "file_size": "16M", "runtime": 1}},
        "timeout": 600,
    }


# --------------------------------------------------------------------------------------------
# parsers, on output captured in the guest


def test_parse_mdadm_detail_of_a_raid0_array() -> None:
    detail = stripe.parse_mdadm_detail((DATA / "mdadm" / "detail-raid0-2disks.txt").read_text())
    assert detail["level"] == "raid0"
    assert detail["raid_devices"] == 2
    assert detail["chunk_size"] == "64K" and detail["chunk_size_bytes"] == 64 << 10
    assert detail["metadata_version"] == "1.2"
    assert detail["members"] == ["/dev/vdc", "/dev/vdd"]  # vda root, vdb the job disk
    assert re.search(r"(^|:)fsmatrix-\d+$", detail["name"])
    assert detail["array_size_bytes"] and detail["array_size_bytes"] > (1 << 30)  # two 1 GiB disks


def test_parse_mdadm_detail_rejects_other_output() -> None:
    with pytest.raises(ValueError, match="Raid Level"):
        stripe.parse_mdadm_detail("mdadm: cannot open /dev/md0: No such file or directory\n")


def test_parse_lvs_json_of_a_striped_volume() -> None:
    segments = stripe.parse_lvs_json((DATA / "lvm" / "lvs-stripe-4disks.json").read_text())
    assert len(segments) == 1
    segment = segments[0]
    assert segment["segtype"] == "striped"
    assert segment["stripes"] == 4 and segment["stripe_size_bytes"] == 64 << 10
    assert segment["lv_name"] == "data" and segment["vg_name"].startswith("fsmatrix")
    assert segment["devices"] == ["/dev/vdc", "/dev/vdd", "/dev/vde", "/dev/vdf"]
    assert segment["lv_path"] == f"/dev/{segment['vg_name']}/data"
    assert segment["lv_size_bytes"] and segment["lv_size_bytes"] % (4 * 64 << 10) == 0


def test_parse_lvs_json_rejects_text() -> None:
    with pytest.raises(ValueError, match="lvs JSON"):
        stripe.parse_lvs_json("  LV   VG   Attr\n  data vg0  -wi-a-----\n")


@pytest.mark.parametrize("case", golden_cases("mdadm"))
def test_parse_mdadm_detail_golden(case: Golden) -> None:
    """Every captured `mdadm --detail` in tests/data/mdadm/ parses to its expected array, or is refused."""
    case.check(stripe.parse_mdadm_detail)


@pytest.mark.parametrize("case", golden_cases("lvm"))
def test_parse_lvs_json_golden(case: Golden) -> None:
    """Every captured `lvs --reportformat json` in tests/data/lvm/ parses to its expected segments, or is refused."""
    case.check(stripe.parse_lvs_json)


# --------------------------------------------------------------------------------------------
# cells and refusals


@pytest.mark.parametrize(
    ("filesystem", "settings", "needed"),
    [
        ("ext4", {}, 1),
        ("raw", {}, 1),
        ("tmpfs", {}, 0),
        ("ext4", {"layout": "split-journal"}, 2),
        ("ext4", {"layout": "split-journal", "journal_filesystem": "tmpfs"}, 1),
        ("xfs", {"layout": "md-raid0", "stripe_disks": 2}, 2),
        ("raw", {"layout": "md-raid0"}, 4),  # the default stripe_disks
        ("ext4", {"layout": "lvm-stripe", "stripe_disks": 5}, 5),
        ("raw", {"layout": "lvm-stripe", "stripe_disks": 16}, 16),
    ],
)
def test_required_devices(filesystem: str, settings: dict[str, Any], needed: int) -> None:
    assert storage.required_devices(StorageSpec.from_dict(cell(filesystem, **settings))) == needed


def test_required_devices_without_stripe_settings_uses_the_defaults() -> None:
    bare = {"filesystem": "ext4", "storage": {"layout": "lvm-stripe"}}
    assert storage.required_devices(StorageSpec.from_dict(bare)) == 4


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"layout": "md-raid0", "stripe_disks": 1}, "stripe_disks must be an integer >= 2"),
        ({"layout": "lvm-stripe", "stripe_size": "48K"}, "power of two"),
        ({"layout": "md-raid0", "stripe_size": "2K"}, "at least 4K"),
        ({"layout": "raid5"}, "must be one of single, split-journal"),
    ],
)
def test_bad_stripe_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        storage.required_devices(StorageSpec.from_dict(cell("ext4", **settings)))


@pytest.fixture
def loops(tmp_path: Path) -> Iterator[list[str]]:
    directory = Path("/var/tmp")  # direct I/O: tmpfs /tmp refuses O_DIRECT
    with tempfile.TemporaryDirectory(prefix="fsmatrix-layouts-", dir=directory) as d:
        with storage.loop_devices(4, 128 << 20, Path(d)) as devices:
            yield devices
        assert attached_under(Path(os.path.realpath(d))) == []
        assert mounted_under(Path(os.path.realpath(d))) == []


def _head(device: str) -> bytes:
    with open(device, "rb") as f:
        return f.read(1 << 20)


@needs_root
@pytest.mark.parametrize("layout", ["md-raid0", "lvm-stripe"])
def test_striped_layout_without_kernel_support_is_skipped_untouched(
    layout: str, loops: list[str], tmp_path: Path
) -> None:
    """This host's kernel has no md and no device-mapper: Skipped, and the disks stay as they were."""
    if stripe.availability(layout) is None:
        pytest.skip(f"this kernel supports {layout}; the guest tests cover it")
    before = [_head(d) for d in loops]
    with (
        pytest.raises(storage.Skipped, match=f"{layout}: the running kernel .* has no"),
        storage.prepare(StorageSpec.from_dict(cell("ext4", layout=layout)), loops, tmp_path / "mnt"),
    ):
        pass
    assert [_head(d) for d in loops] == before
    assert not (tmp_path / "mnt").exists()


@needs_root
def test_a_component_in_use_is_refused_before_anything_is_assembled(loops: list[str], tmp_path: Path) -> None:
    mount_point = tmp_path / "busy"
    mount_point.mkdir()
    storage.format_device("ext2", loops[2])
    subprocess.run(["mount", loops[2], str(mount_point)], check=True)
    try:
        with (
            pytest.raises(storage.UnsafeDevice, match="is mounted at"),
            storage.prepare(StorageSpec.from_dict(cell("ext4", layout="md-raid0")), loops, tmp_path / "mnt"),
        ):
            pass
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
    assert not (tmp_path / "mnt").exists()


def test_md_and_vg_names_of_another_run_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An existing array or volume group of fsmatrix's name is never taken over."""
    from contextlib import ExitStack

    fake_dev = tmp_path / "dev-md"
    fake_dev.mkdir()
    monkeypatch.setattr(stripe, "md_name", lambda pid=None: "fsmatrix-1")
    monkeypatch.setattr(stripe.os.path, "lexists", lambda p: p == "/dev/md/fsmatrix-1")
    with ExitStack() as stack, pytest.raises(stripe.StripeError, match="md array named fsmatrix-1 already exists"):
        stripe.assemble("md-raid0", ["/dev/null", "/dev/zero"], 64 << 10, stack)
    monkeypatch.setattr(stripe, "_volume_groups", lambda: ["fsmatrix7"])
    monkeypatch.setattr(stripe, "vg_name", lambda pid=None: "fsmatrix7")
    with ExitStack() as stack, pytest.raises(stripe.StripeError, match="volume group named fsmatrix7 already exists"):
        stripe.assemble("lvm-stripe", ["/dev/null", "/dev/zero"], 64 << 10, stack)


@needs_root
def test_teardown_finds_an_md_array_over_a_component_through_sysfs(
    loops: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Teardown finds arrays (udev may re-assemble one after --stop) through the components' holders."""
    name = devmod.kernel_name(loops[0])
    rdev = os.stat(loops[0]).st_rdev
    sysfs = tmp_path / "sys"
    (sysfs / "class" / "block" / name / "holders" / "md126").mkdir(parents=True)
    (sysfs / "dev" / "block").mkdir(parents=True)
    (sysfs / "dev" / "block" / f"{os.major(rdev)}:{os.minor(rdev)}").symlink_to(f"../../class/block/{name}")
    monkeypatch.setattr(devmod, "SYS_ROOT", sysfs)
    assert stripe._md_holders(loops[0]) == ["md126"]
    assert stripe._md_holders(loops[1]) == []


# --------------------------------------------------------------------------------------------
# raw on a loop device (host)


def _diskstats(name: str) -> tuple[int, int]:
    counters = parse_diskstats(Path("/proc/diskstats").read_text())[name]
    return counters.read_bytes, counters.write_bytes


@needs_root
def test_prepare_raw_single_neither_formats_nor_mounts(loops: list[str], tmp_path: Path) -> None:
    before = _head(loops[0])
    with storage.prepare(StorageSpec.from_dict(cell("raw")), loops[:1], tmp_path / "mnt") as prepared:
        assert prepared.bare_device and prepared.data_device == loops[0]
        assert prepared.readback == {"data": {"filesystem": "raw", "device": loops[0], "size_bytes": 128 << 20}}
        assert prepared.diskstat_names == [devmod.kernel_name(loops[0])]
        assert prepared.component_diskstat_names == []
        assert [d["path"] for d in prepared.devices] == [loops[0]]
        assert mounted_under(tmp_path) == []
        assert prepared.data.is_dir() and not any(prepared.data.iterdir())
    assert _head(loops[0]) == before  # no mkfs
    assert not (tmp_path / "mnt").exists()


@needs_root
def test_fio_on_a_raw_device_does_its_io_there(loops: list[str], tmp_path: Path) -> None:
    device = loops[1]
    name = devmod.kernel_name(device)
    scratch = tmp_path / "scratch"
    ws = Workspace(data=tmp_path, journal=tmp_path, scratch=scratch, device=device)
    params = {"pattern": "randrw", "file_size": "1G", "jobs": 2, "runtime": 2, "record_size": "4k"}
    read0, write0 = _diskstats(name)
    outcome = fio.run_cell(standalone_cell("fio", params), ws, timeout=300)
    read1, write1 = _diskstats(name)
    assert outcome.verification == {"status": "passed"}, outcome.verification
    # file_size 1G does not fit: each of the two jobs gets half of the 128 MiB device.
    assert outcome.details["raw"] == {
        "device": device,
        "device_size_bytes": 128 << 20,
        "region_bytes_per_job": 64 << 20,
    }
    command = outcome.details["phases"][-1]["command"]
    assert f"--filename={device}" in command and "--offset_increment=67108864" in command
    # The layout pass wrote both regions; the measured phase read and wrote on the device.
    assert write1 - write0 >= 128 << 20
    assert read1 - read0 >= outcome.metrics["io_bytes"] - (write1 - write0)
    assert outcome.metrics["read_iops"] > 0 and outcome.metrics["write_iops"] > 0
    assert list(tmp_path.glob("fsmatrix-fio*")) == []  # nothing in the (empty) data directory


def test_raw_region_in_whole_records() -> None:
    cell = standalone_cell("fio", {"pattern": "read", "record_size": "64k", "file_size": "1G", "jobs": 3})
    params = cell.typed_params(fio.Params)
    assert fio.raw_region(params, 100 << 20) == (100 << 20) // 3 // (64 << 10) * (64 << 10)
    assert fio.raw_region(dataclasses.replace(params, jobs=1), 8 << 30) == 1 << 30
    with pytest.raises(ValueError, match="too small"):
        fio.raw_region(params, 64 << 10)


@needs_root
def test_sysbench_on_a_raw_device_is_skipped_without_touching_it(loops: list[str], tmp_path: Path) -> None:
    """sysbench fileio checks file sizes with fstat (0 for a block device) and re-creates files
    for seqwr: it cannot run on a device, and must not measure the scratch filesystem instead."""
    device = loops[2]
    name = devmod.kernel_name(device)
    before = _diskstats(name)
    ws = Workspace(data=tmp_path, journal=tmp_path, scratch=tmp_path / "scratch", device=device)
    for mode in ("seqwr", "rndrd"):
        with pytest.raises(storage.Skipped, match="cannot run on a raw block device"):
            sysbench.run_cell(standalone_cell("sysbench", {"mode": mode, "duration": 1}), ws, timeout=60)
    assert _diskstats(name) == before
    assert list(tmp_path.glob("test_file.*")) == []


@needs_root
def test_run_job_raw_fio_result_names_the_device(loops: list[str], tmp_path: Path) -> None:
    workdir = tmp_path / "job"
    workdir.mkdir()
    doc = run_job(
        Job(
            CellRepeat(
                parse_cell(cell("raw", {"fio": {"pattern": "randread", "file_size": "32M", "runtime": 1}})), "raw", 1
            ),
            loops[:1],
            workdir,
            {},
        )
    )
    assert doc["status"] == "passed", doc["reason"]
    assert doc["storage"]["filesystem"] == "raw" and doc["storage"]["layout"] == "single"
    assert doc["storage"]["data_device"] == loops[0]
    assert doc["storage"]["readback"]["data"]["filesystem"] == "raw"
    assert doc["samples"]["devices"] == [devmod.kernel_name(loops[0])]
    assert "components" not in doc["samples"]
    # The sampler saw the measured reads on the device.
    assert doc["metrics"]["device_read_bytes"] >= doc["metrics"]["io_bytes"] * 0.9
    assert mounted_under(tmp_path) == []
