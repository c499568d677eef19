"""A search's real lab (search/lab.py) on the host backend: real GT.M, mkfs and loop devices. A stage is
an ordinary run folder under RESULTS/RUN_ID/STAGE; measuring again reuses every stored run; search.json
records the stages; the race's stored decisions read back as configurations."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from conftest import invoke, needs_root
from fsmatrix import matrix
from fsmatrix.agent import jsonfile
from fsmatrix.backends import BACKENDS
from fsmatrix.matrix import SearchSettings
from fsmatrix.search import lab
from fsmatrix.search.space_of import space_of

pytestmark = [needs_root, pytest.mark.system]

TINY = """\
name: tiny
axes:
  gtm.journal: [before, nobefore]
defaults:
  filesystem: ext4
  workload.threen1: {start: 1, end: 2000, workers: 2, block: 500}
  storage.disk_size: 256M
  timeout: 300
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Loop image files must live on a real disk (direct I/O), not on a tmpfs /tmp.
    with tempfile.TemporaryDirectory(prefix="fsmatrix-search-", dir="/var/tmp") as d:
        yield Path(d)


def test_measure_runs_a_stage_and_reuses_it(tmp_path: Path, workdir: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    found = space_of(matrix.load(path))
    place = lab.SearchPlace(tmp_path / "results", "tiny")
    backend = BACKENDS["host"].make(workdir, [])
    real = lab.RealLab(found, backend, place, SearchSettings(), Console(stderr=True))
    try:
        first = real.measure("screen", found.space.configurations, 2)
        files = {p: p.stat().st_mtime_ns for p in place.stage_dir("screen").rglob("r*.json")}
        again = real.measure("screen", found.space.configurations, 2)
    finally:
        backend.close()
    assert len(first) == 4 and {o.round for o in first} == {1, 2} and all(o.value > 0 for o in first)
    assert {o.config for o in first} == {(0,), (1,)} and {o.stage for o in first} == {"screen"}
    assert again == first  # read back, not run again
    assert {p: p.stat().st_mtime_ns for p in place.stage_dir("screen").rglob("r*.json")} == files
    assert real.runs_used() == 4
    record = jsonfile.read(place.directory / lab.SEARCH_FILE)
    assert record["stages"] == [{"name": "screen", "configurations": 2, "repeats": 2, "folder": "screen"}]
    assert record["answer"] is None
    # the stage is an ordinary run folder: `fsmatrix report` reads it
    report = invoke("report", str(place.stage_dir("screen")))
    assert report.returncode == 0, report.stderr


SMALL_SPACE = """\
name: tiny-search
axes:
  gtm.global_buffers: [35000, 64]
  gtm.journal: [before, nobefore]
  gtm.sync_io: [false, true]
defaults:
  filesystem: ext4
  workload.threen1: {start: 1, end: 3000, workers: 2, block: 500}
  storage.disk_size: 256M
  timeout: 300
search:
  budget: 40
  repeats: 2
  confirm: 3
  max_candidates: 3
  max_repeats: 4
  seed: 1
"""


def test_a_search_end_to_end(tmp_path: Path, workdir: Path) -> None:
    """`fsmatrix search` on a space of 8 configurations (needs the engine: stages.run_search); then the
    same command again resumes it and runs nothing new."""
    path = tmp_path / "s.yaml"
    path.write_text(SMALL_SPACE)
    results = tmp_path / "results"
    args = ("search", str(path), "--backend", "host", "--results", str(results), "--workdir", str(workdir))
    done = invoke(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    directory = results / "tiny-search"
    for name in ("search.md", "search.html", "search.json"):
        assert (directory / name).is_file(), name
    record = jsonfile.read(directory / "search.json")
    assert record["answer"] is not None and record["space"]["configurations"] == 8
    # A winner is named only where the confirmation showed it better than the baseline.
    shown = record["answer"]["shown"]
    start = (
        "No answer: "
        if record["answer"]["best"] is None
        else "Best found: "
        if shown in (None, "better")
        else "Nothing "
    )
    assert f"**{start}" in done.stdout, done.stdout
    runs = sorted(directory.rglob("r*.json"))
    assert 0 < len(runs) <= 40
    again = invoke(*args)
    assert again.returncode == 0, again.stderr
    assert sorted(directory.rglob("r*.json")) == runs  # resumed: every run reused
