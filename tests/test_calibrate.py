"""Calibration: A/A spread, false-positive rate, detectable effect, storage, and its use by the gate."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from conftest import needs_root
from fsmatrix.cli import main
from fsmatrix.results import calibrate
from test_compare import make_doc, samples, write_run


def docs(run_id: str, values: list[float]) -> list[dict[str, object]]:
    return [make_doc(run_id, i, v) for i, v in enumerate(values, 1)]


def test_calibration_of_quiet_and_noisy_cells() -> None:
    quiet = calibrate.calibrate_sides(
        docs("a", samples(10.0, 5, seed=1, cv=0.01)),
        docs("b", samples(10.0, 5, seed=2, cv=0.01)),
        matrix_name="m",
        runs=5,
        trials=100,
    )
    noisy = calibrate.calibrate_sides(
        docs("a", samples(10.0, 5, seed=1, cv=0.15)),
        docs("b", samples(10.0, 5, seed=2, cv=0.15)),
        matrix_name="m",
        runs=5,
        trials=100,
    )
    q = quiet["cells"]["ext4-threen1-1-1000-w4-00000000"]["elapsed_s"]
    n = noisy["cells"]["ext4-threen1-1-1000-w4-00000000"]["elapsed_s"]
    assert q["runs"] == 10 and q["direction"] == "lower"
    assert 0.003 < q["spread"] < 0.03 < n["spread"]
    assert q["aa_verdict"] == "no change"
    assert q["false_positive_rate"] <= 0.05
    assert q["min_detectable"] is not None and q["min_detectable"] <= 0.05
    assert n["min_detectable"] is None or n["min_detectable"] > q["min_detectable"]
    # a metric that never moves: no spread, nothing to detect falsely
    cpu = quiet["cells"]["ext4-threen1-1-1000-w4-00000000"]["cpu_busy_s"]
    assert cpu["spread"] == 0.0 and cpu["false_positive_rate"] == 0.0
    text = calibrate.markdown(quiet)
    assert "| ext4-threen1-1-1000-w4-00000000 | elapsed_s | 10 |" in text


def test_stored_calibration_sets_the_gate_noise_floor(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1, cv=0.005))
    head = write_run(tmp_path, "head", [v * 1.06 for v in samples(10.0, seed=2, cv=0.005)])
    args = ["compare", str(base), str(head), "--results", str(tmp_path), "--fail-on-regression", "2%"]
    assert CliRunner().invoke(main, args).exit_code == 1  # no calibration: 6 % is a regression
    # this runner's A/A runs spread by about ±10 %: a 6 % change is inside its noise
    cal = calibrate.calibrate_sides(
        docs("a", samples(10.0, 5, seed=3, cv=0.1)),
        docs("b", samples(10.0, 5, seed=4, cv=0.1)),
        matrix_name="m",
        runs=5,
    )
    path = calibrate.save(cal, tmp_path)
    assert path.parent == tmp_path / "calibration" and path.name.startswith("m-")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "noise floors from" in result.output
    assert CliRunner().invoke(main, [*args, "--calibration", "none"]).exit_code == 1
    assert CliRunner().invoke(main, [*args, "--calibration", str(path)]).exit_code == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format_version": 99}))
    refused = CliRunner().invoke(main, [*args, "--calibration", str(bad)])
    assert refused.exit_code == 2 and "not an fsmatrix calibration" in refused.output


@needs_root
def test_calibrate_runs_real_aa_pairs(tmp_path: Path, write_matrix) -> None:  # type: ignore[no-untyped-def]
    matrix_file = write_matrix(
        """
name: tiny
axes:
  filesystem: [ext4]
  workload:
    - threen1: {start: 1, end: 20000, workers: 2, block: 2000}
defaults:
  storage.disk_size: 1G
"""
    )
    results_root = tmp_path / "results"
    result = CliRunner().invoke(
        main,
        [
            "calibrate",
            str(matrix_file),
            "--runs",
            "3",
            "--results",
            str(results_root),
            "--workdir",
            str(tmp_path / "w"),
        ],
    )
    assert result.exit_code == 0, result.output
    stored = list((results_root / "calibration").glob("tiny-*.json"))
    assert len(stored) == 1
    cal = json.loads(stored[0].read_text())
    (cell,) = cal["cells"].values()
    assert cell["elapsed_s"]["runs"] == 6
    assert cell["elapsed_s"]["aa_verdict"] in ("no change", "slower", "faster")
    assert 0 <= cell["elapsed_s"]["false_positive_rate"] <= 1
    assert cal["environment"]["backend"] == ["host"]
    assert (results_root / "calibrate-tiny-a").is_dir() and (results_root / "calibrate-tiny-b").is_dir()
    assert "smallest detectable slowdown at 3 runs" in result.output


def test_calibrate_rejects_too_few_runs() -> None:
    result = CliRunner().invoke(main, ["calibrate", "whatever.yaml", "--runs", "2"])
    assert result.exit_code == 2
    assert "--runs" in result.output
