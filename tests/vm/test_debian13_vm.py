"""Cells on the Debian 13 guest image (packer/images/debian13.yaml) through `fsmatrix run --backend
qemu`: pgbench on PostgreSQL 17 (its checkpoint counters moved to pg_stat_checkpointer) with every
invariant checked, 3n+1 on GT.M V7.1 verified, data disks found by their serial on the three buses
under Debian 13's udev, and the result naming the image it ran on.

Marked ``slow``: building a second image costs about 5 minutes under TCG, which `make test` (CI's
tier, a 60-minute budget) does not spend; `make test-slow` (or `pytest -m slow tests/vm/test_debian13_vm.py`)
runs it, building debian13 first when it is not in the cache.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import test_pgbench
from conftest import IMAGE_TEST_TIMEOUT, run_on_qemu

pytestmark = [*test_pgbench.pytestmark, pytest.mark.slow]  # root, PostgreSQL on the host for the reference
workdir = test_pgbench.workdir

MATRIX = """\
name: on13
axes:
  image: [debian13]
  filesystem: [ext4]
  workload:
    - pgbench: {script: tpcb-like, scale: 1, clients: 2, threads: 2, duration: 5}
    - threen1: {start: 1, end: 20000, workers: 2, block: 1000}
include:
  - {image: debian13, filesystem: xfs, device.bus: virtio-scsi, workload: {threen1: {start: 1, end: 3000, block: 500}}}
  - {image: debian13, filesystem: btrfs, device.bus: nvme, workload: {threen1: {start: 1, end: 3000, block: 500}}}
defaults:
  storage.disk_size: 1G
  vm: {cpus: 2, memory: 1G}
  timeout: 900
"""


@pytest.mark.timeout(IMAGE_TEST_TIMEOUT)
def test_cells_run_and_verify_on_debian13(tmp_path: Path, workdir: Path) -> None:
    from fsmatrix.backends import image

    built = image.build(echo=print, image="debian13")
    manifest = json.loads(built.manifest.read_text())
    assert manifest["image"] == "debian13" and manifest["suite"] == "trixie"
    assert manifest["tools"]["postgres_bin"] == "/usr/lib/postgresql/17/bin"
    path = tmp_path / "on13.yaml"
    path.write_text(MATRIX)
    results = tmp_path / "results"
    out = run_on_qemu(path, results, workdir, timeout=3000)
    assert out.returncode == 0, out.stdout + out.stderr
    docs = {d["cell_id"]: d for d in (json.loads(p.read_text()) for p in results.glob("on13/*/r1.json"))}
    assert len(docs) == 4 and all(cell_id.split("-")[1] == "debian13" for cell_id in docs)
    for doc in docs.values():
        assert doc["status"] == "passed", doc["reason"]
        assert doc["verification"]["status"] == "passed"
        image_prov = doc["provenance"]["image"]
        assert image_prov["image"] == "debian13" and image_prov["name"] == built.name
        assert doc["provenance"]["kernel"] == manifest["kernel"] and "modules" not in image_prov
    pgbench = next(d for d in docs.values() if d["workload"] == "pgbench")
    assert "PostgreSQL) 17." in json.dumps(pgbench["provenance"]["tools"])
    assert pgbench["metrics"]["checkpoints"] >= 0 and pgbench["metrics"]["wal_bytes"] > 0  # pg_stat_checkpointer
    # The data disk found by its serial on each bus under Debian 13's udev (not by its name: a restored
    # guest finds its hot-plugged disks when it resumes, in PCI slot order, the job disk's first: vdb).
    buses = {d["params"]["device"]["bus"]: d["provenance"]["guest"]["data_disks"]["fsm-data0"] for d in docs.values()}
    assert set(buses) == {"virtio-blk", "virtio-scsi", "nvme"}
    assert re.fullmatch(r"/dev/vd[b-z]", buses["virtio-blk"]) and re.fullmatch(r"/dev/sd[a-z]", buses["virtio-scsi"])
    assert buses["nvme"] == "/dev/nvme0n1"
