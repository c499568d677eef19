"""``python -m fsmatrix.bench.history`` (runner/fsmatrix/bench/history.py), small: it runs real Otava in
its virtualenv, reports both workloads with the change points it found, and refuses a bad option."""

from __future__ import annotations

import json
import subprocess
import sys

BENCH = [sys.executable, "-m", "fsmatrix.bench.history"]


def test_bench_history_small() -> None:
    args = ["--points", "300", "--series", "5", "--series-points", "100", "--repeats", "1", "--format", "json"]
    done = subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    long, many = measured["workloads"].values()
    assert long["points"] == 300 and many["series"] == 5 and many["points"] == 500
    # five levels 20 % apart in 3 % noise: the four steps of each series found
    assert many["change_points"] >= 5 * 4 and long["change_points"] >= 4
    assert long["total_s"]["median"] > 0 and measured["load_before"] and measured["commit"]


def test_bench_history_bad_option() -> None:
    done = subprocess.run([*BENCH, "--repeats", "0"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip() == (
        "fsmatrix.bench.history: error: --points, --series, --series-points and --repeats must be at least 1"
    )
