"""pgbench in the guest: a split-journal cell through `--backend qemu`, PostgreSQL from the image,
pg_wal on the second virtio disk (ext2). On the host: tests/agent/workloads/test_pgbench.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import test_pgbench
from conftest import run_on_qemu

pytestmark = test_pgbench.pytestmark  # root, PostgreSQL 15
workdir = test_pgbench.workdir  # the fixture: a directory the postgres user reaches, left clean


@pytest.mark.slow
@pytest.mark.image
@pytest.mark.timeout(3600)  # includes building the image when it is not cached
def test_split_journal_cell_in_the_guest(tmp_path: Path, workdir: Path) -> None:
    """`--backend qemu`: PostgreSQL from the image, pg_wal on the second virtio disk (ext2)."""
    from fsmatrix.backends import image

    image.build()
    matrix = tmp_path / "guest.yaml"
    matrix.write_text(
        "name: guest\naxes: {filesystem: [ext4]}\ndefaults:\n"
        "  workload.pgbench: {scale: 1, clients: 2, duration: 5}\n"
        "  storage: {layout: split-journal, journal_filesystem: ext2, disk_size: 1G}\n"
    )
    results = tmp_path / "results"
    out = run_on_qemu(matrix, results, workdir, timeout=1800)
    assert out.returncode == 0, out.stdout + out.stderr
    (path,) = results.glob("guest/*/r1.json")
    doc = json.loads(path.read_text())
    assert doc["status"] == "passed" and doc["provenance"]["backend"] == "qemu", doc["reason"]
    wal = os.path.basename(doc["storage"]["readback"]["journal"]["device"])
    assert doc["details"]["postgres"]["pg_wal_device"] == wal
    assert doc["samples"]["io_by_device"][wal]["write_bytes"] >= 0.9 * doc["metrics"]["wal_bytes"]
