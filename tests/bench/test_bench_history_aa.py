"""``python -m fsmatrix.bench.history_aa`` (runner/fsmatrix/bench/history_aa.py): a tiny real A/A history
on the host backend (one history of two sittings of three runs) comes back with its points and change
points counted, and a bad option is one line."""

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
@pytest.mark.slow  # 6 real runs, about 1.5 min: `make test-slow`
def test_a_tiny_aa_history(tmp_path: Path) -> None:
    args = ["--histories", "1", "--sittings", "2", "--runs", "3", "--workdir", str(tmp_path / "w"), "--format", "json"]
    done = subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (h,) = doc["histories"]
    assert h["points"] == 6 and 0 < h["min_s"] <= h["median_s"] <= h["max_s"]
    assert h["attributed"] == 0  # the same build throughout: nothing recorded changed
    assert doc["load_before"] and doc["commit"] and len(doc["interval"]) == 2


def test_bad_option() -> None:
    done = subprocess.run([*BENCH, "--runs", "0"], capture_output=True, text=True)
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "fsmatrix.bench.history_aa: error: --histories, --sittings and --runs must be at least 1"
    )
