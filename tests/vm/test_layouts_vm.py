"""Storage layouts in the guest, where md and device-mapper exist: md-raid0 under xfs, an
lvm-stripe under raw fio, split-journal jfs with an ext2 journal, and an md array torn down when
mkfs fails (boots under QEMU, each a few minutes under TCG). Without a VM:
tests/agent/storage/test_layouts.py.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import IMAGE_TEST_TIMEOUT, vms_under
from fsmatrix.backends import image
from fsmatrix.backends.qemu.backend import QemuBackend
from fsmatrix.matrix import MatrixCell, expand_document

# --------------------------------------------------------------------------------------------
# in the guest: md, LVM, split-journal (three boots)


@pytest.fixture(scope="module")
def built() -> image.ImagePaths:
    return image.build()


@pytest.fixture
def vm_workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fsmatrix-layouts-test-", dir="/var/tmp") as d:
        yield Path(d)


def _vm_cell(filesystem: str, workload: dict[str, Any], settings: dict[str, Any]) -> MatrixCell:
    doc = {
        "axes": {"filesystem": [filesystem], "workload": [workload]},
        "defaults": {"storage.disk_size": "1G", "vm.memory": "1G", **settings},
    }
    return expand_document(doc, "layouts").cells[0]


def _run_in_vm(
    cell: MatrixCell, workdir: Path, caplog: pytest.LogCaptureFixture, tmp_path: Path, name: str
) -> dict[str, Any]:
    backend = QemuBackend(workdir=workdir)
    backend.preflight([cell])
    with caplog.at_level(logging.INFO, logger="fsmatrix"):
        result = backend.run(cell, 1)
    # The guest's agent.log holds the raw mdadm / lvs output the parsers' test data came from.
    (tmp_path / f"{name}-host.log").write_text(caplog.text)
    print(f"host log with the guest agent.log: {tmp_path / f'{name}-host.log'}")
    assert not vms_under(workdir)
    assert not list(workdir.iterdir())
    return result


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_md_raid0_xfs_in_the_guest(
    built: image.ImagePaths, vm_workdir: Path, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    vm_cell = _vm_cell(
        "xfs",
        {"threen1": {"start": 1, "end": 100000, "workers": 2}},
        {"storage.layout": "md-raid0", "storage.stripe_disks": 2, "storage.stripe_size": "64K"},
    )
    result = _run_in_vm(vm_cell, vm_workdir, caplog, tmp_path, "md-raid0")
    assert result["status"] == "passed", result.get("reason")
    assert result["verification"]["status"] == "passed"
    store = result["storage"]
    assert store["layout"] == "md-raid0" and store["filesystem"] == "xfs"
    md = store["readback"]["stripe"]
    assert md["level"] == "raid0" and md["stripes"] == 2 and md["stripe_size_bytes"] == 64 << 10
    assert md["mdadm"]["chunk_size"] == "64K" and len(md["mdadm"]["members"]) == 2
    assert md["kernel_name"].startswith("md") and store["data_device"] == md["device"]
    assert [d["serial"] for d in store["devices"]] == ["fsm-data0", "fsm-data1"]
    assert result["provenance"]["tools"]["mdadm"].startswith("mdadm")
    # mkfs.xfs took the stripe geometry from the array: sunit = chunk, swidth = 2 chunks.
    geometry = store["readback"]["data"]["geometry"]
    assert geometry["sunit"] * geometry["block_size"] == 64 << 10
    assert geometry["swidth"] == 2 * geometry["sunit"]
    assert store["readback"]["data"]["device"] == md["device"]
    # The headline counters are the array's, the components' are beside them.
    samples = result["samples"]
    assert samples["devices"] == [md["kernel_name"]]
    assert sorted(samples["components"]["devices"]) == sorted(d["kernel_name"] for d in store["devices"])
    assert samples["components"]["io"]["write_bytes"] > 0 and samples["io"]["write_bytes"] > 0


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_lvm_stripe_raw_fio_in_the_guest(
    built: image.ImagePaths, vm_workdir: Path, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    vm_cell = _vm_cell(
        "raw",
        {"fio": {"pattern": "randread", "file_size": "256M", "runtime": 5}},
        {"storage.layout": "lvm-stripe", "storage.stripe_disks": 4, "storage.stripe_size": "64K"},
    )
    result = _run_in_vm(vm_cell, vm_workdir, caplog, tmp_path, "lvm-stripe")
    assert result["status"] == "passed", result.get("reason")
    store = result["storage"]
    assert store["layout"] == "lvm-stripe" and store["filesystem"] == "raw"
    lv = store["readback"]["stripe"]
    assert lv["segtype"] == "striped" and lv["stripes"] == 4 and lv["stripe_size_bytes"] == 64 << 10
    assert len(lv["lvs"]["devices"]) == 4 and lv["kernel_name"].startswith("dm-")
    assert store["readback"]["data"] == {"filesystem": "raw", "device": lv["device"], "size_bytes": lv["size_bytes"]}
    assert store["data_device"] == lv["device"]
    assert result["details"]["raw"]["device"] == lv["device"]
    assert [d["serial"] for d in store["devices"]] == [f"fsm-data{i}" for i in range(4)]
    assert result["samples"]["devices"] == [lv["kernel_name"]]
    # randread over four disks: every component served some of the measured reads.
    assert result["samples"]["components"]["io"]["reads"] > 0
    assert result["metrics"]["device_read_bytes"] > 0
    assert result["provenance"]["tools"]["lvm"]


@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_split_journal_jfs_with_ext2_journal_in_the_guest(
    built: image.ImagePaths, vm_workdir: Path, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    vm_cell = _vm_cell(
        "jfs",
        {"threen1": {"start": 1, "end": 100000, "workers": 2}},
        {"storage.layout": "split-journal", "storage.journal_filesystem": "ext2"},
    )
    result = _run_in_vm(vm_cell, vm_workdir, caplog, tmp_path, "split-journal")
    assert result["status"] == "passed", result.get("reason")
    assert result["verification"]["status"] == "passed"
    readback = result["storage"]["readback"]
    assert readback["data"]["filesystem"] == "jfs" and readback["journal"]["filesystem"] == "ext2"
    assert readback["data"]["device"] != readback["journal"]["device"]
    assert [d["serial"] for d in result["storage"]["devices"]] == ["fsm-data0", "fsm-data1"]
    assert len(result["samples"]["devices"]) == 2


@pytest.mark.slow
@pytest.mark.image
@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_md_raid0_is_torn_down_when_mkfs_fails_in_the_guest(
    built: image.ImagePaths, vm_workdir: Path, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """A fourth boot (slow): mkfs.xfs refuses its options on the assembled array; the array is
    still stopped and the components' superblocks zeroed, and the error names mkfs."""
    vm_cell = _vm_cell(
        "xfs",
        {"fio": {"pattern": "randread", "file_size": "16M", "runtime": 1}},
        {"storage.layout": "md-raid0", "storage.stripe_disks": 3, "mkfs_options": "-b size=1000"},
    )
    result = _run_in_vm(vm_cell, vm_workdir, caplog, tmp_path, "md-mkfs-fails")
    assert result["status"] == "error"
    assert "mkfs.xfs" in result["reason"] and "teardown incomplete" not in result["reason"]
    log = caplog.text
    assert "md: mdadm --create" in log
    # The data disks' kernel names depend on the order they were plugged in (boot or hot-plug).
    disks = ", ".join([r"/dev/vd[b-z]"] * 3)
    assert re.search(rf"md array /dev/md/fsmatrix-\d+ stopped, superblocks zeroed on {disks}", log)
