"""``python -m fsmatrix.bench.work_cv``: each metric's spread between repeats of a cell, on stored runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO
from fsmatrix.agent import jsonfile
from fsmatrix.bench import work_cv

RUN = REPO / "tests/data/goldens/threen1/threen1"


def test_the_spread_of_time_and_of_the_work_per_operation(capsys: pytest.CaptureFixture[str]) -> None:
    found = work_cv.spreads(RUN)
    by = {(s.cell, s.metric): s for s in found}
    cell = next(c for c, m in by if c.startswith("ext4-"))
    elapsed, written = by[(cell, "elapsed_s")], by[(cell, "device_write_bytes_per_op")]
    assert elapsed.runs == written.runs == 3 and elapsed.cv is not None and written.cv is not None
    assert written.cv < elapsed.cv  # the work per operation varies less than time
    assert by[(cell, "instructions_per_op")].median is None  # these old documents never measured it
    assert work_cv.main([str(RUN), "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["spreads"]) == len(found)
    assert work_cv.main([str(RUN)]) == 0
    assert "| device_write_bytes_per_op | 3 |" in capsys.readouterr().out


def test_a_metric_not_measured_says_why_never_zero(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    for path in run.rglob("r*.json"):
        doc = jsonfile.read(path)
        doc["metrics"]["instructions_per_op"] = None
        doc["metrics_unavailable"] = {"instructions_per_op": "no hardware counters (perf_event_open: ENOENT)"}
        jsonfile.write_atomic(path, doc)
    spread = next(s for s in work_cv.spreads(run) if s.metric == "instructions_per_op")
    assert spread.median is None and spread.unavailable == "no hardware counters (perf_event_open: ENOENT)"
    assert "not available: no hardware counters" in work_cv.markdown([spread])


def test_a_missing_directory_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert work_cv.main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
