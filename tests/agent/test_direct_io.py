"""Direct I/O that is not: ext3/ext4 with data=journal accept O_DIRECT and quietly buffer it, so a
benchmark asked for direct I/O would measure the page cache. The probe (statx's direct-I/O
alignment) and the fio and sysbench runs it stops, on a real ext4 on a loop device."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import attached_under, mounted_under, needs_root
from fsmatrix.agent import oscache
from fsmatrix.agent.contract import Workspace
from fsmatrix.agent.parsing import standalone_cell
from fsmatrix.agent.storage import loop_devices
from fsmatrix.agent.workloads import fio, sysbench

pytestmark = needs_root


@pytest.fixture(params=["data=ordered", "data=journal"])
def ext4(request: pytest.FixtureRequest) -> Iterator[tuple[str, Workspace]]:
    """A workspace on ext4 mounted with the given data mode (on /var/tmp: loop images need a disk)."""
    with tempfile.TemporaryDirectory(prefix="fsmatrix-dio-", dir="/var/tmp") as d:
        base = Path(d)
        point = base / "mnt"
        point.mkdir()
        with loop_devices(1, 128 << 20, base) as (device,):
            subprocess.run(["mkfs.ext4", "-qF", device], check=True, capture_output=True)
            subprocess.run(["mount", "-o", request.param, device, str(point)], check=True)
            try:
                ws = Workspace(data=point / "data", journal=point / "data", scratch=base / "scratch")
                ws.data.mkdir()
                yield request.param, ws
            finally:
                subprocess.run(["umount", str(point)], check=True)
        assert attached_under(base) == [] and mounted_under(base) == []


def test_the_probe_tells_journalled_data_from_ordered(ext4: tuple[str, Workspace]) -> None:
    mode, ws = ext4
    probe = ws.data / "f"
    probe.touch()
    alignment = oscache.direct_io_alignment(probe)
    if alignment is None:
        pytest.skip("this kernel does not report direct-I/O alignment (statx STATX_DIOALIGN, Linux 6.1+)")
    assert (alignment == 0) == (mode == "data=journal")
    refused = oscache.direct_io_refused(ws.data)
    assert (refused is None) == (mode == "data=ordered")
    assert list(ws.data.iterdir()) == [probe]  # the probe's own file is gone


def test_fio_direct_fails_where_o_direct_is_buffered_and_buffered_runs(ext4: tuple[str, Workspace]) -> None:
    mode, ws = ext4
    direct = fio.run_cell(standalone_cell("fio", {"pattern": "randwrite", "file_size": "4m"}), ws, timeout=60)
    if mode == "data=ordered":
        assert direct.verification == {"status": "passed"}
    else:
        assert direct.verification["status"] == "failed"
        assert "silently buffer O_DIRECT" in direct.verification["message"]
        assert "workload.fio.direct: false" in direct.verification["message"]
        assert direct.details["phases"] == []  # refused before fio ran
        buffered = {"pattern": "randwrite", "file_size": "4m", "direct": False}
        assert fio.run_cell(standalone_cell("fio", buffered), ws, timeout=60).verification == {"status": "passed"}
    assert list(ws.data.iterdir()) == []


def test_sysbench_direct_fails_where_o_direct_is_buffered(ext4: tuple[str, Workspace]) -> None:
    mode, ws = ext4
    params = {"mode": "rndwr", "total_size": "4M", "num_files": 2, "duration": 1}
    outcome = sysbench.run_cell(standalone_cell("sysbench", params), ws, timeout=60)
    if mode == "data=ordered":
        assert outcome.verification == {"status": "passed"}
    else:
        assert outcome.verification["status"] == "failed"
        assert "workload.sysbench.io: buffered" in outcome.verification["message"]
        buffered = sysbench.run_cell(standalone_cell("sysbench", {**params, "io": "buffered"}), ws, timeout=60)
        assert buffered.verification == {"status": "passed"}
    assert list(ws.data.iterdir()) == []
