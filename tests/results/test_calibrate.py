"""Calibration: between-batch drift, false alarms on real pairs of batches, detectable effect,
storage, and its use by the gate."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from scipy import stats as sps

from conftest import needs_root, typed
from fsmatrix.cli import main
from fsmatrix.errors import UserError
from fsmatrix.results.render import calibration_report
from fsmatrix.results.store import Result, calibrations
from fsmatrix.results.verdict import calibrate, stats
from test_compare import CELL, make_doc, samples, write_run

# How batch medians of one cell wander on a busy machine (each batch ×): later batches both slower
# and faster than earlier ones, by up to 10 %, while repeats inside a batch agree within 1 %.
DRIFT = (1.00, 1.08, 0.95, 1.05, 0.97, 1.10)


def docs(run_id: str, values: list[float], **prov: Any) -> list[Result]:
    return typed(make_doc(run_id, i, v, **prov) for i, v in enumerate(values, 1))


def batches(drift: tuple[float, ...], *, n: int = 5, cv: float = 0.01, seed: int = 10) -> list[list[Result]]:
    """One batch of N documents of CELL per drift factor, its elapsed_s scattered by ``cv`` around 10 × factor."""
    return [
        docs(f"b{k}", [v * factor for v in samples(10.0, n, seed=seed + k, cv=cv)]) for k, factor in enumerate(drift)
    ]


def elapsed(cal: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = cal["cells"][CELL]["elapsed_s"]
    return entry


# --------------------------------------------------------------------------------------------
# spreads: the between-batch one sees drift, the within-batch one does not


def test_between_batch_spread_sees_drift_the_within_batch_spread_does_not() -> None:
    steady = elapsed(calibrate.calibrate_batches(batches((1.0,) * 6), matrix_name="m", runs=5))
    drifting = elapsed(calibrate.calibrate_batches(batches(DRIFT), matrix_name="m", runs=5))
    # the same repeats inside each batch: the within-batch spread cannot tell the two apart
    assert drifting["within_batch_spread"] == pytest.approx(steady["within_batch_spread"])
    assert 0.005 < drifting["within_batch_spread"] < 0.02
    # the drift is in the batch medians, and only the between-batch spread sees it
    assert steady["between_batch_spread"] < 0.01 < 0.04 < drifting["between_batch_spread"]
    assert drifting["largest_batch_change"] == pytest.approx(1.10 / 0.95 - 1, abs=0.02)
    assert len(drifting["batch_medians"]) == 6 and drifting["runs"] == 30
    # the floor covers the largest change seen between two batches of the same code
    assert drifting["noise_floor"] > drifting["largest_batch_change"]
    assert steady["within_batch_spread"] <= steady["noise_floor"] < 0.05


def test_floor_is_a_prediction_bound_over_batch_medians() -> None:
    medians = [10.0, 10.4, 9.8, 10.2]
    sd = float(sps.tstd([math.log(m) for m in medians]))
    expected = math.expm1(float(sps.t.ppf(0.975, 3)) * math.sqrt(2) * sd)
    assert calibrate.between_batch_floor(medians) == pytest.approx(expected)
    # fewer batches, less known about the drift: a wider bound for the same scatter
    assert calibrate.between_batch_floor(medians[:3]) > calibrate.between_batch_floor([*medians, 10.0, 10.4, 9.8])
    assert calibrate.between_batch_floor([5.0, 5.0, 5.0]) == 0.0
    assert calibrate.between_batch_floor([0.0, 0.0]) == 0.0  # a counter that stays at zero does not move
    assert math.isnan(calibrate.between_batch_floor([10.0]))  # one batch shows no drift
    assert math.isnan(calibrate.between_batch_floor([0.0, 1.0]))  # no ratio to zero
    # the within-batch spread pools the batches' own spreads: a shift between batches is not in it
    assert calibrate.within_batch_spread([[1.0, 2.0], [10.0, 20.0]]) == pytest.approx(math.expm1(math.log(2) / 2**0.5))
    assert calibrate.within_batch_spread([[3.0, 3.0], [7.0, 7.0]]) == 0.0
    assert math.isnan(calibrate.within_batch_spread([[3.0], [7.0]]))
    # the floor is never below the within-batch spread
    assert calibrate.gate_floor(0.05, 0.02) == 0.05 and calibrate.gate_floor(0.01, 0.02) == 0.02
    assert calibrate.gate_floor(math.nan, 0.02) == 0.02 and math.isnan(calibrate.gate_floor(math.nan, math.nan))


# --------------------------------------------------------------------------------------------
# false alarms: real pairs of batches, with an exact interval


def test_false_positive_rate_counts_real_pairs_of_batches_with_an_interval() -> None:
    # batch c runs 20 % slower than a, b and d: a→c and b→c are regressions for the test alone,
    # c→d is faster (not a regression); the other three pairs are quiet. 6 pairs, 2 false alarms.
    cal = calibrate.calibrate_batches(batches((1.0, 1.0, 1.2, 1.0), cv=0.005), matrix_name="m", runs=5)
    e = elapsed(cal)
    assert e["pairs"] == 6
    assert e["false_alarms_without_floor"] == 2 and e["false_positive_rate_without_floor"] == pytest.approx(2 / 6)
    ci = sps.binomtest(2, 6).proportion_ci(method="exact")
    assert e["false_positive_ci_without_floor"] == pytest.approx([ci.low, ci.high])
    # with the floor those 20 % are inside this runner's drift: no false alarm left
    assert e["noise_floor"] > 0.2 and e["false_alarms"] == 0 and e["false_positive_ci"][0] == 0.0
    # the gate itself (gated metrics, Holm) on the same six pairs
    assert cal["gate"]["without_floors"]["hits"] == 2 and cal["gate"]["with_floors"]["hits"] == 0
    assert cal["gate"]["with_floors"]["pairs"] == 6
    assert cal["batches"] == 4 and cal["batch_runs"] == ["a", "b", "c", "d"]
    text = calibration_report.markdown(cal)
    assert f"| {CELL} | elapsed_s | 20 |" in text
    assert "2/6 (33%, 95% CI 4.3%-77.7%) false alarms without noise floors" in text


def test_pairs_are_batches_not_splits() -> None:
    # A pair with a failed batch (fewer than 3 runs) is not compared: it is no verdict, and no split
    # of the other batches' runs stands in for it.
    b = batches((1.0, 1.2, 1.0))
    b[1] = b[1][:2]
    e = elapsed(calibrate.calibrate_batches(b, matrix_name="m", runs=5))
    assert e["pairs"] == 1 and e["batch_medians"][1] is None and e["runs"] == 12
    assert stats.clopper_pearson(0, 6) == pytest.approx((0.0, 1 - 0.025 ** (1 / 6)))
    assert all(math.isnan(v) for v in stats.clopper_pearson(0, 0))


def test_a_drifting_metric_passes_the_gate_without_the_floor_and_is_stopped_with_it(tmp_path: Path) -> None:
    cal = calibrate.calibrate_batches(batches(DRIFT), matrix_name="m", runs=5)
    e = elapsed(cal)
    # the test alone calls some of these pairs of identical code a regression, and a floor of the
    # within-batch spread (what pooled or split samples measure) would not stop one of them
    assert e["false_alarms_without_floor"] >= 3
    values = [[v * factor for v in samples(10.0, 5, seed=10 + k, cv=0.01)] for k, factor in enumerate(DRIFT)]
    within = calibrate.pair_regressions(values, "lower", noise_floor=e["within_batch_spread"])
    assert sum(within) == e["false_alarms_without_floor"]
    assert e["false_alarms"] == 0 and cal["gate"]["with_floors"]["hits"] == 0
    # Stored, the floor is what compare uses: a later A/A pair drifting by 8 % fails the gate
    # without it and passes with it, while a real 40 % slowdown still fails.
    base = write_run(tmp_path, "base", samples(10.0, seed=1, cv=0.005))
    head = write_run(tmp_path, "head", [v * 1.08 for v in samples(10.0, seed=2, cv=0.005)])
    slow = write_run(tmp_path, "slow", [v * 1.4 for v in samples(10.0, seed=3, cv=0.005)])
    args = ["compare", str(base), str(head), "--results", str(tmp_path), "--fail-on-regression", "2%"]
    assert CliRunner().invoke(main, args).exit_code == 1  # no calibration: 8 % is a regression
    path = calibrations.save(cal, tmp_path)
    assert path.parent == tmp_path / "calibration" and path.name.startswith("m-")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 3, result.output  # no FAIL; not shown below 2 % either: NOT DECIDED
    assert "noise floors from" in result.output
    assert CliRunner().invoke(main, [*args, "--calibration", "none"]).exit_code == 1
    assert CliRunner().invoke(main, [*args, "--calibration", str(path)]).exit_code == 3
    slower = ["compare", str(base), str(slow), "--results", str(tmp_path), "--fail-on-regression", "2%"]
    assert CliRunner().invoke(main, slower).exit_code == 1
    assert calibrate.noise_floors([cal])[(CELL, "elapsed_s")] == e["noise_floor"]


def test_detectable_slowdown_is_injected_into_real_batches() -> None:
    quiet = elapsed(calibrate.calibrate_batches(batches((1.0,) * 4), matrix_name="m", runs=5))
    drifting = elapsed(calibrate.calibrate_batches(batches(DRIFT[:4]), matrix_name="m", runs=5))
    noisy = elapsed(calibrate.calibrate_batches(batches((1.0,) * 4, cv=0.15), matrix_name="m", runs=5))
    assert quiet["min_detectable"] is not None and quiet["min_detectable"] <= 0.05
    # the gate cannot see a slowdown smaller than its floor
    assert drifting["min_detectable"] is not None and drifting["min_detectable"] > drifting["noise_floor"]
    assert noisy["min_detectable"] is None or noisy["min_detectable"] > quiet["min_detectable"]
    values = [[10.0, 10.1, 9.9, 10.05, 9.95]] * 3
    assert calibrate.min_detectable(values, "lower") == 0.02  # 1 % is inside the repeats' own spread
    assert calibrate.min_detectable(values, "lower", threshold=0.12) == 0.15  # above the threshold
    assert math.isinf(calibrate.min_detectable([v[:2] for v in values], "lower"))  # too few runs
    # a metric that never moves: no spread, no false alarm
    cpu = calibrate.calibrate_batches(batches((1.0,) * 4), matrix_name="m", runs=5)["cells"][CELL]["cpu_busy_s"]
    assert cpu["noise_floor"] == 0.0 and cpu["false_positive_rate"] == 0.0


def test_batches_from_different_environments_are_refused() -> None:
    b = batches((1.0, 1.0))
    b[1] = docs("b1", samples(10.0, 5), kernel="6.2.0-other")
    with pytest.raises(UserError, match="batch b ran in another environment than batch a"):
        calibrate.calibrate_batches(b, matrix_name="m", runs=5)
    with pytest.raises(UserError, match="at least 2 batches"):
        calibrate.calibrate_batches(b[:1], matrix_name="m", runs=5)


# --------------------------------------------------------------------------------------------
# storage


def test_load_refuses_old_and_foreign_calibrations(tmp_path: Path) -> None:
    base = write_run(tmp_path, "base", samples(10.0, seed=1))
    args = ["compare", str(base), str(base), "--results", str(tmp_path)]
    path = tmp_path / "cal.json"
    # format 1: the floor of one pooled A/A sample; refused with one line saying what to do
    path.write_text(json.dumps({"format_version": 1, "cells": {CELL: {"elapsed_s": {"spread": 0.1}}}}))
    refused = CliRunner().invoke(main, [*args, "--calibration", str(path)])
    assert refused.exit_code == 2
    assert "a calibration of format 1" in refused.output and "run `fsmatrix calibrate` again" in refused.output
    assert "Traceback" not in refused.output
    path.write_text(json.dumps({"format_version": 99}))
    refused = CliRunner().invoke(main, [*args, "--calibration", str(path)])
    assert refused.exit_code == 2 and "not an fsmatrix calibration (format version 2)" in refused.output
    for entry in ({"spread": 0.1}, {"noise_floor": -0.1}, {"noise_floor": True}, {"noise_floor": "5%"}):
        path.write_text(json.dumps({"format_version": 2, "cells": {CELL: {"elapsed_s": entry}}}))
        refused = CliRunner().invoke(main, [*args, "--calibration", str(path)])
        assert refused.exit_code == 2 and "must be {noise_floor: number >= 0 or null" in refused.output, entry
    path.write_text(json.dumps({"format_version": 2, "cells": {CELL: {"elapsed_s": {"noise_floor": None}}}}))
    assert CliRunner().invoke(main, [*args, "--calibration", str(path)]).exit_code == 0


# --------------------------------------------------------------------------------------------
# the command, end to end


@needs_root
@pytest.mark.system  # real host-backend runs (16 s): out of make check
def test_calibrate_runs_separate_batches(tmp_path: Path, write_matrix) -> None:  # type: ignore[no-untyped-def]
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
            "--batches",
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
    cal = calibrations.load(stored[0])
    assert cal["batches"] == 3 and cal["runs_per_batch"] == 3
    assert cal["batch_runs"] == ["calibrate-tiny-a", "calibrate-tiny-b", "calibrate-tiny-c"]
    for run_id in cal["batch_runs"]:  # each batch is its own run, as BASE and HEAD are
        assert len(list((results_root / run_id).glob("*/*.json"))) == 3
    (cell,) = cal["cells"].values()
    e = cell["elapsed_s"]
    assert e["runs"] == 9 and e["pairs"] == 3 and len(e["batch_medians"]) == 3
    assert e["noise_floor"] >= e["within_batch_spread"] > 0
    assert 0 <= e["false_positive_rate"] <= 1 and len(e["false_positive_ci"]) == 2
    assert cal["gate"]["with_floors"]["pairs"] == 3
    assert cal["environment"]["backend"] == ["host"]
    assert "3 batches of 3 runs" in result.output and "smallest detectable slowdown at 3 runs" in result.output


@pytest.mark.parametrize(("option", "value"), [("--runs", "2"), ("--batches", "1"), ("--batches", "27")])
def test_calibrate_rejects_too_few_runs_or_batches(option: str, value: str) -> None:
    result = CliRunner().invoke(main, ["calibrate", "whatever.yaml", option, value])
    assert result.exit_code == 2
    assert option in result.output
