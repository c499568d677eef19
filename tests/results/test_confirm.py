"""The gate on paired runs, and its confirmation: a regression fails only when a second batch shows it again."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from conftest import typed
from fsmatrix.results.verdict import metrics, stats
from test_compare import invoke, make_doc, samples, write_run


def test_paired_comparison_is_the_t_test_on_the_pairs_log_ratios() -> None:
    base = [10.0, 12.0, 9.0, 11.0, 10.5]
    head = [b * r for b, r in zip(base, [1.08, 1.12, 1.10, 1.07, 1.11], strict=True)]
    c = stats.compare_paired(list(zip(base, head, strict=True)), "lower")
    logs = np.log(np.asarray(head) / np.asarray(base))
    assert c.test == "paired-log"
    assert c.p_value == pytest.approx(sps.ttest_1samp(logs, 0).pvalue)
    assert c.ratio == pytest.approx(math.exp(logs.mean()))
    assert c.ci_low < c.ratio < c.ci_high and c.ci_low > 1
    assert c.verdict == "slower" and c.worse_by == pytest.approx(c.ratio - 1)


def test_pairing_sees_a_change_that_drift_between_pairs_hides() -> None:
    # Each pair ran at a different moment of a drifting machine (±25 %); within a pair head is 10 % slower.
    drift = [1.0, 1.25, 0.8, 1.15, 0.9]
    noise = [1.0, 1.01, 0.99, 1.005, 0.995]
    base = [10 * d for d in drift]
    head = [10 * d * 1.10 * n for d, n in zip(drift, noise, strict=True)]
    assert stats.compare_samples(base, head, "lower").verdict == "no change"
    assert stats.compare_paired(list(zip(base, head, strict=True)), "lower").verdict == "slower"


def test_paired_edge_cases() -> None:
    same = stats.compare_paired([(1.0, 1.0)] * 4, "lower")
    assert same.p_value == 1.0 and same.verdict == "no change"
    exact = stats.compare_paired([(1.0, 2.0), (2.0, 4.0), (3.0, 6.0)], "higher")
    assert exact.p_value == 0.0 and exact.verdict == "faster" and exact.ratio == pytest.approx(2.0)
    assert stats.compare_paired([(1.0, 1.1)] * 2, "lower").verdict == "not enough data"
    # a value <= 0 has no log ratio: independent samples instead, and the test says so
    assert stats.compare_paired([(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)], "lower").test == "mann-whitney"
    with pytest.raises(ValueError, match="direction"):
        stats.compare_paired([(1.0, 1.0)] * 3, "up")


def test_pairs_are_matched_by_repeat_and_skip_failed_runs() -> None:
    base = [make_doc("b", r, 10.0 + r) for r in (1, 2, 3, 4)]
    head = [make_doc("h", r, 20.0 + r) for r in (2, 3, 4, 5)]
    head[1]["status"] = "failed"  # repeat 3
    assert metrics.metric_pairs(typed(base), typed(head), "elapsed_s") == [(12.0, 22.0), (14.0, 24.0)]


def _batch(root: Path, name: str, effect: float, seed: int) -> tuple[Path, Path]:
    base = write_run(root, f"{name}-base", samples(10.0, seed=seed))
    head = write_run(root, f"{name}-head", [v * (1 + effect) for v in samples(10.0, seed=seed + 1)])
    return base, head


@pytest.mark.parametrize(("second_effect", "status", "word"), [(0.3, 1, "CONFIRMED"), (0.0, 3, "not confirmed")])
def test_a_regression_fails_only_when_the_confirmation_batch_shows_it_again(
    tmp_path: Path, second_effect: float, status: int, word: str
) -> None:
    base, head = _batch(tmp_path, "first", 0.3, seed=1)
    base2, head2 = _batch(tmp_path, "again", second_effect, seed=5)
    alone = invoke("compare", str(base), str(head), "--paired", "--fail-on-regression", "5%")
    assert alone.exit_code == 1, alone.output  # the first batch on its own fails the gate
    flagged = tmp_path / "flagged.txt"
    args = ["compare", str(base), str(head), "--paired", "--fail-on-regression", "5%", "--flagged-to", str(flagged)]
    md = invoke(*args, "--confirm", str(base2), str(head2), "--format", "md")
    assert md.exit_code == status, md.output
    assert word in md.output and "### Confirmation batch" in md.output
    assert flagged.read_text().strip() == make_doc("x", 1, 1.0)["cell_id"]
    doc = json.loads(invoke(*args, "--confirm", str(base2), str(head2), "--format", "json").output)
    assert doc["exit_status"] == status
    assert bool(doc["confirmed"]) == (status == 1) and bool(doc["not_confirmed"]) == (status == 3)
    # A regression the second batch does not show is no PASS: the first batch did not show it below 5 %.
    assert doc["verdict"] == ("FAIL" if status == 1 else "NOT DECIDED")
    assert doc["confirmation"]["rows"][0]["test"] == "paired-log"


@pytest.mark.parametrize(("effect", "status", "word"), [(0.3, 1, "UNCONFIRMABLE"), (0.0, 0, "nothing to confirm")])
def test_without_confirmation_runs_a_regression_fails_and_nothing_passes(
    tmp_path: Path, effect: float, status: int, word: str
) -> None:
    base, head = _batch(tmp_path, "first", effect, seed=1)
    missing = [str(tmp_path / "never-ran-base"), str(tmp_path / "never-ran-head")]
    out = invoke("compare", str(base), str(head), "--paired", "--fail-on-regression", "5%", "--confirm", *missing)
    assert out.exit_code == status and word in out.output


def test_confirm_needs_a_threshold(tmp_path: Path) -> None:
    base, head = _batch(tmp_path, "first", 0.0, seed=1)
    out = invoke("compare", str(base), str(head), "--confirm", str(base), str(head))
    assert out.exit_code == 2 and "--fail-on-regression" in out.output
