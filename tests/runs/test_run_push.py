"""`fsmatrix run --push` on the host backend (real GT.M, mkfs, loop devices): the run's results land in
the store after each round and at the end, `--settings` is recorded in each result, and a store it
cannot reach leaves the push pending without changing the run's exit status; `results push`
completes it. The stores themselves: tests/results/test_store.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import FSMATRIX, needs_root
from fsmatrix.results.store import database
from fsmatrix.results.store import url as store_url

pytestmark = [needs_root, pytest.mark.system]

MATRIX = (
    "name: pushed\naxes:\n  filesystem: [ext4]\ndefaults:\n"
    "  workload.threen1: {start: 1, end: 2000, workers: 2, block: 1000}\n  storage.disk_size: 200M\n"
)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FSMATRIX, *args], capture_output=True, text=True, timeout=600, check=False)


def test_run_pushes_each_round_and_records_its_settings(tmp_path: Path, workdir: Path) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX)
    settings = tmp_path / "build.yaml"
    settings.write_text("gtm.global_buffers: 2000\n")
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    done = _run(
        "run", str(matrix), "--results", str(tmp_path / "r"), "--workdir", str(workdir), "--repeat", "2",
        "--order", "rounds", "--settings", str(settings), "--push", "--store", url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    # after round 1 and round 2 the store was pushed to; the last push found them all there
    assert "pushed 2 result documents to" in done.stderr and "0 new, 2 already there" in done.stderr
    with database.Store.open(store_url.parse(url)) as store:
        assert store.count() == 2
    # and, as each was written, in the results root's own store: its one SQLite, no index beside it
    with database.Store.open(store_url.parse(f"sqlite:///{tmp_path / 'r' / 'store.sqlite'}")) as store:
        assert sorted(r[0] for r in store.select("SELECT run_id FROM results")) == ["pushed", "pushed"]
    assert not (tmp_path / "r" / "index.sqlite").exists()
    stored = [json.loads(p.read_text()) for p in (tmp_path / "r" / "pushed").glob("*/r*.json")]
    recorded = {json.dumps(d["provenance"]["settings"], sort_keys=True) for d in stored}
    (only,) = recorded
    assert json.loads(only)["values"] == {"gtm.global_buffers": 2000} and json.loads(only)["file"] == str(settings)


def test_an_unreachable_store_leaves_the_push_pending(tmp_path: Path, workdir: Path) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(MATRIX)
    nowhere = f"postgresql://fsmatrix@/fsmatrix?host={tmp_path / 'no-server'}"
    done = _run("run", str(matrix), "--results", str(tmp_path / "r"), "--workdir", str(workdir), "--repeat", "1",
                "--push", "--store", nowhere)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]  # the run's own status: it passed
    assert "push pending:" in done.stderr and "the push is pending: `fsmatrix results push" in done.stderr
    later = f"sqlite:///{tmp_path / 'store.sqlite'}"
    pushed = _run("results", "push", str(tmp_path / "r" / "pushed"), "--store", later)
    assert pushed.returncode == 0 and "1 new" in pushed.stdout, pushed.stderr
