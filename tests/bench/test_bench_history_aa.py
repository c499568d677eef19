"""``python -m fsmatrix.bench.history_aa`` (runner/fsmatrix/bench/history_aa.py): a tiny real A/A history
on the host backend (one history of two sittings of five short runs) comes back with its points and
change points counted, on time and on the work per operation, the injected change in device bytes
written per operation found within one run of where it was put and attributed to its mark; a bad
option is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs_root

BENCH = [sys.executable, "-m", "fsmatrix.bench.history_aa"]


@needs_root
@pytest.mark.system
@pytest.mark.slow  # 10 real runs, about a minute: `make test-slow`
def test_a_tiny_aa_history(tmp_path: Path) -> None:
    args = ["--histories", "1", "--sittings", "2", "--runs", "5", "--end", "50000", "--inject", "2",
            "--workdir", str(tmp_path / "w"), "--format", "json"]  # fmt: skip
    done = subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (h,) = doc["histories"]
    assert h["points"] == 10 and 0 < h["min_s"] <= h["median_s"] <= h["max_s"]
    assert h["attributed"] == 0  # the same build throughout: nothing recorded changed
    assert doc["load_before"] and doc["commit"] and len(doc["interval"]) == 2
    work = {w["metric"]: w for w in h["work"]}
    assert work["device_write_bytes_per_op"]["points"] == 10  # measured on every run: a series
    assert all(w["attributed"] == 0 for w in work.values())  # A/A on work: nothing recorded changed either
    assert doc["work_change_points"] == sum(w["change_points"] for w in work.values())
    inj = h["injected"]
    assert inj["at"] == 5 and inj["within_one_run"] and inj["attributed"], inj
    assert doc["injected_found"] == 1


def test_bad_option() -> None:
    done = subprocess.run([*BENCH, "--runs", "0"], capture_output=True, text=True)
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "fsmatrix.bench.history_aa: error: --histories, --sittings and --runs must be at least 1"
    )
    done = subprocess.run([*BENCH, "--inject", "1"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "fsmatrix.bench.history_aa: error: --end 200000, --inject 1.0: --end at least 1000, --inject > 0 and not 1"
    )
