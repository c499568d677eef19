"""`fsmatrix search` on the qemu backend (booting the guest image; every test under tests/vm/ is marked
image by tests/conftest.py): a space of four configurations, each stage's runs in the guest. Needs the
engine (stages.run_search)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import FSMATRIX, IMAGE_TEST_TIMEOUT
from fsmatrix.agent import jsonfile

SPACE = """\
name: qemu-search
axes:
  gtm.journal: [before, nobefore]
  mount_options: ["", noatime]
defaults:
  filesystem: ext4
  workload.threen1: {start: 1, end: 2000, workers: 2, block: 500}
  storage.disk_size: 256M
search:
  budget: 30
  repeats: 2
  confirm: 3
  max_candidates: 2
  max_repeats: 3
"""


def test_a_search_on_qemu(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SPACE)
    results, workdir = tmp_path / "results", tmp_path / "work"
    done = subprocess.run(
        [*FSMATRIX, "search", str(path), "--backend", "qemu", "--results", str(results), "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=IMAGE_TEST_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    record = jsonfile.read(results / "qemu-search" / "search.json")
    assert record["answer"] is not None
    assert (results / "qemu-search" / "screen" / "matrix.json").is_file()
    assert (results / "qemu-search" / "search.html").is_file()
