"""A real change, found and attributed (issue 39): the 3n+1 cell of matrix/bench/race-far.yaml
(1..200,000, 4 workers, ext4, 35,000 GT.M global buffers) run on the host backend as ``before``, again
as ``before2`` (the same build), then with a settings file ``gtm.global_buffers: 64`` as ``after``
(the same cell id; ~1.85× slower in docs/measurements.md's race-far runs), pushed to a throwaway
PostgreSQL: ``fsmatrix history`` finds exactly one change point in the elapsed time, naming
gtm.global_buffers 35000 → 64; ``before`` and ``before2`` alone (SQLite) show no change point with
anything in ``changed``; a second push changes nothing.

Runs per build: ``FSMATRIX_HISTORY_RUNS`` (default 12: 36 runs, about 5 min on a quiet 2-core machine).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import FSMATRIX, needs_root
from fsmatrix import matrix
from fsmatrix.bench.throwaway_pg import available, cluster
from test_store import cli_env

pytestmark = [needs_root, pytest.mark.system, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("FSMATRIX_HISTORY_RUNS", "12"))
# race-far.yaml's 35,000-buffer cell alone: its axis of buffers would refuse a settings file that sets them
MATRIX = (
    "name: history-far\naxes:\n  filesystem: [ext4]\ndefaults:\n"
    "  workload.threen1: {start: 1, end: 200000, workers: 4, block: 5000}\n  storage.disk_size: 2G\n"
)


def fsmatrix(*args: str, check: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*FSMATRIX, *args], capture_output=True, text=True, env=cli_env(), timeout=3600, check=False)
    assert done.returncode == check, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def elapsed(url: str) -> dict[str, Any]:
    (series,) = [s for s in json.loads(fsmatrix("history", "--store", url, "--format", "json").stdout)["series"]
                 if s["metric"] == "elapsed_s"]  # fmt: skip
    return series


def buffers(cell: matrix.MatrixCell) -> Any:
    return cell.spec.to_dict()["gtm"]["global_buffers"]


def test_a_real_change_found_and_attributed(tmp_path: Path, workdir: Path) -> None:
    if not available():
        pytest.skip("PostgreSQL 15's initdb (make deps) and runuser are needed")
    plan = tmp_path / "m.yaml"
    plan.write_text(MATRIX)
    (cell,) = matrix.load(plan).cells
    far = [c for c in matrix.load(REPO / "matrix/bench/race-far.yaml").cells if buffers(c) == 35000]
    assert [c.id for c in far] == [cell.id]  # the very cell of race-far.yaml
    settings = tmp_path / "gb64.yaml"
    settings.write_text("gtm.global_buffers: 64\n")
    results = tmp_path / "results"
    for run_id, extra in [("before", []), ("before2", []), ("after", ["--settings", str(settings)])]:
        fsmatrix("run", str(plan), "--run-id", run_id, "--repeat", str(RUNS), "--results", str(results),
                 "--workdir", str(workdir), "--backend", "host", *extra)  # fmt: skip
    runs = [str(results / name) for name in ("before", "before2", "after")]

    # the same build twice (SQLite): whatever Otava finds there, no recorded field changed
    sqlite = f"sqlite:///{tmp_path / 'store.sqlite'}"
    fsmatrix("results", "push", *runs[:2], "--store", sqlite)
    same = elapsed(sqlite)
    assert len(same["points"]) == 2 * RUNS
    assert all(cp["changed"] == {} for cp in same["change_points"]), same["change_points"]
    print(json.dumps({"same_build": {"points": len(same["points"]), "change_points": same["change_points"]}}))

    with cluster("unused-password-of-the-pusher-role") as server:
        server.create_database("history")
        url = server.url("history")
        assert f"{3 * RUNS} new" in fsmatrix("results", "push", *runs, "--store", url).stdout
        series = elapsed(url)
        assert len(series["points"]) == 3 * RUNS
        # Exactly one change point names what changed; a shared machine's sittings can add unattributed
        # ones (noise: nothing recorded differs), which the history says as such.
        (cp,) = [c for c in series["change_points"] if c["changed"]]
        noise = [c for c in series["change_points"] if not c["changed"]]
        assert all(c["index"] != 2 * RUNS for c in noise)
        assert cp["index"] == 2 * RUNS and cp["after_run"] == "after r1"
        assert cp["changed"]["gtm.global_buffers"] == [35000, 64]
        assert set(cp["changed"]) == {"gtm.global_buffers", "settings"}
        assert cp["ratio"] > 1.3 and cp["interval"][0] > 1.0
        print(json.dumps({"points": len(series["points"]), "change_points": series["change_points"]}, indent=1))
        # a second push stores nothing and the history is the same
        assert "0 new" in fsmatrix("results", "push", *runs, "--store", url).stdout
        assert elapsed(url) == series
