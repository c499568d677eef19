"""``python -m fsmatrix.bench.history`` (runner/fsmatrix/bench/history.py, bench/history_store.py), small:
it runs real Otava in its virtualenv, reports both workloads with the change points it found, times
`fsmatrix history` over a store made by each side's code (here HEAD's against the working tree's), and
refuses a bad option."""

from __future__ import annotations

import json
import subprocess
import sys

from fsmatrix.bench.history_store import comparable

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


def test_bench_history_over_a_store_against_a_commit() -> None:
    args = ["--store-documents", "60", "--store-cells", "3", "--against", "HEAD", "--repeats", "1", "--format", "json"]
    done = subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    before, after = measured["sides"]["before"], measured["sides"]["after"]
    assert before["series"] == after["series"] > 0 and before["points"] == after["points"] > 0
    assert measured["identical"] and measured["change_points"] >= 0 and measured["documents"] == 60
    assert after["history_s"]["n"] == 1 and measured["ratio"]["history_s"] > 0 and measured["migration_s"]["n"] == 1
    assert measured["before"].endswith("(--against HEAD)") and measured["load_before"] and measured["load_after"]


def test_bench_history_store_bad_options() -> None:
    for args, words in [
        (["--against", "HEAD"], "--against compares a store's history: give --store-documents too"),
        (["--store-documents", "5", "--store-cells", "0"], "--store-cells from 1 to --store-documents"),
        (
            ["--store-documents", "5", "--store-cells", "1", "--against", "not-a-commit-0000"],
            "--against 'not-a-commit-0000': not a commit",
        ),
    ]:
        done = subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.strip().startswith("fsmatrix.bench.history: error: "), done.stderr
        assert words in done.stderr


def test_outputs_are_compared_without_the_work_series() -> None:
    """A commit before schema version 3 has no work series and no ``kind``: the rest must match."""
    old = {"detector": "Apache Otava 0.8.0", "series": [{"metric": "elapsed_s", "points": []}]}
    new = {"detector": "Apache Otava 0.8.0", "series": [
        {"metric": "elapsed_s", "kind": "key", "points": []},
        {"metric": "fsyncs_per_op", "kind": "work", "points": []},
    ]}  # fmt: skip
    assert comparable(json.dumps(old)) == comparable(json.dumps(new))
    new["series"][0]["points"] = [1.0]
    assert comparable(json.dumps(old)) != comparable(json.dumps(new))
